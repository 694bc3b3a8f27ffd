"""The bounded cache: segmented LRU eviction, indexes, recall order, re-hydration of
evicted keys."""

from __future__ import annotations

import gc
import tracemalloc
from collections import deque

from helpers import Opener, scaled
from hypothesis import given, settings
from hypothesis import strategies as st

from stm._cache import Entry, MemoryCache, StoredMessage
from stm.testing import ctx, turn


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


def _capped(max_keys: int) -> MemoryCache:
    return MemoryCache(max_keys=max_keys, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 0.0)


def test_keys_not_used_again_leave_first_in_the_order_they_came() -> None:
    """Over the cap, the key on probation longest goes, and its index entries with it; a
    key used again while held is kept."""
    cache = _capped(3)
    a, b, c, d = make(1), make(2), make(3), make(4)
    for e in (a, b, c):
        cache.put(e)
    assert cache.get(a.key) is a  # used again: protected
    assert cache.put(d) == [b]
    assert b.key not in cache and cache.keys_of_channel(2) == []
    assert cache.put(make(5)) == [c]
    assert a.key in cache


def test_a_key_used_again_outlasts_a_stream_of_keys_used_once() -> None:
    """A busy channel's entry, used on its turns, is not pushed out by a busy server's
    members' entries, each used once (where plain LRU evicts it after ``max_keys`` of
    them)."""
    cache = _capped(8)
    channel = make(1)
    cache.put(channel)
    cache.touch(channel, 0.0)  # the turn's capture after its build_context
    for n in range(2, 200):
        cache.put(make(n))
        if n % 20 == 0:  # far apart: under plain LRU, 8 new keys in between evict it
            assert cache.get(channel.key) is channel
    assert cache.get(channel.key) is channel
    assert len(cache) == 8


def test_a_cache_of_two_keys_holds_a_turns_two_keys() -> None:
    """A cache of two keys has no protected part: the last turn's channel entry, used
    twice, does not keep the next turn's first key out (it is plain LRU)."""
    cache = _capped(2)
    channel = make(1)
    cache.put(channel)
    cache.touch(channel, 0.0)
    user, server = make(2), make(3)
    cache.put(user)
    assert cache.put(server) == [channel]
    assert user.key in cache and server.key in cache


def test_a_full_protected_part_hands_its_least_recently_used_back_to_probation() -> None:
    cache = _capped(5)  # two keys protected at most
    held = [make(n) for n in range(1, 6)]
    for e in held:
        cache.put(e)
    for e in held:
        cache.get(e.key)  # each joins protected, handing back the oldest there: 1, 2, 3
    # Probation holds 1, 2, 3 in that order; a new key evicts 1, not a protected one.
    assert [e.channel_id for e in cache.put(make(6))] == [1]
    assert sorted(e.channel_id for e in cache) == [2, 3, 4, 5, 6]


@settings(max_examples=scaled(300, 3000), deadline=None)
@given(
    max_keys=st.integers(1, 6),
    ops=st.lists(st.tuples(st.sampled_from(["put", "get", "remove"]), st.integers(0, 9))),
)
def test_eviction_matches_a_plain_model_of_segmented_lru(
    max_keys: int, ops: list[tuple[str, int]]
) -> None:
    """The cache holds exactly what a plain model of a segmented LRU holds after any
    sequence of puts, gets and removes; never more than ``max_keys``, never evicting the
    entry just put."""
    cache = _capped(max_keys)
    probation: list[int] = []  # longest waiting first
    protected: list[int] = []  # least recently used first
    protected_max = max_keys // 2 if max_keys > 2 else 0
    for op, n in ops:
        key = make(n).key
        if op == "put":
            entry = make(n)
            if n in probation or n in protected:
                continue  # a held key is not put again as new here
            probation.append(n)
            expected = []
            while len(probation) + len(protected) > max_keys:
                if probation and (probation[0] != n or not protected):
                    expected.append(probation.pop(0))
                else:
                    expected.append(protected.pop(0))
            evicted = cache.put(entry)
            assert [e.channel_id for e in evicted] == expected
            assert entry.key in cache
        elif op == "get":
            found = cache.get(key)
            assert (found is not None) == (n in probation or n in protected)
            if n in protected:
                protected.remove(n)
                protected.append(n)
            elif n in probation:
                probation.remove(n)
                protected.append(n)
                if len(protected) > protected_max:
                    probation.append(protected.pop(0))
        else:
            cache.remove(key)
            for part in (probation, protected):
                if n in part:
                    part.remove(n)
        assert sorted(e.channel_id for e in cache) == sorted(probation + protected)
        assert len(cache) <= max_keys


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


def capture(cache: MemoryCache, user: int, key: str, now: float, window: int) -> None:
    """What the facade does with one turn's messages under one key."""
    entry = cache.get(key, now)
    if entry is None:
        scope = "server" if ":server:" in key else "user"
        entry = Entry(
            key=key,
            scope=scope,  # type: ignore[arg-type]
            server_id=1 if scope == "server" else None,
            user_id=user if scope == "user" else None,
            channel_id=int(key.split(":")[3]),
            persona_id=None,
            messages=[],
            updated_at=now,
        )
        cache.put(entry)
    said = [StoredMessage(role, "hi", "", user, now, user) for role in ("user", "assistant")]
    entry.remember(said, window)
    cache.touch(entry, now)
    cache.index_users(entry, {user})


def test_user_index_keeps_no_one_scrolled_out_of_every_window() -> None:
    """Tens of thousands of distinct users (a hundred thousand under STM_STRESS) through a busy
    channel and a 50-key cache: the user index holds only the users of the windows held, and
    Python's memory does not grow with users seen."""
    max_keys, window = 50, 4
    cache = MemoryCache(
        max_keys=max_keys, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 100.0
    )

    def drive(first: int, count: int) -> None:
        for user in range(first, first + count):
            capture(cache, user, "shortterm:server:1:10", 100.0, window)
            capture(cache, user, f"shortterm:user:{user}:{user}", 100.0, window)
            cache.warmed.add(("user", user, None, None))

    def assert_bounded() -> None:
        sizes = cache.index_sizes()
        assert sizes["entries"] == max_keys and sizes["groups"] <= max_keys, sizes
        assert sizes["warmed"] <= max_keys, sizes
        # The busy channel's window holds two users' turns; each DM key, its owner.
        assert sizes["users"] <= max_keys + 1 and sizes["user_keys"] <= max_keys + 2, sizes

    first, traced, last = scaled(5_000, 20_000), scaled(10_000, 30_000), scaled(10_000, 50_000)
    drive(1, first)
    assert_bounded()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        drive(first + 1, traced)
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert_bounded()
    # Unbounded, 30,000 users held about 8 MB more (10,000: about 2.7 MB); allocator noise
    # is far less.
    assert after - before < 1_000_000, (before, after)
    drive(first + traced + 1, last)
    assert_bounded()
    assert cache.keys_of_user(1) == []


async def test_warmed_recall_groups_are_bounded_by_the_cap(open_memory: Opener) -> None:
    """100,000 DM users whose turns leave nothing cached: the set of recall groups already
    loaded stays within the cap instead of growing by one per user."""
    memory = await open_memory(cache_max_keys=50)
    for user in range(1, 100_001):
        await memory.build_context(ctx(user=user, channel=user, server=None))
    assert len(memory.cache) == 0
    assert memory.cache.index_sizes()["warmed"] <= 50


async def test_indexes_stay_bounded_through_the_facade(open_memory: Opener) -> None:
    """Distinct users with a turn in a busy channel and in their own DM, through the whole
    turn path and a 20-key cache: every index stays within the cap."""
    max_keys, window = 20, 4
    memory = await open_memory(
        cache_max_keys=max_keys, max_messages_per_channel=window, write_behind_seconds=3600
    )
    for user in range(1, 1001):
        for c in (ctx(user=user, channel=10), ctx(user=user, channel=user, server=None)):
            await memory.build_context(c)
            await memory.capture(turn(c, f"hello from {user}"))
        sizes = memory.cache.index_sizes()
        assert sizes["entries"] <= max_keys and sizes["groups"] <= max_keys, sizes
        assert sizes["channels"] <= max_keys and sizes["warmed"] <= max_keys, sizes
        # Each key is indexed under its owner and the users of its window, no one else.
        assert sizes["user_keys"] <= max_keys * (window + 1), sizes
    await memory.flush()
    assert memory.cache.keys_of_user(1) == []


def test_a_user_leaves_the_index_only_when_their_last_turn_scrolls_out() -> None:
    """Users who still have a message in the window, or own the key, stay indexed; whoever
    has nothing left in it goes, however many messages scroll out at once (who may have
    words in its notes is the store's to say, by its chain)."""
    cache = MemoryCache(max_keys=10, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 100.0)
    for user in (1, 2, 3, 4, 1):
        capture(cache, user, "shortterm:server:1:10", 100.0, window=6)
    assert {u for u in range(1, 6) if cache.keys_of_user(u)} == {1, 3, 4}
    entry = cache.peek("shortterm:server:1:10")
    assert entry is not None
    batch = [StoredMessage("user", "x", "", 5, 100.0, 5) for _ in range(5)]
    entry.remember(batch, 6)
    cache.touch(entry, 100.0)
    cache.index_users(entry, {5})
    # The window now holds user 1's last reply and user 5's five messages.
    assert {u for u in range(1, 6) if cache.keys_of_user(u)} == {1, 5}


@settings(max_examples=200, deadline=None)
@given(
    ops=st.lists(
        st.tuples(
            st.sampled_from(["put", "remove", "touch", "index"]),
            st.integers(0, 3),  # owner (user) of a user-scope key, or server
            st.integers(0, 2),  # channel
            st.booleans(),  # user scope or server scope
            st.integers(0, 3),  # a user whose words the entry holds
        ),
        max_size=40,
    )
)
def test_indexes_list_exactly_the_held_keys_of_each_id(
    ops: list[tuple[str, int, int, bool, int]],
) -> None:
    """Whatever is put, touched, indexed and removed, the channel and user indexes (one
    bare key or a set per id) list exactly the held keys of that id."""
    cache = MemoryCache(max_keys=6, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 0.0)
    words: dict[str, set[int]] = {}
    for op, owner, channel, user_scope, speaker in ops:
        scope = "user" if user_scope else "server"
        key = f"shortterm:{scope}:{owner}:{channel}"
        held = cache.peek(key)
        if op == "put" and held is None:
            e = Entry(
                key=key,
                scope=scope,
                server_id=None if user_scope else owner,
                user_id=owner if user_scope else None,
                channel_id=channel,
                persona_id=None,
                messages=[],
                updated_at=0.0,
            )
            for victim in cache.put(e):
                words.pop(victim.key, None)
        elif op == "remove":
            cache.remove(key)
            words.pop(key, None)
        elif op == "touch" and held is not None:
            cache.touch(held, 0.0)
        elif op == "index" and held is not None:
            # As a capture does: the speaker's words are in the window, and indexed.
            held.messages += (StoredMessage("user", "x", "", speaker, 0.0, speaker),)
            cache.index_user(held, speaker)
            words.setdefault(key, set()).add(speaker)
    entries = list(cache)
    for channel in range(3):
        expected = {e.key for e in entries if e.channel_id == channel}
        assert sorted(cache.keys_of_channel(channel)) == sorted(expected)
    for user in range(4):
        expected = {e.key for e in entries if e.user_id == user or user in words.get(e.key, set())}
        assert sorted(cache.keys_of_user(user)) == sorted(expected)
