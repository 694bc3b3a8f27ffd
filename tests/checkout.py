"""The tests leave the checkout as they found it.

Every test runs in an empty working folder of its own, with ``STM_DATABASE`` there and
no other ``STM_*`` setting from the shell: the working-directory defaults of the library
and the bot (``data/stm.sqlite3``, ``.env``) can reach neither the checkout nor a
database or ``.env`` a developer keeps in it.

And the session fails if the checkout changed all the same: ``git status --porcelain
--ignored`` at the start and at the end, with every file it lists (untracked and ignored
ones too) compared by size and modification time, so a file that was already there and
got written counts as well. What test tools and an editable install write there by
design is left out (``_is_cache``).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from stm import STMConfig
from stm._config import ENV_PREFIX

ROOT = Path(__file__).resolve().parent.parent
CACHES = {".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "__pycache__"}
Snapshot = dict[str, tuple[str, int, int]]

_before = pytest.StashKey[Snapshot | str]()
_found = pytest.StashKey[list[str] | str]()


@pytest.fixture(autouse=True)
def outside_the_checkout(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """An empty working folder for the test, holding the default database."""
    folder = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(folder)
    for field in STMConfig.model_fields:
        monkeypatch.delenv(f"{ENV_PREFIX}{field.upper()}", raising=False)
    monkeypatch.setenv(f"{ENV_PREFIX}DATABASE", str(folder / "stm.sqlite3"))
    return folder


def _is_cache(path: str) -> bool:
    """Written by pytest, hypothesis, mypy, ruff, Python, or by pip installing the project
    (``*.egg-info``, ``build/``)."""
    parts = Path(path).parts
    return parts[0] == "build" or any(p in CACHES or p.endswith(".egg-info") for p in parts)


def snapshot(root: Path = ROOT) -> Snapshot | str:
    """What git lists as changed, untracked or ignored under ``root``, with each file's
    size and modification time; or why there is nothing to compare."""
    if shutil.which("git") is None:
        return "git is not installed"
    top = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--show-toplevel"], capture_output=True, text=True
    )
    if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root.resolve():
        return f"{root} is not a git checkout"
    listed = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain=v1", "-z", "--ignored",
         "--untracked-files=all", "--no-renames"],
        capture_output=True, check=True,
    ).stdout  # fmt: skip
    found: Snapshot = {}
    for entry in listed.decode(errors="surrogateescape").split("\0"):
        if not entry or _is_cache(entry[3:]):
            continue
        status, path = entry[:2], entry[3:]
        try:
            info = (root / path).lstat()
        except FileNotFoundError:  # a tracked file deleted
            found[path] = (status, -1, -1)
            continue
        found[path] = (status, info.st_size, info.st_mtime_ns)
    return found


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    return [
        f"{path}: {before.get(path)} -> {after.get(path)}"
        for path in sorted(before.keys() | after.keys())
        if before.get(path) != after.get(path)
    ]


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_before] = snapshot()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_before, "the session did not start")
    if isinstance(before, str):
        session.config.stash[_found] = f"checkout check skipped: {before}"
        return
    after = snapshot()
    assert not isinstance(after, str), after
    changed = changes(before, after)
    if changed:
        session.config.stash[_found] = changed
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    found = terminalreporter.config.stash.get(_found, [])
    if isinstance(found, str):
        terminalreporter.write_sep("-", found)
    elif found:
        terminalreporter.write_sep("=", "the tests changed the checkout", red=True, bold=True)
        terminalreporter.write_line("(git status, size, modification time) before -> after:")
        for line in found:
            terminalreporter.write_line(f"  {line}")
