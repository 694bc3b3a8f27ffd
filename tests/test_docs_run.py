"""Every Python block of the README and the integration guide runs, against the installed
package and offline: the bot the guide's sections 2 and 3 write passes the tests its
section 11 writes (a turn, a note from the tool, a delete, ``/memory forget``, a purge,
Discord's events), and so does the README's one-file bot; the guide's snippets run; a
block that is a fragment says so, with a reason, and still compiles.

How blocks are marked and assembled is in ``docs_blocks.py``. A block that breaks fails
these tests: ``test_a_broken_block_fails_the_run`` breaks some on purpose.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from docs_blocks import Block, blocks, bot_project, compiled, run_snippets, run_tests, write_files

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
GUIDE = ROOT / "docs" / "guide.md"
# The languages whose blocks are code to run; the others (shell lines, ini) are not Python.
PYTHON = "python"
# What a fragment may be, at most: the rest must run.
MOST_FRAGMENTS = 2


def page(path: Path, text: str | None = None) -> list[Block]:
    return blocks(path.read_text(encoding="utf-8") if text is None else text, path.name)


def python_blocks(*pages: list[Block]) -> list[Block]:
    return [b for p in pages for b in p if b.language == PYTHON]


async def run_project(folder: Path, *pages: list[Block], tests_from: list[Block]) -> list[str]:
    """Write the pages' files (then the test files of ``tests_from``) into ``folder`` and
    run every test file there, as the bot's own pytest would; the tests that ran."""
    files = write_files(folder, *pages)
    tests = [f for f in write_files(folder, tests_from) if f.parent.name == "tests"]
    assert files and tests
    ran: list[str] = []
    with bot_project(folder):
        for test in sorted(tests):
            ran += await run_tests(test, folder / "scratch")
    return ran


def test_every_python_block_is_run_or_says_why_not() -> None:
    """No block is left out silently: each is a file of the bot, a snippet that runs, or
    a fragment with its reason; every one compiles."""
    found = python_blocks(page(README), page(GUIDE))
    assert len(found) >= 8, [str(b) for b in found]
    for block in found:
        compiled(block)  # a syntax error names the block
    fragments = [b for b in found if b.not_run is not None]
    assert all(len(b.not_run or "") > 20 for b in fragments), fragments
    assert len(fragments) <= MOST_FRAGMENTS, [str(b) for b in fragments]
    assert {b.file for b in page(GUIDE) if b.file} >= {
        "bot.py",
        "cogs/chat.py",
        "tests/test_bot.py",
        "tests/test_events.py",
        "pytest.ini",
    }


async def test_the_guides_bot_passes_the_guides_tests(tmp_path: Path) -> None:
    """Sections 2 and 3 write a bot; section 11's tests pass against it."""
    guide = page(GUIDE)
    ran = await run_project(tmp_path / "bot", guide, tests_from=guide)
    assert "test_a_turn_a_note_a_delete_and_forget" in ran
    assert "test_edits_and_deletes_reach_the_memory" in ran
    assert len(ran) >= 6, ran


async def test_the_readmes_bot_passes_the_guides_tests(tmp_path: Path) -> None:
    """The README's one-file bot is the same bot: the guide's tests pass against it too."""
    readme = page(README)
    assert [b.file for b in readme if b.file] == ["bot.py"]
    ran = await run_project(tmp_path / "bot", readme, tests_from=page(GUIDE))
    assert "test_a_turn_a_note_a_delete_and_forget" in ran


async def test_the_guides_snippets_run(tmp_path: Path) -> None:
    """The blocks that are neither files nor fragments run in order, with their tests."""
    ran = await run_snippets(page(GUIDE), tmp_path)
    assert "test_recall_expiry_and_a_failing_store" in ran
    assert "test_write_behind_waits_for_its_time" in ran


# -- the run can fail -----------------------------------------------------------------------
BREAKS = [
    # The bot of section 2 back to taking no config, as section 11 once disagreed with it.
    ("    def __init__(self, config: STMConfig) -> None:", "    def __init__(self) -> None:"),
    # The turn no longer recorded: section 11's checks of memory fail.
    ("        record_turn(self.bot, ctx, sent)", "        pass"),
    # A helper renamed in the docs but not in the code.
    ("await discord.delete(oslo)", "await discord.remove(oslo)"),
]


@pytest.mark.parametrize(("old", "new"), BREAKS)
async def test_a_broken_block_fails_the_run(tmp_path: Path, old: str, new: str) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    assert text.count(old) == 1, old
    broken = page(GUIDE, text.replace(old, new))
    with pytest.raises((AssertionError, TypeError, AttributeError)):
        await run_project(tmp_path / "bot", broken, tests_from=broken)


def test_a_block_without_its_marker_is_a_snippet_and_a_bad_one_is_found() -> None:
    text = "Text.\n\n<!-- not run: only a line of something larger -->\n```python\nx(\n```\n"
    (block,) = blocks(text, "page.md")
    assert block.not_run == "only a line of something larger" and block.line == 4
    with pytest.raises(SyntaxError):
        compiled(block)
    (plain,) = blocks("```python\nawait f()\n```\n", "page.md")
    assert plain.file is None and plain.not_run is None
    compiled(plain)  # top-level await is allowed in a snippet


def test_no_page_needs_a_script_from_the_network() -> None:
    """Diagrams are text: a mermaid fence would load mermaid.js from a CDN."""
    pages = [*(ROOT / "docs").rglob("*.md"), README]
    assert [str(p) for p in pages if "```mermaid" in p.read_text(encoding="utf-8")] == []
