"""The servers that removed the bot: a start-up's returns share one read of the store, and
what another process records is seen within the coherence bound."""

from __future__ import annotations

import asyncio

from helpers import Opener

from stm.testing import faulty_memory

BOTH_STORES = True


async def test_many_returns_at_start_up_share_one_read(config) -> None:  # type: ignore[no-untyped-def]
    memory, store = await faulty_memory(config.model_copy(update={"coherence_seconds": 60}))
    await memory.server_removed(7)
    before = sum(batch.count("LoadDepartures") for batch in store.batches)
    # Every server the bot is in arrives at start-up (GUILD_CREATE): one check each.
    back = await asyncio.gather(*(memory.server_returned(s) for s in range(1, 301)))
    reads = sum(batch.count("LoadDepartures") for batch in store.batches) - before
    assert reads <= 1, reads
    assert back.count(True) == 1 and await memory.departures() == {}
    await memory.close()


async def test_another_process_record_is_seen_within_the_bound(open_memory: Opener) -> None:
    here = await open_memory(coherence_seconds=0.2)
    there = await open_memory(coherence_seconds=0.2)
    assert await here.departures() == {}
    await there.server_removed(9)
    await asyncio.sleep(0.25)
    assert set(await here.departures()) == {9}
    await there.server_returned(9)
    await asyncio.sleep(0.25)
    assert await here.departures() == {}
