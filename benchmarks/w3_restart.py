"""W3 restart: open a database of a million durable rows, then serve cold keys.

Open time is measured on the big file and on an empty one in the same process,
so "independent of the number of rows" is a ratio, not a guess. Then each of
many existing keys gets its first ``build_context`` (a cache miss: its row and
its recall group are read). The file sits in the OS page cache (it was just
built or read); a disk-cold first read would add the device's latency.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from . import bigdb
from .common import median, percentile, scratch_dir


def shifted_clock(built_at: float) -> Any:
    """A clock that reads the build time now, so the cached rows never look expired."""
    offset = time.time() - built_at - 1.0
    return lambda: time.time() - offset


async def _open_seconds(path: str, clock: Any) -> tuple[float, Any]:
    from stm import ShortTermMemory, STMConfig

    start = time.perf_counter()
    memory = await ShortTermMemory.open(STMConfig(database=path), clock=clock)
    return time.perf_counter() - start, memory


async def run_stm(quick: bool) -> dict[str, Any]:
    from stm import TurnContext

    source, layout = bigdb.ensure(10_000 if quick else 1_000_000)
    users = layout.users
    clock = shifted_clock(layout.now)
    rng = random.Random(3)
    samples = 100 if quick else 1000
    with scratch_dir() as folder:
        # The empty file is created and migrated by a first open: every timed open finds a
        # ready schema. Medians of several opens, as one open takes only a few milliseconds.
        empty = str(folder / "empty.sqlite3")
        await (await _open_seconds(empty, clock))[1].close()
        big = bigdb.copy(source, folder)
        bigdb.warm(big)  # into the page cache, so both files are read from memory
        opens: dict[str, list[float]] = {empty: [], str(big): []}
        for _ in range(5):
            for name, seconds in opens.items():
                took, memory = await _open_seconds(name, clock)
                seconds.append(took)
                await memory.close()
        empty_s, open_s = median(opens[empty]), median(opens[str(big)])
        memory = (await _open_seconds(str(big), clock))[1]
        try:
            latencies = []
            picked: set[tuple[int, int]] = set()
            while len(picked) < samples:
                user = 1 + rng.randrange(users)
                picked.add((user, rng.randrange(bigdb.CHANNELS_PER_USER)))
            served = 0
            for user, n in sorted(picked, key=lambda _: rng.random()):
                server = layout.user_server(user)
                ctx = TurnContext(
                    user_id=user, channel_id=layout.user_channel(user, n), server_id=server
                )
                t0 = time.perf_counter()
                context = await memory.build_context(ctx)
                latencies.append((time.perf_counter() - t0) * 1e3)
                served += bool(context.blocks)
            round_trips = memory.stats["round_trips"]
        finally:
            await memory.close()
    return {
        "open_ms": open_s * 1e3,
        "open_empty_ms": empty_s * 1e3,
        "open_ratio": open_s / empty_s,
        "cold_p50_ms": median(latencies),
        "cold_p99_ms": percentile(latencies, 99),
        "cold_max_ms": max(latencies),
        "samples": samples,
        "rows": layout.rows,
        "contexts_with_memory": served,
        "round_trips_per_cold_key": round_trips / samples,
    }


SYSTEMS = {"stm": run_stm}


def run(system: str, quick: bool) -> dict[str, Any]:
    return asyncio.run(SYSTEMS[system](quick))
