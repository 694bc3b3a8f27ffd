"""The single writer tells a permanent failure from a passing one: a poison operation is
rejected and reported, and what is queued behind it (a purge above all) still lands."""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stm._timing
from stm import DurabilityError, RejectedWriteError, STMConfig
from stm._cache import Entry
from stm._lineage import Lineage
from stm._writer import Writer
from stm.store import open_store
from stm.store._base import (
    DeleteChannel,
    LoadDepartures,
    PurgeUser,
    Saved,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    SharedChange,
    StoredRow,
)
from stm.testing import ctx, faulty_memory, turn

# Each test runs on both stores.
BOTH_STORES = True

# Values no column of either store can hold: integers beyond 64 bits, text that is not UTF-8 (and,
# below, a row no constraint of the schema lets in).
BAD_INTS = st.one_of(st.integers(min_value=2**63), st.integers(max_value=-(2**63) - 1))
BAD_TEXT = st.sampled_from(["\ud800", "a\udfffb", "\udc80" * 3])


def row(key: str = "shortterm:server:100:10", **fields: Any) -> StoredRow:
    values: dict[str, Any] = dict(
        key=key, scope="server", server_id=100, user_id=None, channel_id=10, persona_id=None,
        parent_channel_id=None, channel_name="general", server_name="srv", channel_private=False,
        summary="kept", categories={}, turns_since_refresh=0,
        last_refreshed_turn=1, updated_at=1.0,
    )  # fmt: skip
    values.update(fields)
    return StoredRow(**values)


def poisons(bad_int: int, bad_text: str) -> list[tuple[str, Any]]:
    """One operation per way a value can be unstorable, built directly (as a caller that
    skipped validation would)."""
    return [
        ("id", SaveDistilled(row(channel_id=bad_int))),
        ("server", SaveDistilled(row(server_id=bad_int))),
        ("persona", SaveDistilled(row(persona_id=bad_int))),
        ("contributor", SaveDistilled(row(), lineage=Lineage(frozenset({bad_int})))),
        ("channel name", SaveDistilled(row(channel_name=bad_text))),
        ("server name", SaveDistilled(row(server_name=bad_text))),
        ("summary", SaveDistilled(row(summary=bad_text))),
        ("purge", PurgeUser(bad_int, None)),
        ("purge in server", PurgeUser(1, bad_int)),
        ("clear", DeleteChannel(bad_int)),
        ("settings", SaveServerSettings(bad_int, "{}")),
        ("settings text", SaveServerSettings(1, bad_text)),
        ("opt-out", SaveOptOut(bad_int, True, 1.0)),
        ("constraint", SaveDistilled(row(scope="neither"))),
    ]


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def _poison_before_purge(poison: Any, database: str = ":memory:") -> None:
    store = await open_store(STMConfig(database=database))
    writer = Writer(store, write_behind=3600, retry_delay=3600)
    writer.start()
    try:
        own = row(key="shortterm:user:7:10", scope="user", user_id=7)
        await writer.submit(SaveDistilled(own, lineage=Lineage(frozenset({7}))))
        if isinstance(poison, SharedChange):
            writer.submit_change(poison, what="poison change")
            answer = None
        else:
            answer = writer.submit(poison, what="poison")
        saved = writer.submit(SaveDistilled(row(key="shortterm:server:100:11", channel_id=11)))
        writer.submit_change(PurgeUser(7, None), what="purging user 7 everywhere")
        await writer.flush()  # would raise DurabilityError if anything were stuck
        if answer is not None:
            with pytest.raises(RejectedWriteError):
                await answer
        assert isinstance(await saved, Saved)  # the write behind the poison went ahead
        rows = await store.execute("SELECT key FROM short_term_memories WHERE user_id = 7")
        assert rows == []
        assert writer.rejected == 1 and writer.pending == 0
    finally:
        await writer.close()
        await store.close()


def test_a_poison_operation_queued_before_a_purge_does_not_stop_it(
    store_kind: str, fresh_database: Callable[[str], str]
) -> None:
    """Any operation with a value the store can never hold, queued before a purge, is
    rejected (its caller hears RejectedWriteError); the purge and the write queued with
    it land. On each store (SQLite in memory; a PostgreSQL schema per example)."""
    made = itertools.count()

    @settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(bad_int=BAD_INTS, bad_text=BAD_TEXT, which=st.integers(min_value=0, max_value=13))
    def rejected(bad_int: int, bad_text: str, which: int) -> None:
        _, poison = poisons(bad_int, bad_text)[which]
        database = ":memory:" if store_kind == "sqlite" else fresh_database(f"e{next(made)}")
        run(lambda: _poison_before_purge(poison, database))

    rejected()


@pytest.mark.parametrize("index", range(14), ids=[name for name, _ in poisons(2**63, "\ud800")])
async def test_each_kind_of_poison_is_rejected(index: int, store_database: str) -> None:
    """Every kind, once each (the property test above draws them at random)."""
    await _poison_before_purge(poisons(2**64, "\ud800")[index][1], store_database)


async def test_operations_submitted_together_are_answered_together(store_database: str) -> None:
    """``submit_all`` answers the list of its operations' results, in a batch shared with
    single submissions; with a poison among them, all of them are refused together (none
    is written) and what was queued around them still lands."""
    store = await open_store(STMConfig(database=store_database))
    writer = Writer(store, write_behind=3600, retry_delay=3600)
    writer.start()
    try:
        one = writer.submit(SaveDistilled(row(key="shortterm:server:100:1", channel_id=1)))
        both = writer.submit_all(
            [
                SaveDistilled(row(key="shortterm:server:100:2", channel_id=2)),
                SaveDistilled(row(key="shortterm:server:100:3", channel_id=3)),
            ],
            what="two upgrades",
        )
        alone = writer.submit_all([LoadDepartures()], what="one")
        last = writer.submit(SaveDistilled(row(key="shortterm:server:100:4", channel_id=4)))
        ids = [await one, *await both, await last]
        assert await alone == [{}]
        assert len(set(ids)) == 4 and all(isinstance(i, Saved) for i in ids)
        assert writer.commits == 1

        poisoned = writer.submit_all(
            [
                SaveDistilled(row(key="shortterm:server:100:5", channel_id=5)),
                SaveDistilled(row(scope="neither")),
            ],
            what="poisoned",
        )
        after = writer.submit(SaveDistilled(row(key="shortterm:server:100:6", channel_id=6)))
        with pytest.raises(RejectedWriteError, match="poisoned"):
            await poisoned
        assert isinstance(await after, Saved)
        keys = {k for (k,) in await store.execute("SELECT key FROM short_term_memories")}
        assert keys == {f"shortterm:server:100:{c}" for c in (1, 2, 3, 4, 6)}
    finally:
        await writer.close()
        await store.close()
    closed = writer.submit_all([LoadDepartures()], what="too late")
    with pytest.raises(DurabilityError, match="too late"):
        await closed


async def test_a_poison_row_in_write_behind_does_not_lose_the_others(
    config: STMConfig, caplog: pytest.LogCaptureFixture
) -> None:
    """One unstorable entry among many written behind: it is dropped and logged with its
    scope key, the others are written, and a purge behind them lands."""
    memory, store = await faulty_memory(config)
    for channel in (10, 11, 12):
        await memory.capture(turn(ctx(channel=channel), "x"))
    poisoned = memory.cache.peek("shortterm:server:100:11")
    assert isinstance(poisoned, Entry)
    poisoned.channel_name = "bad\ud800name"
    with caplog.at_level(logging.ERROR, logger="stm.writer"):
        await memory.clear_short_term_memory_for_user(2)
        await memory.flush()
    assert "shortterm:server:100:11" in caplog.text and "can never store" in caplog.text
    keys = {k for (k,) in await store.inner.execute("SELECT key FROM short_term_memories")}
    assert "shortterm:server:100:11" not in keys
    assert {"shortterm:server:100:10", "shortterm:server:100:12"} <= keys
    assert {f"shortterm:user:1:{c}" for c in (10, 11, 12)} <= keys
    await memory.close()


async def test_a_passing_failure_is_still_retried_in_order(config: STMConfig) -> None:
    """A lock or I/O error is not a rejection: the purge is retried until it lands."""
    memory, store = await faulty_memory(config.model_copy(update={"delete_retry_seconds": 0.01}))
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": "S"})).success
    store.failures = 3
    await memory.clear_short_term_memory_for_user(1)
    await memory.writer.flush(attempts=5)  # each attempt retries at once, in order
    assert memory.writer.rejected == 0
    rows = await store.inner.execute("SELECT summary FROM short_term_memories")
    assert rows == [(None,)]
    await memory.close()


async def test_an_upgrade_behind_a_failing_delete_answers_after_one_attempt(
    config: STMConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a delete waits out a long backoff, run_tool does not wait for it: the queue is
    tried once more with the upgrade behind the delete, and the answer (nothing saved, or
    saved once the fault is gone) comes from that attempt."""
    monkeypatch.setattr(stm._timing, "MAX_BACKOFF", 3600.0)
    memory, store = await faulty_memory(config.model_copy(update={"delete_retry_seconds": 3600}))
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": "before"})).success
    store.broken = True
    await memory.clear_short_term_memory_for_channel(99)
    with pytest.raises(DurabilityError):
        await memory.flush()  # the delete failed and now waits out an hour's backoff
    attempts = len(store.batches)
    async with asyncio.timeout(60):  # a guard against the hour-long backoff, not a timing
        result = await memory.run_tool(ctx(), {"summary": "during"})
    assert not result.success and "Nothing was stored" in result.message
    assert len(store.batches) == attempts + 1
    store.broken = False
    async with asyncio.timeout(60):
        result = await memory.run_tool(ctx(), {"summary": "after"})
    assert result.success, result.message
    await memory.close()
