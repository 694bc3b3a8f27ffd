"""The follower: another process's changes applied to this process's cache, exactly once
and in order, staged by hand (two memories on one database, the follower of the second
stopped so that the test decides when it reads the feed)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import pytest
from helpers import Opener, paused

from stm.testing import ctx, turn

BOTH_STORES = True
KEY = "shortterm:server:100:10"


async def test_an_upgrade_overtaken_by_another_process_purge_is_refused(
    open_memory: Opener,
) -> None:
    """B's turn began before A purged a user B's prompt showed; B has not read the feed
    yet when its upgrade runs: the store refuses it and nothing is written."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=1), "SECRET"))
    turn_ctx = ctx(user=2)
    await b.build_context(turn_ctx)
    await a.clear_short_term_memory_for_user(1)
    await a.flush()
    result = await b.run_tool(turn_ctx, {"summary": "SUMMARY WITH SECRET"})
    assert not result.success and "cleared during the turn" in result.message
    await b.flush()
    stored = await a.get_entry(KEY)
    assert stored is None or stored.summary is None
    await b.follower.catch_up()
    entry = await b.get_entry(KEY)
    assert entry is None or all("SECRET" not in m.content for m in entry.messages)


async def test_an_upgrade_after_the_remote_purge_was_applied_is_refused(
    open_memory: Opener,
) -> None:
    """The remote purge goes into the same deletion log as a local one: a turn that began
    before the follower applied it is refused by the local check too."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=1), "SECRET"))
    turn_ctx = ctx(user=2)
    await b.build_context(turn_ctx)
    await a.clear_short_term_memory_for_channel(10)
    await a.flush()
    assert await b.follower.catch_up() == 1
    assert b._reads.overtaken(turn_ctx)
    result = await b.run_tool(turn_ctx, {"summary": "BACK"})
    assert not result.success


async def test_own_changes_are_not_applied_again(open_memory: Opener) -> None:
    """A process skips its own changes in the feed: its fresh summary is not dropped."""
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=1), "hello"))
    assert (await b.run_tool(ctx(user=1), {"summary": "MINE"})).success
    await b.flush()
    assert await b.follower.catch_up() == 0
    entry = b.cache.peek(KEY)
    assert entry is not None and entry.summary == "MINE"


async def test_a_follower_behind_the_feed_retention_drops_its_whole_cache(
    open_memory: Opener,
) -> None:
    """Changes B never saw were pruned: B cannot know what they deleted and forgets all,
    crude messages only it held included."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=1, channel=20), "ONLY-IN-B"))
    await a.clear_short_term_memory_for_channel(10)
    await a.flush()
    assert await a.store.prune_changes(older_than=time.time() + 60) >= 1
    await b.follower.catch_up()
    assert len(b.cache) == 0
    assert b.follower.dropped_caches == 1


class _Unreachable:
    """A store whose feed cannot be read (the database is down)."""

    def __init__(self, origin: str) -> None:
        self.origin = origin

    async def read_changes(self, after: int, limit: int = 1000) -> None:
        raise OSError("connection refused")

    async def wait_for_change(self, seconds: float) -> bool:
        await asyncio.sleep(seconds)
        return False


async def test_a_follower_that_cannot_read_the_feed_past_the_bound_drops_its_cache(
    open_memory: Opener,
) -> None:
    """Unable to learn what others deleted for longer than the bound, a process stops
    showing what it holds rather than risk showing what was purged elsewhere."""
    b = await paused(await open_memory(coherence_seconds=0.1))
    await b.capture(turn(ctx(user=1), "HELD"))
    b.follower.store = _Unreachable(b.store.origin)  # type: ignore[assignment]
    following = asyncio.create_task(b.follower.run())
    try:
        for _ in range(1000):
            if b.follower.dropped_caches:
                break
            await asyncio.sleep(0.01)
    finally:
        following.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await following
    assert b.follower.dropped_caches >= 1
    assert len(b.cache) == 0


async def test_the_metrics_report_how_far_behind_the_feed_the_cache_is(
    open_memory: Opener,
) -> None:
    """``feed_lag_seconds``: the time since the newest complete read of the feed began. It
    grows while the follower does not read, falls back once it has read, stays within a
    read interval while it runs, and is None once the memory is closed."""
    running = await open_memory(coherence_seconds=0.2)
    b = await paused(await open_memory())
    lag = b.metrics.feed_lag_seconds
    assert lag is not None and 0 <= lag < 5
    await asyncio.sleep(0.3)
    stale = b.metrics.feed_lag_seconds
    assert stale is not None and stale >= 0.3
    following = running.metrics.feed_lag_seconds  # reads every 0.05 s meanwhile
    assert following is not None and following < stale
    await b.follower.catch_up()
    caught_up = b.metrics.feed_lag_seconds
    assert caught_up is not None and caught_up < stale
    assert b.metrics.as_dict()["feed_lag_seconds"] is not None
    await b.close()
    assert b.metrics.feed_lag_seconds is None


async def test_the_keys_of_rows_another_process_purged_are_dropped_at_once(
    open_memory: Opener, store_kind: str
) -> None:
    """The row keys a store remembers for upgrades go as soon as the follower applies
    another process's purge, not at this process's next transaction (PostgreSQL keeps
    none between transactions)."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=1), "hello"))
    assert (await b.run_tool(ctx(user=1), {"summary": "NOTES"})).success
    await b.flush()
    assert (b.store.held_keys > 0) == (store_kind == "sqlite")
    await a.clear_short_term_memory_for_user(1)
    await a.flush()
    assert await b.follower.catch_up() == 1
    assert b.store.held_keys == 0


async def test_two_reads_of_the_feed_at_once_never_move_the_position_back(
    open_memory: Opener,
) -> None:
    """A read of the feed that began before a change was committed and ends after another
    read applied it (a test's ``catch_up`` beside the background follower's) neither
    applies it twice nor leaves the position before it: reads take turns."""
    a = await open_memory()
    b = await paused(await open_memory())
    store = b.store
    read = store.read_changes
    gate = asyncio.Event()
    first = True

    async def slow_first_read(after: int, limit: int = 500) -> object:
        nonlocal first
        page = await read(after, limit)
        if first:
            first = False
            await gate.wait()  # the page read before A's clear, handed back after it
        return page

    store.read_changes = slow_first_read  # type: ignore[method-assign]
    stale = asyncio.create_task(b.follower.catch_up())
    await asyncio.sleep(0.05)
    await a.clear_short_term_memory_for_channel(10)
    await a.flush()
    fresh = asyncio.create_task(b.follower.catch_up())
    await asyncio.sleep(0.05)
    gate.set()
    applied = await stale + await fresh
    newest = await store.current_position()
    assert b.follower.position == newest
    assert applied == 1  # A's clear, once


async def test_notes_written_elsewhere_for_a_conversation_not_held_here_are_recalled(
    open_memory: Opener,
) -> None:
    """B has recalled its server's other channels once (the group is warm) and never held
    #11; A writes #11's notes. Once B read the feed (and the row it then reads in), its
    prompts in the server's other channels recall them (B used to show the group as first
    read until a restart)."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=2, channel=10), "b talks"))
    assert "ELSEWHERE-NOTES" not in str(await b.build_context(ctx(user=2, channel=12)))
    await a.capture(turn(ctx(user=1, channel=11), "a talks"))
    assert (await a.run_tool(ctx(user=1, channel=11), {"summary": "ELSEWHERE-NOTES"})).success
    await a.flush()
    await b.follower.catch_up()
    await b.background.gather()  # the row is read in in the background
    assert "ELSEWHERE-NOTES" in str(await b.build_context(ctx(user=2, channel=12)))


async def test_notes_elsewhere_whose_read_in_failed_are_read_at_the_next_turn(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B's background read of the notes A wrote fails: B does not go on showing the group
    as first read; its next turn there reads the group again and shows them."""
    a = await open_memory()
    b = await paused(await open_memory())
    await b.capture(turn(ctx(user=2, channel=10), "b talks"))
    await b.build_context(ctx(user=2, channel=12))
    await a.capture(turn(ctx(user=1, channel=11), "a talks"))
    assert (await a.run_tool(ctx(user=1, channel=11), {"summary": "ELSEWHERE-NOTES"})).success
    await a.flush()
    reads = b._reads  # type: ignore[attr-defined]
    read = reads._read

    def unreadable(op: object, keys: list[str]) -> Any:
        monkeypatch.setattr(reads, "_read", read)  # once

        async def nothing() -> None:
            return None

        return nothing()

    monkeypatch.setattr(reads, "_read", unreadable)
    await b.follower.catch_up()
    await b.background.gather()
    assert reads._read is read, "the read-in was not tried"
    assert "ELSEWHERE-NOTES" in str(await b.build_context(ctx(user=2, channel=12)))
