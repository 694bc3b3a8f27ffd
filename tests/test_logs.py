"""Logs: one logger tree under ``stm``; what users said and what the model summarised
appears only at DEBUG; every warning and error about memory names a scope key or an id."""

from __future__ import annotations

import ast
import logging
import re
from pathlib import Path

import pytest

from stm import DurabilityError, ShortTermMemory, STMConfig
from stm.testing import Clock, ctx, faulty_memory, turn

ROOT = Path(__file__).resolve().parent.parent
SAID = "WORDS-THE-USER-SAID-5e1f"
SUMMARY = "WORDS-OF-THE-SUMMARY-a93c"
REFUSED = "WORDS-OF-A-REFUSED-SUMMARY-07d2"
NAMES_A_KEY_OR_ID = re.compile(r"shortterm:(user|server):\d+|\b(user|channel|server)[ :]\d+")


def _text(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "\n" + logging.Formatter().formatException(record.exc_info)
    return text


async def test_text_only_at_debug_and_every_warning_names_a_key(
    config: STMConfig, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn, an upgrade, a failed upgrade, failed reads, a clear and a purge retried
    through a store fault: the users' and the model's words are in DEBUG records only,
    and every WARNING or ERROR record names the key or ids it is about."""
    async with ShortTermMemory.open(config, clock=clock) as first:
        # Rows from an earlier run, so that the faulty run must read (and fail to).
        c = ctx(user=2, channel=12)
        await first.capture(turn(c, "earlier"))
        assert (await first.run_tool(c, {"summary": "earlier summary"})).success
    memory, store = await faulty_memory(config, clock=clock)
    try:
        with caplog.at_level(logging.DEBUG):
            c = ctx(user=1, channel=10)
            await memory.build_context(c)
            await memory.capture(turn(c, SAID, reply=SAID))
            result = await memory.run_tool(c, {"summary": SUMMARY})
            assert result.success, result.message
            await memory.build_context(ctx(user=1, channel=10))
            store.broken = True
            c = ctx(user=1, channel=10)
            await memory.capture(turn(c, SAID))
            assert not (await memory.run_tool(c, {"summary": REFUSED})).success
            await memory.build_context(ctx(user=3, channel=13, server=300))
            await memory.get_entry("shortterm:user:2:12")
            await memory.clear_short_term_memory_for_channel(10)
            await memory.clear_short_term_memory_for_user(1)
            with pytest.raises(DurabilityError):
                await memory.flush()
            store.broken = False
            await memory.flush()
    finally:
        await memory.close()

    records = caplog.records
    assert any(SUMMARY in _text(r) for r in records if r.levelno == logging.DEBUG)
    loud = [r for r in records if r.levelno >= logging.WARNING]
    assert len(loud) >= 3, [r.getMessage() for r in records]
    ours = [r for r in records if r.name == "stm" or r.name.startswith("stm.")]
    assert ours and all(r.levelno == logging.DEBUG for r in records if r not in ours)
    for record in records:  # the driver's records too (aiosqlite logs each call at DEBUG)
        if record.levelno > logging.DEBUG:
            text = _text(record)
            for words in (SAID, SUMMARY, REFUSED):
                assert words not in text, (record.levelname, text)
        if record.levelno >= logging.WARNING:
            assert NAMES_A_KEY_OR_ID.search(record.getMessage()), record.getMessage()
    said = " ".join(r.getMessage() for r in loud)
    for expected in ("shortterm:user:1:10", "clearing channel 10", "purging user 1"):
        assert expected in said, said


def _logger_names_and_prints(folder: Path) -> tuple[list[str], list[str]]:
    names, prints = [], []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "getLogger" and node.args:
                # (Without a name it is the root logger, which only the command line sets up.)
                arg = node.args[0]
                assert isinstance(arg, ast.Constant), f"{path}: getLogger needs a literal name"
                names.append(str(arg.value))
            if isinstance(func, ast.Name) and func.id == "print":
                prints.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return names, prints


@pytest.mark.parametrize(("folder", "root"), [("stm", "stm"), ("cogs", "discord_stm")])
def test_one_logger_tree_and_no_prints(folder: str, root: str) -> None:
    """The library logs only under ``stm`` and the cog under ``discord_stm`` (the trees
    the README documents), and neither prints."""
    names, prints = _logger_names_and_prints(ROOT / folder)
    assert names
    assert all(name == root or name.startswith(root + ".") for name in names), names
    assert prints == []
