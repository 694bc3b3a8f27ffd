"""The write path under faults: no false success, deletes retried until durable."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from helpers import server_entry

from stm import DurabilityError, ShortTermMemory, STMConfig
from stm._cache import Entry
from stm._keys import server_key
from stm._writer import Writer
from stm.store._base import DeleteChannel as DeleteChannelOp
from stm.store._base import ForgetMessages, LoadDepartures, LoadRecent, LoadRows, SaveOptOut
from stm.testing import Clock, FaultyStore, ManualScheduler, ctx, faulty_memory, turn


@pytest.fixture
async def flaky(config: STMConfig, clock: Clock) -> tuple[ShortTermMemory, FaultyStore]:
    return await faulty_memory(config, clock=clock)


async def test_failed_upgrade_is_not_acknowledged_and_is_reverted(
    flaky: tuple[ShortTermMemory, FaultyStore],
) -> None:
    """A write that cannot commit answers success=False and leaves memory as it was."""
    memory, store = flaky
    c = ctx()
    await memory.capture(turn(c, "x"))
    assert (await memory.run_tool(c, {"summary": "saved"})).success
    store.broken = True
    c2 = ctx()
    result = await memory.run_tool(c2, {"summary": "lost"})
    assert not result.success and "could not be saved" in result.message
    assert not c2.disable_short_term_memory_update
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary == "saved"
    # Captures keep working in memory meanwhile.
    await memory.capture(turn(ctx(), "still captured"))
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.messages[-2].content == "still captured"
    store.broken = False
    await memory.close()


async def test_failed_delete_is_retried_reported_and_finally_durable(
    flaky: tuple[ShortTermMemory, FaultyStore], caplog: pytest.LogCaptureFixture
) -> None:
    """flush() names a delete that is not durable; it is retried and lands once possible."""
    memory, store = flaky
    c = ctx()
    await memory.capture(turn(c, "x"))
    assert (await memory.run_tool(c, {"summary": "to delete"})).success
    store.broken = True
    with caplog.at_level(logging.ERROR, logger="stm.writer"):
        await memory.clear_short_term_memory_for_channel(10)
        with pytest.raises(DurabilityError, match="clearing channel 10"):
            await memory.flush()
    assert "could not be made durable" in caplog.text
    assert await memory.get_entry("shortterm:server:100:10") is None
    store.broken = False
    await memory.flush()
    rows = await store.inner.execute("SELECT count(*) FROM short_term_memories")
    assert rows == [(0,)]
    await memory.close()


async def test_reads_wait_behind_a_failing_delete(
    flaky: tuple[ShortTermMemory, FaultyStore],
) -> None:
    """While a delete is not durable, no read can bring the deleted row back."""
    memory, store = flaky
    c = ctx()
    await memory.capture(turn(c, "x"))
    assert (await memory.run_tool(c, {"summary": "GONE"})).success
    store.broken = True
    await memory.clear_short_term_memory_for_channel(10)
    context = await memory.build_context(ctx())
    assert "GONE" not in str(context)
    store.broken = False
    assert "GONE" not in str(await memory.build_context(ctx()))
    await memory.close()


async def test_close_reports_what_could_not_be_made_durable(
    flaky: tuple[ShortTermMemory, FaultyStore],
) -> None:
    """close() tries again, then raises DurabilityError naming the lost delete."""
    memory, store = flaky
    await memory.capture(turn(ctx(), "x"))
    await memory.flush()
    store.broken = True
    await memory.clear_short_term_memory_for_user(1)
    with pytest.raises(DurabilityError, match="purging user 1"):
        await memory.close()
    assert memory.closed


async def test_upgrade_refused_while_rows_cannot_be_read(
    flaky: tuple[ShortTermMemory, FaultyStore],
) -> None:
    """An unread row is never overwritten blind: the upgrade is refused and captured
    messages stay; once the store is back the upgrade keeps the other categories."""
    from stm import Category

    memory, _store = flaky
    await memory.set_categories(100, [Category("Topic"), Category("Mood")])
    assert (await memory.run_tool(ctx(), {"topic": "KEPT-TOPIC"})).success
    await memory.close()
    reopened, flaky_store = await faulty_memory(memory.config)
    flaky_store.broken = True
    await reopened.capture(turn(ctx(), "captured while down"))
    refused = await reopened.run_tool(ctx(), {"mood": "calm"})
    assert not refused.success and "unavailable" in refused.message
    entry = await reopened.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.messages[0].content == "captured while down"
    flaky_store.broken = False
    assert (await reopened.run_tool(ctx(), {"mood": "calm"})).success
    entry = await reopened.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert entry.categories == {"topic": "KEPT-TOPIC", "mood": "calm"}
    assert entry.messages[0].content == "captured while down"
    await reopened.close()


async def test_purges_and_clears_schedule_a_scrub_without_a_flush(
    config: STMConfig, clock: Clock
) -> None:
    """Erasure runs soon after a purge or clear even if nobody calls flush(), once per
    burst of deletes; a janitor pass that removed nothing needs none."""
    scheduler = ManualScheduler()
    memory, store = await faulty_memory(
        config.model_copy(update={"scrub_delay_seconds": 30}), scheduler=scheduler
    )
    for user in (1, 2):
        await memory.capture(turn(ctx(user=user, channel=10 + user), "x"))
        assert (await memory.run_tool(ctx(user=user, channel=10 + user), {"summary": "s"})).success
    await memory.writer.flush(scrub=False)
    await memory.run_janitor()
    await scheduler.idle("stm-writer")
    assert not any("Scrub" in batch for batch in store.batches)  # the janitor's needs none
    await memory.clear_short_term_memory_for_channel(11)
    await memory.clear_short_term_memory_for_user(2)
    await scheduler.idle("stm-writer")
    scheduler.advance(29)
    await scheduler.idle("stm-writer")
    assert not any("Scrub" in batch for batch in store.batches)  # not due yet
    scheduler.advance(1)
    await scheduler.idle("stm-writer")
    scrubs = sum(batch.count("Scrub") for batch in store.batches)
    assert scrubs == 1
    await memory.close()


async def test_a_store_answering_out_of_contract_does_not_stop_the_writer(
    flaky: tuple[ShortTermMemory, FaultyStore],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A purge whose result cannot be read is logged; the writes after it still commit
    and flush answers (upgrades in the purge's reach stay refused: its plan is unknown)."""
    memory, store = flaky
    await memory.capture(turn(ctx(user=1), "mine"))
    await memory.flush()
    inner = store.run

    async def garbled(ops: list[object]) -> list[object]:
        results = await inner(ops)  # type: ignore[arg-type]
        return [
            object() if type(op).__name__ == "PurgeUser" else r
            for op, r in zip(ops, results, strict=True)
        ]

    monkeypatch.setattr(store, "run", garbled)
    with caplog.at_level(logging.ERROR, logger="stm"):
        await memory.clear_short_term_memory_for_user(1)
        await memory.flush()
    assert "cannot be read" in caplog.text
    monkeypatch.setattr(store, "run", inner)
    await memory.capture(turn(ctx(user=2, channel=11), "after"))
    await memory.clear_short_term_memory_for_channel(12)
    await memory.flush()
    assert "DeleteChannel" in store.batches[-1] or "DeleteChannel" in store.batches[-2]
    await memory.close()


async def test_a_writer_that_dies_answers_every_waiter(
    flaky: tuple[ShortTermMemory, FaultyStore], caplog: pytest.LogCaptureFixture
) -> None:
    """A bug that ends the writer's loop is logged, and flush and every queued write hear
    of it at once instead of waiting forever."""
    memory, store = flaky
    writer = memory.writer
    store.hold()
    c = ctx()
    await memory.capture(turn(c, "x"))
    upgrade = asyncio.ensure_future(memory.run_tool(c, {"summary": "queued"}))
    await store.holding()

    def broken() -> list[object]:
        raise RuntimeError("a bug in the writer")

    writer._next_batch = broken  # type: ignore[method-assign, assignment]
    with caplog.at_level(logging.ERROR, logger="stm"):
        store.release()
        await asyncio.wait_for(upgrade, 10)
        queued = writer.submit(LoadDepartures())
        with pytest.raises(DurabilityError):
            await asyncio.wait_for(queued, 10)
        with pytest.raises(DurabilityError, match="stopped"):
            await asyncio.wait_for(memory.flush(), 10)
    assert "writer stopped" in caplog.text
    with pytest.raises(DurabilityError):
        await asyncio.wait_for(memory.close(), 10)


# -- reads through the writer's queue -------------------------------------------------------
def _dirty_entry(channel: int, turns: int) -> Entry:
    """A hydrated entry of server 1 whose counters are ``turns``."""
    return server_entry(channel, updated_at=time.time(), turns=turns)


@pytest.fixture
async def reader(store: Any) -> AsyncIterator[Writer]:
    """A writer whose write-behind is never due during the test."""
    writer = Writer(store, write_behind=3600, retry_delay=3600)
    writer.start()
    yield writer
    await writer.close()


def _load(*keys: str) -> LoadRows:
    return LoadRows(keys, 0.0, 0.0)


async def test_a_read_does_not_carry_the_write_behind_of_other_keys(
    reader: Writer, store: Any
) -> None:
    """A read commits nothing: the dirty entries of other keys stay dirty, unwritten."""
    other = _dirty_entry(2, turns=4)
    reader.mark_dirty(other)
    assert await reader.submit(_load(server_key(1, 1))) == []
    assert await store.row(other.key) is None
    assert len(reader.write_behind) == 1 and reader.commits == 1  # the read alone
    await reader.flush()
    written = await store.row(other.key)
    assert written is not None and written.turns_since_refresh == 4


async def test_a_read_of_a_dirty_key_sees_its_counters(reader: Writer, store: Any) -> None:
    """The dirty entry a read covers is written just ahead of it (and only that one)."""
    read, other = _dirty_entry(1, turns=3), _dirty_entry(2, turns=4)
    reader.mark_dirty(read)
    reader.mark_dirty(other)
    (row,) = await reader.submit(_load(read.key))
    assert row.turns_since_refresh == 3
    assert await store.row(other.key) is None
    assert len(reader.write_behind) == 1
    # A recall group's read sees the group's dirty entries the same way.
    recent = await reader.submit(LoadRecent("server", 1, None, None, 5, 0.0, 0.0))
    assert {r.key: r.turns_since_refresh for r in recent} == {read.key: 3, other.key: 4}


async def test_a_read_after_a_delete_sees_the_delete(reader: Writer, store: Any) -> None:
    """A read queued behind a delete is answered after it, even when the delete has a
    dirty entry of its channel to write before it and the read is queued at once."""
    gone, kept = _dirty_entry(1, turns=2), _dirty_entry(2, turns=5)
    reader.mark_dirty(gone)
    reader.mark_dirty(kept)
    await reader.flush()
    gone.turns_since_refresh = 7
    reader.mark_dirty(gone)
    reader.submit_change(DeleteChannelOp(1), what="clearing channel 1")
    rows = await reader.submit(_load(gone.key, kept.key))
    assert [r.key for r in rows] == [kept.key]
    assert await store.row(gone.key) is None


async def test_an_entry_displaced_before_its_write_is_written(reader: Writer, store: Any) -> None:
    """An evicted entry still waiting for its write, whose key a new entry (not read yet)
    took: its counters are written in the next batch all the same, not lost."""
    evicted = _dirty_entry(1, turns=4)
    reader.mark_dirty(evicted)
    successor = _dirty_entry(1, turns=1)
    successor.hydrated = False
    reader.mark_dirty(successor)
    await reader.flush()
    written = await store.row(evicted.key)
    assert written is not None and written.turns_since_refresh == 4


async def test_a_shared_change_cannot_skip_its_retries(memory: Any) -> None:
    """The path that fails its caller at once is closed to shared changes: a change other
    processes must honour is queued only by ``submit_change``, retried and journaled."""
    for change in (DeleteChannelOp(10), ForgetMessages(10, (5,)), SaveOptOut(1, True, 0.0)):
        with pytest.raises(TypeError, match="submit_change"):
            memory.writer.submit(change)
