"""W4 purge: how long purges take, and how long they stall upgrades, at 100k, 1M and 3M rows.

Two phases on a copy of a cached database (``bigdb``):

1. Durable deletes: user purges and channel clears, each timed until the
   delete is committed and the WAL checkpointed (``writer.flush(scrub=False)``
   where the library has it, else the whole ``flush()``).
2. Stalls: 20 upgraders call ``run_tool`` (a 1 KB summary, a new
   ``TurnContext`` each time, a short pause between calls) while a user is
   purged and ``flush()`` waits for the purge's erasure of the text on disk.
   Every upgrade's latency is recorded; the stall is the longest latency of
   an upgrade that overlapped a purge-and-flush. The upgrades that overlapped
   no purge give the undisturbed latency to compare with.

The PostgreSQL row (when a server is named) fills a scratch database through
the public API instead, at the smallest size, since bigdb writes SQLite files.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from . import bigdb
from .common import median, percentile, scratch_dir, text
from .database import Skipped, memory_database, open_memory, skipped
from .w3_restart import shifted_clock

# (full rows, quick rows) per system: the report names the size that actually ran.
SIZES = {
    "stm-small": (100_000, 10_000),
    "stm-medium": (1_000_000, 20_000),
    "stm-large": (3_000_000, 40_000),
    "stm-postgresql": (100_000, 10_000),
}
UPGRADERS = 20
PAUSE = 0.005  # seconds each upgrader waits between its upgrades
PURGES = 3
UPGRADE_SERVER = 1


@dataclass(frozen=True)
class Population:
    """Who and where has rows, so purges hit real data."""

    rows: int
    users: int
    server_of: Callable[[int], int]
    channels: list[int]


async def _durable_deletes(
    memory: Any, population: Population, targets: list[int], count: int, rng: random.Random
) -> dict[str, Any]:
    writer_flush = getattr(memory.writer, "flush", None)
    no_scrub = writer_flush is not None and "scrub" in inspect.signature(writer_flush).parameters

    async def durable() -> None:
        if no_scrub and writer_flush is not None:
            await writer_flush(scrub=False)
        else:
            await memory.flush()

    times: dict[str, list[float]] = {"user": [], "user_in_server": [], "channel": []}
    for user in targets[:count]:
        t0 = time.perf_counter()
        await memory.clear_short_term_memory_for_user(user)
        await durable()
        times["user"].append((time.perf_counter() - t0) * 1e3)
    for user in targets[count:]:
        t0 = time.perf_counter()
        await memory.clear_short_term_memory_for_user(user, population.server_of(user))
        await durable()
        times["user_in_server"].append((time.perf_counter() - t0) * 1e3)
    for channel in rng.sample(population.channels, min(count, len(population.channels))):
        t0 = time.perf_counter()
        await memory.clear_short_term_memory_for_channel(channel)
        await durable()
        times["channel"].append((time.perf_counter() - t0) * 1e3)
    out: dict[str, Any] = {
        "durable_delete_wait": "writer.flush(scrub=False)" if no_scrub else "flush()"
    }
    for name, values in times.items():
        out[f"{name}_p50_ms"] = median(values)
        out[f"{name}_p99_ms"] = percentile(values, 99)
    return out


async def _stalls(memory: Any, targets: list[int]) -> dict[str, Any]:
    from stm import TurnContext

    upgrades: list[tuple[float, float]] = []
    failed = 0
    stop = asyncio.Event()

    async def upgrader(c: int) -> None:
        nonlocal failed
        n = 0
        while not stop.is_set():
            # Keys of their own, upgraded again and again: the database keeps its size.
            ctx = TurnContext(
                user_id=50_000_000 + c, channel_id=90_000_000 + c, server_id=UPGRADE_SERVER
            )
            arguments = {"summary": text(f"w4.{c}.{n}", 1000)}
            t0 = time.perf_counter()
            result = await memory.run_tool(ctx, arguments)
            upgrades.append((t0, time.perf_counter()))
            failed += not result.success
            n += 1
            await asyncio.sleep(PAUSE)

    tasks = [asyncio.create_task(upgrader(c)) for c in range(UPGRADERS)]
    windows: list[tuple[float, float]] = []
    try:
        await asyncio.sleep(0.5)  # the undisturbed rate first
        for user in targets:
            t0 = time.perf_counter()
            await memory.clear_short_term_memory_for_user(user)
            await memory.flush()
            windows.append((t0, time.perf_counter()))
            await asyncio.sleep(0.3)
    finally:
        stop.set()
        await asyncio.gather(*tasks)

    def overlaps(start: float, end: float) -> bool:
        return any(start < w_end and end > w_start for w_start, w_end in windows)

    during = [(end - start) * 1e3 for start, end in upgrades if overlaps(start, end)]
    outside = [(end - start) * 1e3 for start, end in upgrades if not overlaps(start, end)]
    purges = [(end - start) * 1e3 for start, end in windows]
    return {
        "purge_flush_p50_ms": median(purges),
        "purge_flush_max_ms": max(purges),
        "stall_max_ms": max(during, default=0.0),
        "upgrades_during_purges": len(during),
        "upgrade_p50_ms": median(outside),
        "upgrade_p99_ms": percentile(outside, 99),
        "upgrades": len(upgrades),
        "upgrades_failed": failed,
    }


async def _measure(memory: Any, population: Population, quick: bool) -> dict[str, Any]:
    rng = random.Random(4)
    count = 10 if quick else 30
    # Users nobody purged yet, so every timed purge has rows to delete and text to erase.
    targets = rng.sample(range(1, population.users + 1), 2 * count + PURGES)
    out: dict[str, Any] = {"rows": population.rows, "purges_each": count}
    out.update(await _durable_deletes(memory, population, targets[: 2 * count], count, rng))
    out.update(await _stalls(memory, targets[2 * count :]))
    out["purges_with_flush"] = PURGES
    out["upgraders"] = UPGRADERS
    return out


async def run_sqlite(rows: int, quick: bool) -> dict[str, Any]:
    source, layout = bigdb.ensure(rows)
    population = Population(
        rows=layout.rows,
        users=layout.users,
        server_of=layout.user_server,
        channels=[
            bigdb.Layout.channel(server, n)
            for server in range(1, layout.servers + 1)
            for n in range(0, bigdb.CHANNELS_PER_SERVER, 50)
        ],
    )
    with scratch_dir() as folder:
        big = bigdb.copy(source, folder)
        bigdb.warm(big)
        memory = await open_memory(str(big), clock=shifted_clock(layout.now))
        try:
            return await _measure(memory, population, quick)
        finally:
            await memory.close()


async def run_postgresql(rows: int, quick: bool) -> dict[str, Any]:
    from stm import TurnContext

    users = rows // 2  # each upgrade below writes a user row and a server row
    servers = max(1, users // 100)

    def server_of(user: int) -> int:
        return 100 + user % servers

    async with memory_database("postgresql", "w4") as database:
        memory = await open_memory(database)
        try:

            async def fill(first: int) -> None:
                for user in range(first, users + 1, 100):
                    ctx = TurnContext(
                        user_id=user, channel_id=1_000_000 + user, server_id=server_of(user)
                    )
                    await memory.run_tool(ctx, {"summary": text(f"fill{user}", 200)})

            await asyncio.gather(*(fill(first) for first in range(1, 101)))
            await memory.flush()
            population = Population(
                rows=2 * users,
                users=users,
                server_of=server_of,
                channels=[1_000_000 + u for u in range(1, users + 1, 97)],
            )
            return await _measure(memory, population, quick)
        finally:
            await memory.close()


SYSTEMS = dict.fromkeys(SIZES)


def run(system: str, quick: bool) -> dict[str, Any]:
    full, small = SIZES[system]
    rows = small if quick else full
    runner = run_postgresql if system == "stm-postgresql" else run_sqlite
    try:
        result = asyncio.run(runner(rows, quick))
    except Skipped as exc:
        result = skipped(str(exc))
        result["rows"] = rows
    return result
