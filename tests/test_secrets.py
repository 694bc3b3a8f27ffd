"""No database password reaches any output: log records (tracebacks included), errors,
tool answers, Discord replies, the command line and the metrics.

The password rides in the URL as libpq and asyncpg take it, in the user-info or as a
query parameter; the local server's trust authentication ignores it, so the store works.
The run goes through every path that names the database: the cog's start-up line, a lock
held by another session, the server going away (a proxy the test stops) with a purge left
pending and a start-up that fails, the server coming back, every command of
``python -m stm`` (up and down, with -vv), and the Prometheus exposition. SQLite names a
file, which holds no password: there is nothing of this kind to leak there.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from pgproxy import Proxy
from test_faults_postgres import FEED_LOCK, held

from cogs.short_term_memory import COG_NAME, EXTENSION
from host.console import run_console
from host.demo import make_bot
from stm import DurabilityError, ShortTermMemory, STMConfig, StoreError
from stm.cli._commands import cli
from stm.prometheus import exposition
from stm.testing import ctx, turn

SECRET = "Pw7secretZq"


class Everything(logging.Handler):
    """Every log record of every logger, formatted with its traceback."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.setFormatter(logging.Formatter("%(levelname)s %(name)s %(message)s"))
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextlib.contextmanager
def every_log_record() -> Iterator[Everything]:
    handler = Everything()
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def with_password(url: str, where: str) -> str:
    if where == "user-info":
        return url.replace("://postgres@", f"://postgres:{SECRET}@", 1)
    return f"{url}&password={SECRET}"


def described(exc: BaseException) -> str:
    return "".join(traceback.format_exception(exc))


@pytest.mark.parametrize("where", ["user-info", "query"])
async def test_no_output_holds_the_password(
    where: str, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    proxy = Proxy(postgres_url)
    await proxy.start()
    url = with_password(proxy.url(), where)
    config = STMConfig(
        database=url, busy_timeout_ms=200, statement_timeout_ms=500, delete_retry_seconds=0.05
    )
    shown: list[str] = []  # everything else a person could read
    try:
        with every_log_record() as logs:
            shown.extend(await _through_the_cog(config, proxy))
            shown.extend(await _through_the_library(config, proxy))
            shown.extend(await _through_the_command_line(url, proxy))
            shown.extend(await _through_the_console(config))
    finally:
        await proxy.stop()
    journals = list((tmp_path / "state").rglob("*"))
    shown.extend(str(path) for path in journals)
    shown.extend(p.read_text(errors="replace") for p in journals if p.is_file())
    everything = logs.lines + shown
    assert any("did not answer" in line or "Connect call failed" in line for line in everything)
    assert any("127.0.0.1" in line for line in logs.lines)  # the URL is named, redacted
    leaks = [line for line in everything if SECRET in line]
    assert leaks == [], leaks[:3]


async def _through_the_cog(config: STMConfig, proxy: Proxy) -> list[str]:
    """The cog's start-up line, its memory used while the server is up, then down (the
    unload logs the purge it could not finish)."""
    shown: list[str] = []
    bot = make_bot(config)
    async with bot:
        await bot.load_extension(EXTENSION)
        memory: ShortTermMemory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        await memory.capture(turn(ctx(), "hello"))
        shown.append((await memory.run_tool(ctx(), {"summary": "NOTES"})).message)
        await proxy.stop()
        shown.append((await memory.run_tool(ctx(), {"summary": "DOWN"})).message)
        await memory.clear_short_term_memory_for_user(1)
        try:
            await memory.flush()
        except DurabilityError as exc:
            shown.append(described(exc))
    await proxy.start()
    return shown


async def _through_the_library(config: STMConfig, proxy: Proxy) -> list[str]:
    shown: list[str] = []
    async with ShortTermMemory.open(config) as memory:
        await memory.capture(turn(ctx(channel=11), "hello"))
        shown.append((await memory.run_tool(ctx(channel=11), {"summary": "NOTES"})).message)
        shown.append(repr(memory.metrics))
        shown.append(exposition(memory))
        shown.append(str(memory.stats))
        async with held(config.database, FEED_LOCK):
            shown.append((await memory.run_tool(ctx(channel=11), {"summary": "LOCKED"})).message)
            await memory.clear_short_term_memory_for_channel(11)
            try:
                await memory.flush()
            except DurabilityError as exc:
                shown.append(described(exc))
        await memory.flush()
        proxy.freeze()
        shown.append((await memory.run_tool(ctx(channel=11), {"summary": "FROZEN"})).message)
        proxy.thaw()
        await proxy.stop()
        try:
            await ShortTermMemory.open(config)
        except StoreError as exc:
            shown.append(described(exc))
        else:
            raise AssertionError("opened with the server down")
        await memory.clear_short_term_memory_for_user(2)
        try:
            await memory.close()
        except DurabilityError as exc:
            shown.append(described(exc))
    await proxy.start()
    return shown


COMMANDS = [
    ["stats"],
    ["--json", "stats"],
    ["check"],
    ["--json", "check"],
    ["show", "--user", "1"],
    ["show", "--channel", "10"],
    ["show", "shortterm:server:100:10"],
    ["export", "--user", "1"],
    ["janitor", "--dry-run", "--crude-ttl-hours", "12", "--summary-ttl-hours", "24"],
    ["janitor", "--yes", "--crude-ttl-hours", "12", "--summary-ttl-hours", "24"],
    ["migrate"],
    ["purge-user", "1", "--yes"],
    ["purge-channel", "10", "--yes"],
]


async def _through_the_command_line(url: str, proxy: Proxy) -> list[str]:
    """Every command, with the URL as --database and as STM_DATABASE, verbose, with the
    server up and down."""
    runner = CliRunner()

    def run(args: list[str], env: dict[str, str] | None = None) -> str:
        result = runner.invoke(cli, args, env=env)
        text = result.output + (result.stderr if result.stderr_bytes is not None else "")
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            text += described(result.exception)
        return text

    shown: list[str] = []
    for up in (True, False):
        if not up:
            await proxy.stop()
        for args in COMMANDS:
            shown.append(await asyncio.to_thread(run, ["-vv", "--database", url, *args]))
            shown.append(await asyncio.to_thread(run, args, {"STM_DATABASE": url}))
    assert any("Error" in line for line in shown)  # the down half failed, in one line each
    await proxy.start()
    return shown


async def _through_the_console(config: STMConfig) -> list[str]:
    """The bundled console's start-up banner names the memory."""
    printed: list[str] = []

    async def ask(_: str) -> str | None:
        return None

    await run_console(config=config, ask=ask, out=printed.append)
    return printed
