"""The change feed under concurrency: no change skipped, wake-ups, lost listeners, opens."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest
from helpers import StoreOpener, follower_read_once, seed_for

from stm import ShortTermMemory, STMConfig
from stm._memory import FEED_RETENTION_SECONDS
from stm.store._base import DeleteChannel, ForgetServer
from stm.testing import Clock, ctx, turn

BOTH_STORES = True
WRITERS = 4
BATCHES = 30


async def test_a_follower_reading_during_concurrent_writers_never_skips_a_change(
    open_store_: StoreOpener,
) -> None:
    """Several stores write batches at once while a follower reads the feed over and
    over: it sees every position exactly once, in order, with no gap it passed."""
    writers = [await open_store_() for _ in range(WRITERS)]
    follower = await open_store_()
    rng = random.Random(seed_for("feed-concurrent"))
    done = asyncio.Event()
    seen: list[int] = []

    async def write(store: Any, number: int) -> None:
        for batch in range(BATCHES):
            size = rng.randint(1, 4)
            await store.run([DeleteChannel(number * 10_000 + batch * 10 + i) for i in range(size)])

    async def follow() -> None:
        position = 0
        while True:
            finished = done.is_set()
            page = await follower.read_changes(position, limit=7)
            assert not page.fell_behind
            for change in page.changes:
                assert change.position == position + 1, (position, change.position)
                position = change.position
                seen.append(position)
            if finished and not page.changes:
                return
            await asyncio.sleep(0)

    reader = asyncio.ensure_future(follow())
    await asyncio.gather(*(write(store, n) for n, store in enumerate(writers)))
    done.set()
    await reader
    total = await follower.current_position()
    assert seen == list(range(1, total + 1))
    channels = [c.channel_id for c in (await follower.read_changes(0, limit=10_000)).changes]
    assert len(channels) == len(set(channels)) == total


async def test_a_server_forgotten_names_its_channels_with_rows_then_the_server(
    open_store_: StoreOpener, open_memory: Any
) -> None:
    """``ForgetServer`` adds a clear of each channel that had rows, the settings, then the
    server itself: a follower clears the channels it holds without rows by the last."""
    memory = await open_memory(write_behind_seconds=0.0)
    for channel in (11, 10):
        await memory.capture(turn(ctx(channel=channel, server=100), "hello"))
    await memory.capture(turn(ctx(channel=20, server=200), "hello"))
    await memory.flush()
    store = await open_store_()
    after = await store.current_position()
    assert await store.run([ForgetServer(100)]) == [[10, 11]]
    changes = [
        (c.kind, c.channel_id, c.server_id) for c in (await store.read_changes(after)).changes
    ]
    assert changes == [
        ("clear_channel", 10, None),
        ("clear_channel", 11, None),
        ("settings", None, 100),
        ("forget_server", None, 100),
    ]


async def test_wait_for_change_wakes_on_another_stores_commit(open_store_: StoreOpener) -> None:
    """A commit elsewhere wakes a waiting follower; with nothing committed it times out."""
    waiting, writing = await open_store_(), await open_store_()
    await waiting.wait_for_change(0)  # settle: a first call may wake at once
    assert not await waiting.wait_for_change(0.2)
    waiter = asyncio.ensure_future(waiting.wait_for_change(30))
    await writing.run([DeleteChannel(1)])
    assert await waiter


async def test_the_feed_keeps_the_memorys_time_stamped_and_pruned_by_its_clock(
    config: STMConfig,
) -> None:
    """A change's ``at`` is the memory's clock, not the wall clock, and the janitor prunes
    by that clock: with a clock 25 years behind the wall, a change is kept until that
    clock has moved past the feed's retention, then pruned."""
    clock = Clock(start=1_000_000_000.0)  # 2001: any change stamped by the wall is "old"
    memory = await ShortTermMemory.open(config, clock=clock)
    try:
        await memory.set_user_opt_out(7, True)
        await memory.flush()
        await memory.follower.catch_up()  # the janitor prunes only what it has read
        changes = (await memory.store.read_changes(0)).changes
        assert [(c.kind, c.at) for c in changes] == [("opt_out", clock.now)]
        clock.advance(FEED_RETENTION_SECONDS - 60)
        await memory.run_janitor()
        await memory.flush()
        kept = await memory.store.read_changes(0)
        assert not kept.fell_behind
        assert [c.position for c in kept.changes][:1] == [changes[0].position]
        clock.advance(120)  # now past the retention, by the memory's clock
        await memory.run_janitor()
        await memory.flush()
        assert (await memory.store.read_changes(0)).fell_behind
    finally:
        await memory.close()


async def test_the_janitor_keeps_what_its_own_follower_has_not_read(
    config: STMConfig, store_kind: str
) -> None:
    """A clock that jumps past the feed's retention before this process's follower read
    its own latest changes: the janitor leaves them, so the next turn's upgrade is not
    refused and the follower does not drop the cache; once read, they are pruned."""
    config = config.model_copy(update={"coherence_seconds": 300})  # the follower reads rarely
    retention = max(FEED_RETENTION_SECONDS, 100 * config.coherence_seconds)
    clock = Clock(start=1_000_000_000.0)
    memory = await ShortTermMemory.open(config, clock=clock)
    try:
        await follower_read_once(memory)
        await memory.capture(turn(ctx(), "first turn"))
        assert (await memory.run_tool(ctx(), {"summary": "ONE"})).success
        await memory.flush()
        if store_kind == "sqlite":  # PostgreSQL's NOTIFY may wake it for its own commits
            assert memory.follower.position < await memory.store.current_position()
        clock.advance(retention + 60)
        await memory.run_janitor()
        assert not (await memory.store.read_changes(memory.follower.position)).fell_behind
        later = ctx(user=2)
        await memory.capture(turn(later, "a turn after the jump"))
        assert (await memory.run_tool(later, {"summary": "TWO"})).success
        await memory.follower.catch_up()
        assert memory.follower.dropped_caches == 0
        clock.advance(retention + 60)
        await memory.run_janitor()
        assert (await memory.store.read_changes(0)).fell_behind
    finally:
        await memory.close()


async def test_a_store_opened_without_a_memory_stamps_the_wall_clock(
    open_store_: StoreOpener,
) -> None:
    """The command line opens stores alone: their changes are stamped ``time.time()``."""
    store = await open_store_()
    before = time.time()
    await store.run([DeleteChannel(1)])
    (change,) = (await store.read_changes(0)).changes
    assert before <= change.at <= time.time()


# -- PostgreSQL only ---------------------------------------------------------------------------
@pytest.fixture
async def pg(postgres_url: str) -> Any:
    from stm.store._postgres import PostgresStore

    opened: list[Any] = []

    async def opener() -> Any:
        store = await PostgresStore.open(postgres_url)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        await store.close()


async def _blocked_on_a_lock(store: Any, task: asyncio.Future[Any]) -> bool:
    """Wait until ``task`` finished (False) or some backend waits for a lock (True)."""
    while not task.done():
        waiting = await store.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()"
        )
        if waiting[0][0]:
            return True
        await asyncio.sleep(0.01)
    return False


async def test_postgres_positions_cannot_commit_out_of_order(pg: Any) -> None:
    """A batch that took a position and has not committed holds back every later one:
    a follower reading meanwhile never sees a later position and so never skips it."""
    from stm.store import _postgres as postgres

    first, second = await pg(), await pg()
    conn = await first._pool.acquire()
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
        await postgres._write_feed(
            conn, [("clear_channel", None, None, 1, None, None)], "slow", time.time()
        )
        later = asyncio.ensure_future(second.run([DeleteChannel(2)]))
        blocked = await _blocked_on_a_lock(second, later)
        page = await second.read_changes(0)
        await transaction.commit()
    finally:
        await first._pool.release(conn)
    await later
    assert blocked
    assert page.changes == ()
    after = await second.read_changes(page.next_after)
    assert [(c.position, c.channel_id) for c in after.changes] == [(1, 1), (2, 2)]


async def test_postgres_listener_loss_wakes_and_reconnects(pg: Any) -> None:
    """A killed listening connection wakes the follower (so it reads), and the next wait
    listens again: later commits still wake it."""
    waiting, writing = await pg(), await pg()
    await waiting.wait_for_change(0)
    waiter = asyncio.ensure_future(waiting.wait_for_change(30))
    await waiting.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE query LIKE 'LISTEN%' AND datname = current_database() AND pid <> pg_backend_pid()"
    )
    assert await waiter
    await waiting.wait_for_change(0)  # listens again
    assert not await waiting.wait_for_change(0.2)
    waiter = asyncio.ensure_future(waiting.wait_for_change(30))
    await writing.run([DeleteChannel(1)])
    assert await waiter


async def test_postgres_listener_cancelled_while_it_starts_is_closed(
    pg: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A follower cancelled (its memory closing) between connecting the listening
    connection and its LISTEN leaves no connection open behind it."""
    import asyncpg

    store = await pg()
    started, connections = asyncio.Event(), []
    add_listener = asyncpg.Connection.add_listener

    async def slow_listen(self: Any, channel: str, callback: Any) -> None:
        connections.append(self)
        started.set()
        await asyncio.sleep(30)
        await add_listener(self, channel, callback)

    monkeypatch.setattr(asyncpg.Connection, "add_listener", slow_listen)
    waiter = asyncio.ensure_future(store.wait_for_change(30))
    await started.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    (connection,) = connections
    assert connection.is_closed()


async def test_postgres_stores_opening_a_new_schema_at_once_all_succeed(
    postgres_url: str,
) -> None:
    """Many stores migrating one empty database at the same moment: none fails."""
    from stm.store._postgres import MIGRATIONS, PostgresStore

    stores = await asyncio.gather(
        *(PostgresStore.open(postgres_url) for _ in range(8)), return_exceptions=True
    )
    try:
        assert [s for s in stores if isinstance(s, BaseException)] == []
        assert {await s.schema_version() for s in stores} == {len(MIGRATIONS)}  # type: ignore[union-attr]
        assert not any(s.empty_at_open for s in stores)  # type: ignore[union-attr]
    finally:
        for s in stores:
            if not isinstance(s, BaseException):
                await s.close()


async def test_postgres_refuses_a_newer_schema(pg: Any, postgres_url: str) -> None:
    from stm import SchemaVersionError
    from stm.store._postgres import MIGRATIONS, PostgresStore

    store = await pg()
    await store.execute(f"UPDATE stm_schema SET version = {len(MIGRATIONS) + 1}")
    with pytest.raises(SchemaVersionError, match="newer"):
        await PostgresStore.open(postgres_url)


async def test_postgres_unreachable_is_a_store_error_without_the_password() -> None:
    from stm import StoreError
    from stm.store._postgres import PostgresStore

    with pytest.raises(StoreError, match="cannot open") as caught:
        await PostgresStore.open("postgresql://someone:s3cret@127.0.0.1:1/nowhere")
    assert "s3cret" not in str(caught.value)


async def test_postgres_purge_sees_an_upgrade_committed_just_before_it(pg: Any) -> None:
    """A purge that waited for another process's upgrade applies to it: the upgrade's row
    loses the purged contributor's content. (Without the lock taken first, the purge would
    read before the upgrade committed, yet come after it in the feed.)"""
    from stm._keys import server_key
    from stm._lineage import Lineage
    from stm.store import _postgres as postgres
    from stm.store._base import PurgeUser, SaveDistilled, StoredRow

    first, second = await pg(), await pg()
    row = StoredRow(
        key=server_key(100, 10), scope="server", server_id=100, user_id=None, channel_id=10,
        persona_id=None, parent_channel_id=None, channel_name=None, server_name=None,
        channel_private=False, summary="WORDS OF 7", categories={},
        turns_since_refresh=1, last_refreshed_turn=1, updated_at=1e9,
    )  # fmt: skip
    conn = await first._pool.acquire()
    try:
        transaction = conn.transaction()
        await transaction.start()
        await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
        feed = postgres._Feed(conn, first.origin, time.time())
        await postgres._save_many(conn, [SaveDistilled(row, lineage=Lineage(frozenset({7})))], feed)
        await feed.flush()
        purge = asyncio.ensure_future(second.run([PurgeUser(7, None)]))
        blocked = await _blocked_on_a_lock(second, purge)
        await transaction.commit()
    finally:
        await first._pool.release(conn)
    await purge
    assert blocked
    assert await second.execute("SELECT summary FROM short_term_memories") == [(None,)]
    kinds = [c.kind for c in (await second.read_changes(0)).changes]
    assert kinds == ["upgrade", "purge_user"]
