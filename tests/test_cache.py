"""The bounded cache: LRU eviction, indexes, recall order, re-hydration of evicted keys."""

from __future__ import annotations

from collections import deque

from conftest import Opener, ctx, turn

from stm.cache import Entry, MemoryCache


def make(key_channel: int, server: int = 1, private: bool = False) -> Entry:
    return Entry(
        key=f"shortterm:server:{server}:{key_channel}",
        scope="server",
        server_id=server,
        user_id=None,
        channel_id=key_channel,
        persona_id=None,
        messages=deque(maxlen=5),
        updated_at=0.0,
        summary="s",
        channel_private=private,
    )


def test_least_recently_used_keys_are_evicted() -> None:
    """Over the cap, the least recently used key goes, and its index entries with it."""
    now = [100.0]
    cache = MemoryCache(max_keys=2, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: now[0])
    a, b, c = make(1), make(2), make(3)
    for e in (a, b):
        e.updated_at = now[0]
        cache.put(e)
    assert cache.get(a.key) is a  # a is now more recent than b
    c.updated_at = now[0]
    evicted = cache.put(c)
    assert evicted == [b]
    assert b.key not in cache and cache.keys_of_channel(2) == []


def test_recall_is_newest_first_and_skips_private_and_current() -> None:
    """recall: newest first, never the current channel or a private one."""
    cache = MemoryCache(max_keys=10, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 100.0)
    for channel, private in ((1, False), (2, True), (3, False), (4, False)):
        e = make(channel, private=private)
        cache.put(e)
        cache.touch(e, 50.0 + channel)
    found = cache.recall(("server", 1, None, None), exclude_channel=4, limit=5, now=60.0)
    assert [e.channel_id for e in found] == [3, 1]


def test_cold_entries_are_merged_by_time() -> None:
    """Entries loaded from the database take their place by their own updated_at."""
    cache = MemoryCache(max_keys=10, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 100.0)
    live = make(1)
    cache.put(live)
    cache.touch(live, 90.0)
    old, older = make(2), make(3)
    old.updated_at, older.updated_at = 95.0, 10.0
    cache.put(old, touched=False)
    cache.put(older, touched=False)
    found = cache.recall(("server", 1, None, None), exclude_channel=0, limit=2, now=100.0)
    assert [e.channel_id for e in found] == [2, 1]


async def test_evicted_durable_entries_rehydrate_on_demand(open_memory: Opener) -> None:
    """With a tiny cap, distilled memory of evicted keys comes back from the database."""
    memory = await open_memory(cache_max_keys=4)
    for channel in range(6):
        c = ctx(channel=channel)
        await memory.capture(turn(c, "x"))
        assert (await memory.run_tool(c, {"summary": f"S{channel}"})).success
    assert len(memory.cache) <= 4
    entry = await memory.get_entry("shortterm:server:100:0")
    assert entry is not None and entry.summary == "S0"
    assert "S0" in str(await memory.build_context(ctx(channel=0)))
