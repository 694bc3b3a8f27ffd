"""Database faults on PostgreSQL, the twins of tests/test_faults.py: a lock held by another
session, a backend killed mid-transaction, the server stopped and restarted, a network that
stops answering, a read-only session or a role without write grants, a value no column can
hold. Each case refuses to start with a clear StoreError, or answers honestly in bounded
time: run_tool says nothing was saved, captures go on in memory, nothing acknowledged is
lost, deletes are retried and land once the fault is gone.

The server is the shared local one (conftest.py), so "stopped" is a TCP proxy in front of
it that this test stops (tests/pgproxy.py), never the server itself. A full disk is not
staged: a tablespace on a small file system needs a mount, which leaves root-owned state
behind when a test dies; that PostgreSQL's "disk full" is retried, not dropped, is checked
on the error itself (test_a_full_disk_is_retried_not_dropped).

BOUND is far above every timeout in play: only a wait without limit trips it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pgproxy import Proxy
from test_faults import NOT_SAVED, remember

from stm import DurabilityError, ShortTermMemory, STMConfig, StoreError
from stm.store._shred import open_sealed_text
from stm.testing import ctx, turn

BOUND = 60.0


async def query(url: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return [tuple(row) for row in await conn.fetch(sql, *params)]
    finally:
        await conn.close()


async def summaries(url: str) -> dict[str, str | None]:
    """Every row's summary, decrypted with its row's key (None once the key is destroyed)."""
    found = await query(
        url,
        "SELECT m.key, m.summary, k.key FROM short_term_memories m "
        "LEFT JOIN stm_keys k ON k.slot = m.key_slot",
    )
    return {
        str(key): open_sealed_text(None if secret is None else bytes(secret), str(key), summary)
        for key, summary, secret in found
    }


def settings_for(url: str, tmp_path: Path, **overrides: Any) -> STMConfig:
    values: dict[str, Any] = dict(
        database=url,
        journal=str(tmp_path / "pending"),
        busy_timeout_ms=200,
        write_behind_seconds=0.05,
        delete_retry_seconds=0.05,
    )
    return STMConfig(**{**values, **overrides})


@contextlib.asynccontextmanager
async def held(url: str, sql: str, *params: Any) -> AsyncIterator[Any]:
    """Another session runs ``sql`` in a transaction and keeps it (and its locks) open
    until the block ends."""
    import asyncpg

    conn = await asyncpg.connect(url)
    transaction = conn.transaction()
    await transaction.start()
    try:
        await conn.execute(sql, *params)
        yield conn
    finally:
        await transaction.rollback()
        await conn.close()


# The lock every writing batch takes first (see stm/store/_postgres.py).
FEED_LOCK = "SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE"


async def test_locked_database(postgres_url: str, tmp_path: Path) -> None:
    """Another session holds the lock every writing batch needs, past busy_timeout_ms:
    start-up works, the upgrade is refused as not saved, captures go on in memory, a clear
    is retried until the lock goes, and what was acknowledged before is still there."""
    config = settings_for(postgres_url, tmp_path)
    async with ShortTermMemory.open(config) as first:
        await remember(first, "ACKED-BEFORE-LOCK")
        await remember(first, "CLEAR-ME", channel=11)
    async with held(postgres_url, FEED_LOCK), asyncio.timeout(BOUND):
        memory = await ShortTermMemory.open(config)
        c = ctx()
        result = await memory.run_tool(c, {"summary": "WRITTEN-WHILE-LOCKED"})
        assert not result.success and NOT_SAVED in result.message
        assert not c.disable_short_term_memory_update
        await memory.capture(turn(ctx(channel=12), "CAPTURED-WHILE-LOCKED"))
        entry = await memory.get_entry("shortterm:server:100:12")
        assert entry is not None and entry.messages[0].content == "CAPTURED-WHILE-LOCKED"
        await memory.clear_short_term_memory_for_channel(11)
        assert "CLEAR-ME" not in str(await memory.build_context(ctx(channel=13)))
        with pytest.raises(DurabilityError, match="clearing channel 11") as raised:
            await memory.flush()
        assert raised.value.at_risk == []
    try:
        await memory.flush()
        stored = await summaries(postgres_url)
        assert stored["shortterm:server:100:10"] == "ACKED-BEFORE-LOCK"
        assert not any(key.endswith(":11") for key in stored)
        assert "WRITTEN-WHILE-LOCKED" not in stored.values()
        result = await memory.run_tool(ctx(), {"summary": "AFTER-LOCK"})
        assert result.success, result.message
        result = await memory.run_tool(ctx(channel=12), {"summary": "CHANNEL-12-AFTER-LOCK"})
        assert result.success, result.message
    finally:
        await memory.close()
    assert (await summaries(postgres_url))["shortterm:server:100:10"] == "AFTER-LOCK"


async def test_a_row_lock_on_a_memory_row(postgres_url: str, tmp_path: Path) -> None:
    """Another session holds one memory row locked (an operator's open UPDATE): the
    upgrade of that row answers not saved, the purge that must change it is retried and
    lands when the row is released; other rows are untouched."""
    async with ShortTermMemory.open(settings_for(postgres_url, tmp_path)) as memory:
        await remember(memory, "LOCKED-ROW")
        await remember(memory, "OTHER", channel=11)
        await memory.flush()
        locking = "UPDATE short_term_memories SET turns_since_refresh = 0 WHERE key = $1"
        async with held(postgres_url, locking, "shortterm:server:100:10"), asyncio.timeout(BOUND):
            result = await memory.run_tool(ctx(), {"summary": "NOT-WHILE-LOCKED"})
            assert not result.success and NOT_SAVED in result.message
            await memory.clear_short_term_memory_for_user(1)
            with pytest.raises(DurabilityError, match="purging user 1"):
                await memory.flush()
            assert "LOCKED-ROW" in (await summaries(postgres_url)).values()
        await memory.flush()
        assert set((await summaries(postgres_url)).values()) == {None}


async def test_a_backend_killed_mid_transaction(postgres_url: str, tmp_path: Path) -> None:
    """The writer's backend is terminated (pg_terminate_backend) inside a purge that had
    already deleted the user's own rows and waits for a shared row: nothing of it is
    committed, and it is retried on a new connection and lands once the row is free."""
    name = f"stm_victim_{secrets.token_hex(4)}"
    victim = f"{postgres_url}&application_name={name}"
    config = settings_for(victim, tmp_path, busy_timeout_ms=30_000)
    async with ShortTermMemory.open(config) as memory:
        await remember(memory, "SHAPED-BY-USER-1")
        await memory.flush()
        own = await query(postgres_url, "SELECT key FROM short_term_memories WHERE user_id = 1")
        assert own, "the user has rows of their own"
        locking = "UPDATE short_term_memories SET turns_since_refresh = 0 WHERE key = $1"
        async with held(postgres_url, locking, "shortterm:server:100:10"), asyncio.timeout(BOUND):
            await memory.clear_short_term_memory_for_user(1)
            pid = await _waiting_backend(postgres_url, name)
            await query(postgres_url, "SELECT pg_terminate_backend($1)", pid)
            # Retried on a new connection, which waits for the row in turn.
            while True:
                if await _waiting_backend(postgres_url, name) != pid:
                    break
                await asyncio.sleep(0.01)
            # The killed transaction took its deletes with it.
            assert (
                await query(postgres_url, "SELECT key FROM short_term_memories WHERE user_id = 1")
                == own
            )
        await memory.flush()
        stored = await summaries(postgres_url)
        assert not any(key.startswith("shortterm:user:1:") for key in stored)
        assert stored["shortterm:server:100:10"] is None
        assert memory.metrics.durable_write_failures >= 1


async def _waiting_backend(url: str, application_name: str) -> int:
    """The pid of the session of that name once it waits for a lock."""
    while True:  # the server's own state: nothing signals it
        rows = await query(
            url,
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1 "
            "AND wait_event_type = 'Lock'",
            application_name,
        )
        if rows:
            return int(rows[0][0])
        await asyncio.sleep(0.01)


@pytest.fixture
async def proxy(postgres_url: str) -> AsyncIterator[Proxy]:
    proxy = Proxy(postgres_url)
    await proxy.start()
    yield proxy
    await proxy.stop()


async def test_server_stopped_and_restarted(
    proxy: Proxy, postgres_url: str, tmp_path: Path
) -> None:
    """The server goes away: upgrades answer not saved, reads answer from the cache,
    captures go on, a purge acknowledged as pending is saved in the journal (not lost when
    close() gives up, nor at a start-up that fails); once the server is back, the next open
    applies it before serving anything."""
    config = settings_for(proxy.url(), tmp_path)
    async with asyncio.timeout(BOUND):
        memory = await ShortTermMemory.open(config)
        await remember(memory, "PURGED-SUMMARY")
        await remember(memory, "OTHER-CHANNEL", channel=11)
        await memory.flush()
        await proxy.stop()
        result = await memory.run_tool(ctx(), {"summary": "WHILE-DOWN"})
        assert not result.success and NOT_SAVED in result.message
        await memory.capture(turn(ctx(channel=12), "CAPTURED-WHILE-DOWN"))
        entry = await memory.get_entry("shortterm:server:100:12")
        assert entry is not None and entry.messages[0].content == "CAPTURED-WHILE-DOWN"
        await memory.build_context(ctx(channel=30, server=300))  # a cold read: answers
        await memory.clear_short_term_memory_for_user(1)
        with pytest.raises(DurabilityError, match="purging user 1") as raised:
            await memory.close()
        assert raised.value.at_risk == []
        assert Path(config.journal or "").exists()
        with pytest.raises(StoreError, match=f"127.0.0.1:{proxy.port}"):
            await ShortTermMemory.open(config)
        assert "PURGED-SUMMARY" in (await summaries(postgres_url)).values()
        await proxy.start()
        async with ShortTermMemory.open(config) as again:
            for channel in (10, 11, 12):
                assert "PURGED" not in str(await again.build_context(ctx(channel=channel)))
            assert await again.get_entry("shortterm:user:1:10") is None
            await again.flush()
            assert not Path(config.journal or "").exists()
    stored = await summaries(postgres_url)
    assert "PURGED-SUMMARY" not in stored.values() and "OTHER-CHANNEL" not in stored.values()
    assert not any(key.startswith("shortterm:user:1:") for key in stored)


async def test_the_default_journal_of_a_postgres_database_keeps_a_pending_purge(
    proxy: Proxy, postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without STM_JOURNAL: the purge of a user acknowledged as pending while the server
    is down survives the restart (the journal's default folder did not exist)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    config = settings_for(proxy.url(), tmp_path).model_copy(update={"journal": None})
    async with asyncio.timeout(BOUND):
        memory = await ShortTermMemory.open(config)
        await remember(memory, "PURGED-SUMMARY")
        await memory.flush()
        await proxy.stop()
        await memory.clear_short_term_memory_for_user(1)
        with pytest.raises(DurabilityError) as raised:
            await memory.close()
        assert raised.value.at_risk == []
        await proxy.start()
        async with ShortTermMemory.open(config) as again:
            assert "PURGED" not in str(await again.build_context(ctx()))
            await again.flush()
    assert "PURGED-SUMMARY" not in (await summaries(postgres_url)).values()
    assert list((tmp_path / "state" / "discord-stm").iterdir()) == []


async def test_a_network_that_stops_answering(
    proxy: Proxy, postgres_url: str, tmp_path: Path
) -> None:
    """Nothing passes any more and nothing is closed (a dead link: TCP would wait for
    hours): the upgrade answers not saved and a cold read answers, each within the client's
    command timeout; once the link is back everything works again."""
    config = settings_for(proxy.url(), tmp_path, statement_timeout_ms=300)
    async with ShortTermMemory.open(config) as memory, asyncio.timeout(BOUND):
        await remember(memory, "BEFORE")
        proxy.freeze()
        result = await memory.run_tool(ctx(), {"summary": "FROZEN"})
        assert not result.success and "did not answer" in result.message
        await memory.build_context(ctx(channel=30, server=300))
        await memory.clear_short_term_memory_for_channel(11)
        proxy.thaw()
        result = await memory.run_tool(ctx(), {"summary": "AFTER"})
        assert result.success, result.message
        await memory.flush()
    assert (await summaries(postgres_url))["shortterm:server:100:10"] == "AFTER"


async def test_cancelling_a_caller_returns_while_the_lock_is_held(
    postgres_url: str, tmp_path: Path
) -> None:
    """With a long lock timeout, callers waiting on the locked store (a cold read in
    build_context, run_tool, flush, get_entry) return at once when cancelled, long before
    the lock goes; the memory still works after. (What a cancelled caller queued may
    still commit: it was not answered either way.)"""
    config = settings_for(postgres_url, tmp_path, busy_timeout_ms=120_000)
    async with ShortTermMemory.open(config) as memory:
        await remember(memory, "KEPT")
        async with held(postgres_url, FEED_LOCK) as holder:
            await memory.clear_short_term_memory_for_channel(11)
            await _until_waiting_on_a_lock(holder)
            for call in (
                memory.build_context(ctx(channel=30, server=300)),
                memory.run_tool(ctx(), {"summary": "CANCELLED"}),
                memory.flush(),
                memory.get_entry("shortterm:server:300:31"),
            ):
                task = asyncio.ensure_future(call)
                await asyncio.sleep(0.05)  # it waits behind the clear: only this can end it
                task.cancel()
                # Not awaited under a timeout: a cancellation that the timeout's own would
                # end must not pass for a prompt one.
                done, _ = await asyncio.wait({task}, timeout=30)
                assert task in done and task.cancelled(), "a cancelled caller kept waiting"
        await memory.flush()
        result = await memory.run_tool(ctx(), {"summary": "AFTER"})
        assert result.success, result.message
    assert (await summaries(postgres_url))["shortterm:server:100:10"] == "AFTER"


async def _until_waiting_on_a_lock(holder: Any) -> None:
    """Return once some session of this test's database waits for a lock."""
    while True:  # the server's own state: nothing signals it
        if await holder.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid <> pg_backend_pid()"
        ):
            return
        await asyncio.sleep(0.01)


# -- read-only ----------------------------------------------------------------------------
@pytest.fixture
async def role(postgres_url: str) -> AsyncIterator[tuple[str, str]]:
    """A login role of its own (no superuser, no grants yet) and its URL; dropped after."""
    name = f"stm_role_{secrets.token_hex(4)}"
    schema = postgres_url.rpartition("search_path=")[2]
    await query(postgres_url, f"CREATE ROLE {name} LOGIN")
    await query(postgres_url, f"GRANT USAGE ON SCHEMA {schema} TO {name}")
    # Trust authentication takes any password: the URL holds one, as a real one would.
    url = postgres_url.replace("://postgres@", f"://{name}:pw-{name}@", 1)
    try:
        yield name, url
    finally:
        await query(postgres_url, f"DROP OWNED BY {name}")
        await query(postgres_url, f"DROP ROLE {name}")


async def test_a_read_only_session_fails_at_start_up(postgres_url: str, tmp_path: Path) -> None:
    """A session that cannot write (a standby, default_transaction_read_only) is refused
    at start-up, naming the database."""
    async with ShortTermMemory.open(settings_for(postgres_url, tmp_path)):
        pass  # the tables exist: nothing needs creating
    read_only = f"{postgres_url}&default_transaction_read_only=on"
    with pytest.raises(StoreError, match="read-only") as raised:
        await ShortTermMemory.open(settings_for(read_only, tmp_path))
    assert "search_path" in str(raised.value)


async def test_a_role_without_write_grants_fails_at_start_up(
    postgres_url: str, tmp_path: Path, role: tuple[str, str]
) -> None:
    """A role that may only read the tables is refused at start-up, naming what it lacks;
    given the grants (and no right to create tables), it opens."""
    name, url = role
    schema = postgres_url.rpartition("search_path=")[2]
    async with ShortTermMemory.open(settings_for(postgres_url, tmp_path)):
        pass
    await query(postgres_url, f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {name}")
    with pytest.raises(StoreError, match=r"read-only .*short_term_memories \(no INSERT"):
        await ShortTermMemory.open(settings_for(url, tmp_path))
    await query(
        postgres_url, f"GRANT INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {name}"
    )
    async with ShortTermMemory.open(settings_for(url, tmp_path)) as memory:
        await remember(memory, "WRITTEN-BY-THE-ROLE")


async def test_write_grants_revoked_at_run_time(
    postgres_url: str, tmp_path: Path, role: tuple[str, str]
) -> None:
    """Writes refused at run time (grants revoked): the upgrade says it was not saved,
    captures go on, the clear is retried and lands once the grants are back."""
    name, url = role
    schema = postgres_url.rpartition("search_path=")[2]
    async with ShortTermMemory.open(settings_for(postgres_url, tmp_path)):
        pass
    writes = f"INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema}"
    await query(postgres_url, f"GRANT SELECT, {writes} TO {name}")
    async with ShortTermMemory.open(settings_for(url, tmp_path)) as memory:
        await remember(memory, "ACKED")
        await remember(memory, "CLEAR-ME", channel=11)
        await query(postgres_url, f"REVOKE {writes} FROM {name}")
        async with asyncio.timeout(BOUND):
            result = await memory.run_tool(ctx(), {"summary": "NOT-WRITABLE"})
            assert not result.success and NOT_SAVED in result.message
            await memory.capture(turn(ctx(), "CAPTURED"))
            entry = await memory.get_entry("shortterm:server:100:10")
            assert entry is not None and entry.messages[-2].content == "CAPTURED"
            await memory.clear_short_term_memory_for_channel(11)
            with pytest.raises(DurabilityError, match="clearing channel 11"):
                await memory.flush()
        await query(postgres_url, f"GRANT {writes} TO {name}")
    stored = await summaries(postgres_url)
    assert stored["shortterm:server:100:10"] == "ACKED"
    assert not any(key.endswith(":11") for key in stored)


# -- what can never be stored, and what passes ---------------------------------------------
async def test_a_value_no_constraint_lets_in_does_not_block_the_purge_behind_it(
    postgres_url: str,
) -> None:
    """A row the schema's CHECK refuses (SQLSTATE class 23) is rejected and reported; the
    purge queued behind it lands instead of waiting behind it forever."""
    from test_writer_poison import row

    from stm import RejectedWriteError
    from stm._lineage import Lineage
    from stm._writer import Writer
    from stm.store._base import PurgeUser, SaveDistilled
    from stm.store._postgres import PostgresStore

    store = await PostgresStore.open(postgres_url)
    writer = Writer(store, write_behind=3600, retry_delay=3600)
    writer.start()
    try:
        own = row(key="shortterm:user:7:10", scope="user", user_id=7)
        await writer.submit(SaveDistilled(own, lineage=Lineage(frozenset({7}))))
        poison = writer.submit(SaveDistilled(row(scope="neither")))
        writer.submit_change(PurgeUser(7, None), what="purging user 7 everywhere")
        async with asyncio.timeout(BOUND):
            with pytest.raises(RejectedWriteError, match="check constraint"):
                await poison
            await writer.flush()
        assert await store.execute("SELECT key FROM short_term_memories") == []
    finally:
        await writer.close()
        await store.close()


def test_a_full_disk_is_retried_not_dropped() -> None:
    """PostgreSQL's passing failures (full disk, lock and statement timeouts, a terminated
    or lost connection, read-only, missing grants, too many connections) are retried;
    values it can never hold, constraints it can never meet and its limits are not."""
    import asyncpg

    from stm.store._faults import is_permanent

    passing = [
        asyncpg.DiskFullError, asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError,
        asyncpg.AdminShutdownError, asyncpg.ConnectionDoesNotExistError,
        asyncpg.ReadOnlySQLTransactionError, asyncpg.InsufficientPrivilegeError,
        asyncpg.TooManyConnectionsError, asyncpg.CannotConnectNowError,
        asyncpg.IdleInTransactionSessionTimeoutError,
    ]  # fmt: skip
    permanent = [
        asyncpg.CheckViolationError, asyncpg.NumericValueOutOfRangeError,
        asyncpg.CharacterNotInRepertoireError, asyncpg.ProgramLimitExceededError,
    ]  # fmt: skip
    assert [c.__name__ for c in passing if is_permanent(c("x"))] == []
    assert [c.__name__ for c in permanent if not is_permanent(c("x"))] == []
    assert not is_permanent(TimeoutError()) and not is_permanent(StoreError("no answer"))


async def test_a_batch_cancelled_anywhere_leaves_no_connection_mid_transaction(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A store batch cancelled at any point (BEGIN, its statements, COMMIT), as the memory's
    background tasks are when it closes: no connection goes back to the pool inside a
    transaction (asyncpg would reset it and log an error), and the store works on."""
    from stm.store import open_store
    from stm.store._base import LoadRows, SaveOptOut

    store = await open_store(STMConfig(database=postgres_url))
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            for turns in range(40):  # cancelled after 0, 1, ... event-loop turns
                ops = [SaveOptOut(7, turns % 2 == 0, 1.0)] if turns % 3 else []
                task = asyncio.create_task(store.run([*ops, LoadRows(("k",), 0.0, 0.0)]))
                for _ in range(turns):
                    await asyncio.sleep(0)
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            assert await store.run([LoadRows(("k",), 0.0, 0.0)]) == [[]]
            await asyncio.sleep(0.05)  # a reset would be logged as its connection is released
        assert "active transaction" not in caplog.text
    finally:
        await store.close()
