"""``bot.py`` stopped by SIGTERM or Ctrl-C drains the memory's pending work.

Real subprocesses with a write-behind of an hour, so that identity rows and counters,
and the scrub after a /refresh, are still pending when the signal arrives: only a clean
close (the cog unloaded, ``memory.close()`` awaited) can put them in the file.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from stm.store._shred import readable

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.process
PROMPT = re.compile(r"\w+@[\w/]+(?: persona \d+)?> ")
# How long a step may take before the test gives up: a guard against hanging, not a measure.
DEADLINE = 8.0


def environment(database: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DISCORD_", "OPENAI_"))}
    env.update(
        STM_DATABASE=str(database),
        # Nothing written behind, and no scrub, happens on its own during the test.
        STM_WRITE_BEHIND_SECONDS="3600",
        STM_SCRUB_DELAY_SECONDS="3600",
        **extra,
    )
    return env


class Console:
    """``python bot.py --console`` on a pipe: type a line, wait for the next prompt."""

    def __init__(self, database: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "bot.py"), "--console"],
            cwd=database.parent,
            env=environment(database, STM_REFRESH_CADENCE="1"),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._out: list[str] = []
        # Prompts end without a newline, so stdout is read a character at a time.
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._wait_for_prompts(1)

    @property
    def output(self) -> str:
        return "".join(self._out)

    def _read(self) -> None:
        assert self.process.stdout is not None
        while char := self.process.stdout.read(1):
            self._out.append(char)

    def _wait_for_prompts(self, count: int) -> None:
        give_up = time.monotonic() + DEADLINE
        while len(PROMPT.findall(self.output)) < count:
            if self.process.poll() is not None or time.monotonic() > give_up:
                raise AssertionError(f"no prompt #{count}; output so far:\n{self.output}")
            time.sleep(0.01)

    def type(self, *lines: str) -> None:
        assert self.process.stdin is not None
        for line in lines:
            count = len(PROMPT.findall(self.output))
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
            self._wait_for_prompts(count + 1)

    def stop(self, sig: signal.Signals) -> tuple[int | None, str]:
        """Send ``sig``; the exit status (None if it did not exit in time) and stderr."""
        self.process.send_signal(sig)
        try:
            code: int | None = self.process.wait(DEADLINE)
        except subprocess.TimeoutExpired:
            code = None
            self.process.kill()
            self.process.wait()
        assert self.process.stdin and self.process.stdout and self.process.stderr
        self._reader.join(DEADLINE)
        stderr = self.process.stderr.read()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            pipe.close()
        return code, stderr


def rows(database: Path) -> dict[str, tuple[str | None, int]]:
    with sqlite3.connect(database) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        found = db.execute(f"SELECT key, summary, turns_since_refresh FROM {readable(db)}")
        result = {key: (summary, turns) for key, summary, turns in found}
    db.close()
    return result


def file_bytes(database: Path) -> bytes:
    return b"".join(p.read_bytes() for p in database.parent.glob(database.name + "*"))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_closes_the_console_and_lands_pending_work(
    tmp_path: Path, sig: signal.Signals
) -> None:
    database = tmp_path / "stm.sqlite3"
    console = Console(database)
    try:
        # An upgrade in #games (acknowledged, so durable at once), then /refresh clears it:
        # the delete lands, the scrub that rewrites the file waits for the hour.
        console.type("/in harbor/games", "chess with the walrus tonight", "bring the board")
        assert "update_short_term_memory" in console.output and "-> ok" in console.output
        console.type("/refresh")
        # Turns whose identity rows and counters are only written behind.
        console.type("/in harbor/general", "planning a trip to Lisbon")
        console.type("/as bob", "/in dm", "a secret for the DM")
        before = rows(database)
    finally:
        code, stderr = console.stop(sig)

    after = rows(database)
    general, games, bob_dm = 1101, 1102, 9502
    pending = {
        f"shortterm:server:1100:{general}",
        f"shortterm:user:501:{general}",
        f"shortterm:user:502:{bob_dm}",
    }
    assert not pending & before.keys(), "the test needs work still pending at the signal"
    assert pending <= after.keys(), f"pending work lost at shutdown; stderr:\n{stderr}"
    assert after[f"shortterm:server:1100:{general}"][1] >= 1  # the counter written behind
    assert not any(key.endswith(f":{games}") for key in after)
    assert b"walrus" not in file_bytes(database)  # the pending scrub ran on close
    assert code == 0, f"exit status {code}; stderr:\n{stderr}"
    assert "Traceback" not in stderr


# ``python bot.py`` on Discord, with the gateway connection replaced by a stand-in that
# loads the cog as login() would, captures one turn and then waits like a connected bot.
DISCORD_MODE = """
import asyncio, sys
sys.path.insert(0, sys.argv[1])
from host import discord_bot
from cogs.short_term_memory._cog import COG_NAME
from stm import DialogueMessage, GenerationFinished, TurnContext

async def start(self, token):
    await self.setup_hook()
    ctx = TurnContext(user_id=501, channel_id=1101, server_id=1100, user_text="hi")
    said = [DialogueMessage(role="user", content="hi", author_id=501),
            DialogueMessage(role="assistant", content="hello")]
    # The first turn of a key reads its row, and a read commits what is queued with it;
    # the second turn's counter is then only written behind.
    self.dispatch("generation_finished", GenerationFinished(context=ctx, messages=said))
    memory = self.get_cog(COG_NAME).memory
    while memory.stats["cached_keys"] < 2:
        await asyncio.sleep(0.01)
    await memory.flush()
    self.dispatch("generation_finished", GenerationFinished(context=ctx, messages=said))
    for _ in range(3):
        await asyncio.sleep(0)
    print("connected", flush=True)
    await asyncio.Event().wait()

discord_bot.ChatBot.start = start
import bot
sys.exit(bot.main([]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_a_signal_closes_the_discord_bot_and_lands_pending_work(
    tmp_path: Path, sig: signal.Signals
) -> None:
    database = tmp_path / "stm.sqlite3"
    env = environment(
        database,
        DISCORD_TOKEN="not-used",
        OPENAI_MODEL="not-called",
        OPENAI_BASE_URL="http://127.0.0.1:9/v1",
    )
    with subprocess.Popen(
        [sys.executable, "-c", DISCORD_MODE, str(ROOT)],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None and process.stderr is not None
        try:
            assert process.stdout.readline() == "connected\n", process.stderr.read()
            # The second turn's counter is only written behind.
            assert rows(database)["shortterm:server:1100:1101"][1] == 1
            process.send_signal(sig)
            code = process.wait(DEADLINE)
        finally:
            if process.poll() is None:
                process.kill()
        stderr = process.stderr.read()
    after = rows(database)
    assert after["shortterm:server:1100:1101"][1] == 2, f"pending work lost; stderr:\n{stderr}"
    assert code == 0, f"exit status {code}; stderr:\n{stderr}"
    assert "Traceback" not in stderr
