"""W4 purge: user purges and channel clears with a million rows, until durable.

Each measured call is the public call followed by the writer's flush without
the scrub: the time until the delete is committed and the WAL checkpointed
(secure delete), not just until the cache forgot it. Then a few purges are
timed until ``flush()`` returns, which includes the scrub that rewrites the
file (VACUUM) so that no stale copy of the purged text survives.
"""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from . import bigdb
from .common import median, percentile, scratch_dir
from .w3_restart import shifted_clock


async def run_stm(quick: bool) -> dict[str, Any]:
    from stm import ShortTermMemory, STMConfig

    source, layout = bigdb.ensure(quick)
    servers, users = layout.servers, layout.users
    rng = random.Random(4)
    count = 20 if quick else 100
    times: dict[str, list[float]] = {
        "user": [],
        "user_in_server": [],
        "channel": [],
        "user_scrubbed": [],
    }
    scrubbed = 3
    with scratch_dir() as folder:
        big = bigdb.copy(source, folder)
        big.read_bytes()  # into the page cache, as a running bot's file would be
        memory = await ShortTermMemory.open(
            STMConfig(database=str(big)), clock=shifted_clock(layout.now)
        )
        try:
            targets = rng.sample(range(1, users + 1), 2 * count + scrubbed)
            for user in targets[:count]:
                t0 = time.perf_counter()
                await memory.clear_short_term_memory_for_user(user)
                await memory.writer.flush(scrub=False)
                times["user"].append((time.perf_counter() - t0) * 1e3)
            for user in targets[count : 2 * count]:
                t0 = time.perf_counter()
                await memory.clear_short_term_memory_for_user(user, layout.user_server(user))
                await memory.writer.flush(scrub=False)
                times["user_in_server"].append((time.perf_counter() - t0) * 1e3)
            for server in rng.sample(range(1, servers + 1), min(count, servers)):
                channel = layout.channel(server, rng.randrange(bigdb.CHANNELS_PER_SERVER))
                t0 = time.perf_counter()
                await memory.clear_short_term_memory_for_channel(channel)
                await memory.writer.flush(scrub=False)
                times["channel"].append((time.perf_counter() - t0) * 1e3)
            await memory.flush()  # the scrub the purges above scheduled, not timed
            for user in targets[2 * count :]:
                t0 = time.perf_counter()
                await memory.clear_short_term_memory_for_user(user)
                await memory.flush()
                times["user_scrubbed"].append((time.perf_counter() - t0) * 1e3)
            rows = (await memory.store.execute("SELECT count(*) FROM short_term_memories"))[0][0]
        finally:
            await memory.close()
    out: dict[str, Any] = {"purges_each": count, "rows": layout.rows, "rows_left": rows}
    for name, values in times.items():
        out[f"{name}_p50_ms"] = median(values)
        out[f"{name}_p99_ms"] = percentile(values, 99)
    return out


SYSTEMS = {"stm": run_stm}


def run(system: str, quick: bool) -> dict[str, Any]:
    return asyncio.run(SYSTEMS[system](quick))
