"""Hydration: a key missing from the cache is read from the store only when a row can exist.

A new database written only by this process holds rows of cached entries
alone, so new keys need no read; once an entry leaves the cache without a
delete (evicted, or dropped as expired), rows can exist that the cache does
not hold, and every missing key is read again.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from helpers import Opener

from stm._keys import user_key
from stm.testing import Clock, ctx, turn

# Each test that does not inspect the SQLite file runs on both stores.
BOTH_STORES = True


async def test_new_keys_on_a_new_database_are_not_read(open_memory: Opener, db_path: Path) -> None:
    """On an empty database file, first turns in new channels make no database round trip.
    (SQLite only: a file this process created holds nothing it does not know of, while a
    PostgreSQL server is shared, so its store never assumes that.)"""
    memory = await open_memory(write_behind_seconds=60)
    for channel in range(20):
        c = ctx(channel=channel)
        await memory.capture(turn(c, f"hello {channel}"))
        await memory.build_context(c)
    assert memory.stats["round_trips"] == 0


async def test_keys_are_read_after_a_restart(open_memory: Opener) -> None:
    """A database with rows at open is read for every new key."""
    memory = await open_memory()
    await memory.capture(turn(ctx(), "hi"))
    assert (await memory.run_tool(ctx(), {"summary": "REMEMBERED"})).success
    await memory.close()
    memory = await open_memory()
    assert "REMEMBERED" in str(await memory.build_context(ctx()))
    assert memory.stats["round_trips"] > 0


async def test_an_evicted_entry_is_read_back(open_memory: Opener) -> None:
    """After an eviction the evicted key's row is read again, summary and all."""
    memory = await open_memory(cache_max_keys=2)
    dm = ctx(channel=1, server=None)
    await memory.capture(turn(dm, "hi"))
    assert (await memory.run_tool(ctx(channel=1, server=None), {"summary": "EVICTED"})).success
    for channel in (2, 3):  # two more DM keys push the first one out
        await memory.capture(turn(ctx(channel=channel, server=None), "hi"))
    assert memory.stats["evicted_keys"] >= 1
    assert "EVICTED" in str(await memory.build_context(ctx(channel=1, server=None)))


async def test_an_expired_row_is_not_revived(open_memory: Opener, clock: Clock) -> None:
    """A key dropped for expiry and captured again is read (so its stale row is deleted),
    not rewritten over its old summary."""
    memory = await open_memory()
    dm = ctx(channel=1, server=None)
    await memory.capture(turn(dm, "hi"))
    assert (await memory.run_tool(ctx(channel=1, server=None), {"summary": "STALE"})).success
    await memory.flush()
    clock.advance(hours=25)
    await memory.capture(turn(dm, "back again"))
    await memory.close()
    memory = await open_memory()
    entry = await memory.get_entry(user_key(1, 1))
    assert entry is not None and entry.summary is None


async def test_cold_key_and_group_share_one_round_trip(open_memory: Opener) -> None:
    """After a restart, the first context of a channel reads its row and its recall group in
    one round trip, and shows both."""
    memory = await open_memory()
    for channel, summary in ((10, "HERE-SUMMARY"), (11, "THERE-SUMMARY")):
        await memory.capture(turn(ctx(channel=channel), "hi"))
        assert (await memory.run_tool(ctx(channel=channel), {"summary": summary})).success
    await memory.close()
    memory = await open_memory()
    shown = str(await memory.build_context(ctx(channel=10)))
    assert "HERE-SUMMARY" in shown and "THERE-SUMMARY" in shown
    assert memory.stats["round_trips"] == 1


async def test_an_evicted_dirty_entry_is_read_back_with_its_counters(
    open_memory: Opener,
) -> None:
    """An entry evicted before its counters were written behind is read back with them
    (its write-behind goes just ahead of the read), so the nudge it was due still shows;
    the other dirty entries are not written with that read."""
    memory = await open_memory(cache_max_keys=2, write_behind_seconds=3600)
    dm = ctx(channel=1, server=None)
    cadence = memory.settings_for(None).refresh_cadence
    for n in range(cadence):
        await memory.capture(turn(dm, f"hi {n}"))
    for channel in (2, 3):  # two more DM keys push the first one out, still dirty
        await memory.capture(turn(ctx(channel=channel, server=None), "hi"))
    assert memory.cache.peek(user_key(1, 1)) is None
    context = await memory.build_context(ctx(channel=1, server=None))
    assert context.nudge is not None
    entry = memory.cache.peek(user_key(1, 1))
    assert entry is not None and entry.turns_since_refresh == cadence
    assert await memory.store.row(user_key(1, 3)) is None  # still only dirty


async def test_a_capture_after_eviction_keeps_the_evicted_entrys_counters(
    open_memory: Opener,
) -> None:
    """A capture that finds its entry evicted before its counters were written behind
    makes a new entry of the key: the evicted one is still written (ahead of the new
    one's read), so the turns it counted still count and the nudge it was due shows."""
    memory = await open_memory(cache_max_keys=2, write_behind_seconds=3600)
    dm = ctx(channel=1, server=None)
    cadence = memory.settings_for(None).refresh_cadence
    for n in range(cadence - 1):
        await memory.capture(turn(dm, f"hi {n}"))
    for channel in (2, 3):  # two more DM keys push the first one out, still dirty
        await memory.capture(turn(ctx(channel=channel, server=None), "hi"))
    assert memory.cache.peek(user_key(1, 1)) is None
    await memory.capture(turn(dm, "back again"))  # a new entry of the evicted key
    context = await memory.build_context(dm)
    entry = memory.cache.peek(user_key(1, 1))
    assert entry is not None and entry.turns_since_refresh == cadence
    assert context.nudge is not None


async def test_a_read_that_finds_its_key_evicted_leaves_the_counted_entry_to_write(
    open_memory: Opener,
) -> None:
    """A read of a key queued before the key's entry counted another turn, which comes
    back once that entry has been evicted with the turn still to write, does not cache
    its older row: the key's next read gets the row with every turn (written just ahead
    of it), not a count one short whose next write-behind would lose the turn."""
    memory = await open_memory(cache_max_keys=2, write_behind_seconds=3600)
    dm = ctx(channel=1, server=None)
    key = user_key(1, 1)
    await memory.capture(turn(dm, "one"))
    await memory.flush()  # the row holds one turn
    read = asyncio.ensure_future(memory._reads.hydrate([key]))
    await asyncio.sleep(0)  # queued: what it reads is the row of one turn
    await memory.capture(turn(dm, "two"))  # counted past the read, still to write
    for channel in (2, 3):  # two more DM keys push the first one out, still dirty
        await memory.capture(turn(ctx(channel=channel, server=None), "hi"))
    assert memory.cache.peek(key) is None
    assert await read
    entry = await memory.get_entry(key)
    assert entry is not None and entry.turns_since_refresh == 2
    await memory.capture(turn(dm, "three"))
    await memory.flush()
    row = await memory.store.row(key)
    assert row is not None and row.turns_since_refresh == 3
