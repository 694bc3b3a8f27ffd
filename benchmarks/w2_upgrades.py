"""W2 upgrade storm: many callers upgrade summaries at once; count acknowledged durable upgrades.

An upgrade is acknowledged when ``run_tool`` returns success, which it does
only after the transaction holding it has committed (``synchronous = FULL``).
Each call gets a new TurnContext, as each generation does: a successful
upgrade disables the tool for the rest of its turn. Every caller works in its
own channel of one server, so one upgrade writes two rows (the user-scoped
and the server-scoped entry). The floor is sqlite3 committing one row per
transaction, with the same durability.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .common import scratch_dir, text

SERVER = 7


def summary(caller: int, n: int) -> str:
    return text(f"s{caller}.{n}", 1000)


async def run_stm(callers: int, per_caller: int) -> dict[str, Any]:
    from stm import ShortTermMemory, STMConfig, TurnContext
    from stm.keys import server_key

    with scratch_dir() as folder:
        path = str(folder / "stm.sqlite3")
        memory = await ShortTermMemory.open(STMConfig(database=path))
        failures = 0
        try:
            arguments = [
                [{"summary": summary(c, n)} for n in range(per_caller)] for c in range(callers)
            ]

            async def caller(c: int) -> None:
                nonlocal failures
                for args in arguments[c]:
                    ctx = TurnContext(user_id=100 + c, channel_id=5000 + c, server_id=SERVER)
                    result = await memory.run_tool(ctx, args)
                    failures += not result.success

            base = memory.stats
            start = time.perf_counter()
            await asyncio.gather(*(caller(c) for c in range(callers)))
            seconds = time.perf_counter() - start
            stats = memory.stats
        finally:
            await memory.close()
        # Every channel's server row must hold its caller's last summary.
        db = sqlite3.connect(path)
        try:
            stored = dict(db.execute("SELECT key, summary FROM short_term_memories"))
        finally:
            db.close()
    wrong = sum(
        stored.get(server_key(SERVER, 5000 + c)) != summary(c, per_caller - 1)
        for c in range(callers)
    )
    upgrades = callers * per_caller
    commits = stats["commits"] - base["commits"]
    return {
        "upgrades_per_s": upgrades / seconds,
        "seconds": seconds,
        "upgrades": upgrades,
        "failed": failures,
        "wrong_rows": wrong,
        "commits": commits,
        "upgrades_per_commit": upgrades / max(commits, 1),
        "round_trips": stats["round_trips"] - base["round_trips"],
    }


async def run_sqlite3(callers: int, per_caller: int) -> dict[str, Any]:
    # One writer, one row per transaction: what a caller pays without group commit.
    upgrades = callers * per_caller
    with scratch_dir() as folder:
        db = sqlite3.connect(folder / "floor.sqlite3", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("CREATE TABLE memories (key TEXT PRIMARY KEY, summary TEXT)")
            values = [(f"k{c}", summary(c, n)) for n in range(per_caller) for c in range(callers)]
            start = time.perf_counter()
            for row in values:
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "INSERT INTO memories (key, summary) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET summary = excluded.summary",
                    row,
                )
                db.execute("COMMIT")
            seconds = time.perf_counter() - start
        finally:
            db.close()
    return {
        "upgrades_per_s": upgrades / seconds,
        "seconds": seconds,
        "upgrades": upgrades,
        "upgrades_per_commit": 1.0,
    }


SYSTEMS: dict[str, Callable[[int, int], Awaitable[dict[str, Any]]]] = {
    "stm": run_stm,
    "sqlite3": run_sqlite3,
}


def run(system: str, quick: bool) -> dict[str, Any]:
    callers, per_caller = (20, 20) if quick else (100, 100)
    result = asyncio.run(SYSTEMS[system](callers, per_caller))
    result["callers"], result["per_caller"] = callers, per_caller
    return result
