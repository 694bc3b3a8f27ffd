"""How long the memory takes to answer while another process holds the lock it needs.

Run as a script, against this tree or another checkout::

    PYTHONPATH=. python benchmarks/lock_wait.py
    PYTHONPATH=. python benchmarks/lock_wait.py --database postgresql://postgres@127.0.0.1/postgres

For each store (SQLite always; PostgreSQL when ``--database`` or ``STM_DATABASE`` names a
server, in a scratch schema dropped afterwards) and each ``STM_BUSY_TIMEOUT_MS`` given,
another process holds the lock every writing batch takes (SQLite: ``BEGIN IMMEDIATE``;
PostgreSQL: the feed's counter row ``FOR UPDATE``) while the memory is asked for an
upgrade (``run_tool``), a cold read (``build_context`` of a server it never saw, in a
database another process made) and a ``flush()`` of a channel clear (which tries twice
before it raises). It prints how long each took to answer and what it answered, the
median of ``--reps`` tries, and how long the clear took to land once the lock was
released.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from stm import (
    DialogueMessage,
    DurabilityError,
    GenerationFinished,
    ShortTermMemory,
    STMConfig,
    ToolResult,
    TurnContext,
)

SQLITE_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""
POSTGRES_HOLDER = """
import asyncio, sys
import asyncpg
async def main():
    conn = await asyncpg.connect(sys.argv[1])
    transaction = conn.transaction()
    await transaction.start()
    await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
    print("locked", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    await transaction.rollback()
    await conn.close()
asyncio.run(main())
"""


def ctx(channel: int = 10, server: int = 100) -> TurnContext:
    return TurnContext(user_id=1, channel_id=channel, server_id=server)


@asynccontextmanager
async def lock_held(database: str) -> AsyncIterator[None]:
    """Another process holds the write lock until the block ends."""
    script = POSTGRES_HOLDER if database.startswith("postgres") else SQLITE_HOLDER
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        script,
        database,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert (await holder.stdout.readline()).strip() == b"locked"
        yield
    finally:
        holder.stdin.write(b"release\n")
        await holder.stdin.drain()
        await holder.wait()


async def timed(call: Callable[[], Awaitable[Any]]) -> tuple[float, str]:
    """How long ``call`` took to answer, and what it answered."""
    started = time.perf_counter()
    try:
        result = await call()
    except DurabilityError:
        return time.perf_counter() - started, "raised DurabilityError"
    seconds = time.perf_counter() - started
    if isinstance(result, ToolResult):
        return seconds, f"success={result.success}"
    return seconds, "answered"


async def measure(database: str, busy_ms: int, reps: int, journal: Path) -> dict[str, Any]:
    config = STMConfig(
        database=database, busy_timeout_ms=busy_ms, journal=str(journal), delete_retry_seconds=0.05
    )
    async with ShortTermMemory.open(config):
        pass  # made by another process: this one cannot know a key it never saw has no row
    async with ShortTermMemory.open(config) as memory:
        await memory.capture(
            GenerationFinished(
                context=ctx(),
                messages=[DialogueMessage(role="user", content="hi", author_id=1)],
            )
        )
        assert (await memory.run_tool(ctx(), {"summary": "before"})).success
        await memory.flush()
        figures: dict[str, list[float]] = {"run_tool": [], "cold read": [], "flush": []}
        answers: dict[str, str] = {}
        landed: list[float] = []
        for rep in range(reps):
            async with lock_held(database):
                seconds, answers["run_tool"] = await timed(
                    lambda: memory.run_tool(ctx(), {"summary": "while locked"})
                )
                figures["run_tool"].append(seconds)
                channel = 1000 + rep
                cold = ctx(channel, server=9000 + channel)  # a server it never saw
                seconds, answers["cold read"] = await timed(
                    functools.partial(memory.build_context, cold)
                )
                figures["cold read"].append(seconds)
                await memory.clear_short_term_memory_for_channel(channel)
                seconds, answers["flush"] = await timed(memory.flush)
                figures["flush"].append(seconds)
                released = time.perf_counter()
            await memory.flush()
            landed.append(time.perf_counter() - released)
    return {
        "answers": answers,
        "median": {k: statistics.median(v) for k, v in figures.items()},
        "landed": statistics.median(landed),
    }


@asynccontextmanager
async def scratch(kind: str, server: str, folder: Path, busy: int) -> AsyncIterator[str]:
    """A new database of ``kind``: an SQLite file, or a schema on ``server`` (dropped)."""
    if kind == "sqlite":
        yield str(folder / f"lock-{busy}.sqlite3")
        return
    try:
        import asyncpg
    except ImportError:
        raise SystemExit("PostgreSQL needs asyncpg: pip install 'discord-stm[postgres]'") from None

    schema = f"bench_{secrets.token_hex(4)}"
    conn = await asyncpg.connect(server)
    await conn.execute(f"CREATE SCHEMA {schema}")
    try:
        yield server + ("&" if "?" in server else "?") + f"search_path={schema}"
    finally:
        await conn.execute(f"DROP SCHEMA {schema} CASCADE")
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--database", default=os.environ.get("STM_DATABASE", ""))
    parser.add_argument("--busy-ms", type=int, nargs="+", default=[200, 1000, 5000])
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    kinds = ["sqlite"]
    if args.database.startswith(("postgresql://", "postgres://")):
        kinds.append("postgresql")
    print(f"median of {args.reps}; the lock is held by another process throughout")
    print(f"{'store':<11} {'busy_ms':>7}  {'run_tool':<24} {'cold read':<20} "
          f"{'flush of a clear':<34} clear lands after release")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            for busy in args.busy_ms:
                async with scratch(kind, args.database, Path(tmp), busy) as database:
                    found = await measure(database, busy, args.reps, Path(tmp) / f"{kind}-{busy}")
                m, a = found["median"], found["answers"]
                print(
                    f"{kind:<11} {busy:>7}  "
                    f"{m['run_tool'] * 1000:6.0f} ms {a['run_tool']:<14} "
                    f"{m['cold read'] * 1000:6.0f} ms {a['cold read']:<10} "
                    f"{m['flush'] * 1000:6.0f} ms {a['flush']:<24} "
                    f"{found['landed'] * 1000:6.0f} ms"
                )
    if len(kinds) == 1:
        print("(PostgreSQL not measured: pass --database postgresql://... or set STM_DATABASE)")


if __name__ == "__main__":
    asyncio.run(main())
