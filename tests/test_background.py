"""Background work: held by reference, failures logged with their scope key, deletes retried
until durable, and close() waits for all of it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
from helpers import Opener
from shredding import stored_rows

from stm import ShortTermMemory, STMConfig
from stm.testing import Clock, ManualScheduler, ctx, faulty_memory, turn

STM_DIR = str(Path(__file__).parent.parent / "stm")


# Each test runs on both stores.
BOTH_STORES = True


async def rows(database: str) -> dict[str, str | None]:
    return {row.key: row.summary for row in await stored_rows(database)}


async def test_every_background_task_is_held_by_reference(open_memory: Opener) -> None:
    """Each task the library starts is referenced by the memory while it runs, so the event
    loop's weak references cannot let it be collected mid-write."""
    loop = asyncio.get_running_loop()
    started: list[asyncio.Task[Any]] = []

    def factory(
        loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], **kwargs: Any
    ) -> asyncio.Task[Any]:
        task = asyncio.Task(coro, loop=loop, **kwargs)
        if coro.cr_code.co_filename.startswith(STM_DIR):
            started.append(task)
        return task

    loop.set_task_factory(factory)  # type: ignore[arg-type]
    try:
        first = await open_memory()
        await first.capture(turn(ctx(), "x"))
        assert (await first.run_tool(ctx(), {"summary": "s"})).success
        await first.close()
        memory = await open_memory()

        def unreferenced() -> list[str]:
            held = set(memory.background.tasks) | {memory.writer._task}
            held.update(memory.background.periodic)
            return [t.get_name() for t in started if not t.done() and t not in held]

        for channel in range(10, 30):
            await memory.capture(turn(ctx(channel=channel), "cold"))
            assert unreferenced() == []
            await asyncio.sleep(0)
        await memory.clear_short_term_memory_for_user(1)
        await memory.clear_short_term_memory_for_channel(11)
        assert unreferenced() == []
        assert any(t.get_name().startswith("stm-hydrate") for t in started)
        await memory.close()
    finally:
        loop.set_task_factory(None)


async def test_a_failing_background_task_is_logged_with_its_scope_key(
    config: STMConfig, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """A hydration that fails in the background names the keys it was for."""
    async with ShortTermMemory.open(config, clock=clock) as earlier:
        # A row already stored: keys new to the cache are read, not known to be absent.
        await earlier.capture(turn(ctx(channel=1), "earlier"))
    memory, store = await faulty_memory(config, clock=clock)
    store.garbage_reads = True
    with caplog.at_level(logging.ERROR, logger="stm"):
        await memory.capture(turn(ctx(channel=42), "x"))
        await memory.background.gather()
    assert "shortterm:server:100:42" in caplog.text
    store.garbage_reads = False
    await memory.close()


async def test_a_failed_delete_is_retried_until_durable_without_a_flush(
    config: STMConfig, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody waits: the writer keeps retrying the delete until it lands."""
    scheduler = ManualScheduler()
    memory, store = await faulty_memory(config, clock=clock, scheduler=scheduler)
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": "DELETE-ME"})).success
    store.failures = 4
    waits = []
    with caplog.at_level(logging.WARNING, logger="stm.writer"):
        await memory.clear_short_term_memory_for_channel(10)
        for _ in range(10):  # bounded: four failures need four waits
            await scheduler.idle("stm-writer")
            retry_at = scheduler.next_deadline("stm-writer")
            if retry_at is None:
                break  # nothing left to retry
            waits.append(retry_at - scheduler.now())
            scheduler.advance(retry_at - scheduler.now())
    assert store.failures == 0 and memory.writer.pending == 0
    # Backoff doubles from delete_retry_seconds.
    assert waits[:4] == pytest.approx([0.05, 0.1, 0.2, 0.4])
    assert "clearing channel 10" in caplog.text
    assert await rows(config.database) == {}
    await memory.close()


async def test_close_waits_for_everything_in_flight(config: STMConfig, clock: Clock) -> None:
    """close() right after work was started (not awaited) finishes it all: the upgrade,
    the write-behind of captures, the clear and the purge."""
    first, store = await faulty_memory(
        config.model_copy(update={"write_behind_seconds": 3600}), clock=clock
    )
    await first.capture(turn(ctx(channel=11), "gone"))
    assert (await first.run_tool(ctx(channel=11), {"summary": "CLEARED"})).success
    # In another server: a reply in #10 whose prompt showed user 3's words would make the
    # notes written from #10's window theirs too, and the purge would clear them.
    purged = ctx(user=3, channel=12, server=200)
    await first.capture(turn(purged, "purged"))
    assert (await first.run_tool(purged, {"summary": "PURGED"})).success
    for channel in (10, *range(20, 40)):
        await first.capture(turn(ctx(channel=channel), "hot"))  # no hydration left to wait for
    await first.flush()
    store.hold()
    upgrade = asyncio.create_task(first.run_tool(ctx(channel=10), {"summary": "IN-FLIGHT"}))
    await store.holding()  # the upgrade's transaction is at the store, not committed
    # Queued while the writer is busy with the upgrade: close() must wait for these.
    for channel in range(20, 40):
        await first.capture(turn(ctx(channel=channel), "behind"))
    await first.clear_short_term_memory_for_channel(11)
    await first.clear_short_term_memory_for_user(3)
    closing = asyncio.create_task(first.close())
    store.release()
    await closing
    assert (await upgrade).success
    found = await stored_rows(config.database)
    stored = {row.key: row.summary for row in found}
    assert stored["shortterm:server:100:10"] == "IN-FLIGHT"
    counters = [
        row.turns_since_refresh
        for row in found
        if row.key.startswith(("shortterm:server:100:2", "shortterm:server:100:3"))
        and len(row.key) == len("shortterm:server:100:20")
    ]
    assert counters == [2] * 20  # both captures' counters were written behind
    assert "CLEARED" not in stored.values() and "PURGED" not in stored.values()
