"""Every change other processes must honour reaches them, whatever failed on its way.

Process A makes a change while its store fails in one of three ways; process B, on the
same database, must honour it within ``STM_COHERENCE_SECONDS`` of the fault being gone:

- ``io``: the one transaction that carries the change fails once with an I/O error;
- ``lock``: another connection holds the write lock past ``STM_BUSY_TIMEOUT_MS`` (SQLite's
  ``BEGIN IMMEDIATE``; on PostgreSQL the row every writing batch locks first);
- ``restart``: every transaction fails until A closes, and A's successor, opened on the
  same database and journal, carries the change out.

The changes are every kind of ``store.base.SharedChange``: a message deleted and one
edited on Discord, a channel cleared, a user purged, a server's removal, its return, its
clearing, its settings and an opt-out. Each kind × fault runs on both stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from stm import DialogueMessage, DurabilityError, GenerationFinished, ShortTermMemory, STMConfig
from stm.store import open_store
from stm.store._base import Op, SharedChange
from stm.testing import Clock, FaultyStore, ctx

BOTH_STORES = True

SERVER, CHANNEL, MESSAGE, USER = 100, 10, 555, 1
KEY = f"shortterm:server:{SERVER}:{CHANNEL}"
SECRET = "WORDS-THAT-MUST-GO"
COHERENCE = 1.0
# How long a fault-free store may take to make what is pending durable (a loaded machine).
DURABLE_WITHIN = 20.0
# The row every writing batch on PostgreSQL locks first (see stm/store/_postgres.py).
FEED_LOCK = "SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE"


class ChangeFaults(FaultyStore):
    """A FaultyStore whose next ``change_failures`` transactions that carry a shared change
    fail with an I/O error (reads and other writes pass)."""

    change_failures = 0

    async def _run(self, ops: Sequence[Op]) -> list[object]:
        if self.change_failures and any(isinstance(op, SharedChange) for op in ops):
            self.change_failures -= 1
            raise OSError(5, "Input/output error")
        return await super()._run(ops)


@dataclass(frozen=True)
class Kind:
    """One kind of change: what B holds before it (``before``, run with A too), the change
    A makes (``make``), and whether a memory honours it (``honoured``)."""

    before: Callable[[ShortTermMemory, ShortTermMemory], Awaitable[None]]
    make: Callable[[ShortTermMemory], Awaitable[object]]
    honoured: Callable[[ShortTermMemory], Awaitable[bool]]


def said(author: int, text: str, message_id: int = MESSAGE) -> GenerationFinished:
    context = ctx(user=author, channel=CHANNEL, server=SERVER)
    return GenerationFinished(
        context=context,
        messages=[
            DialogueMessage(
                role="user",
                content=text,
                author_id=author,
                speaker_name=f"user{author}",
                message_id=message_id,
            ),
            DialogueMessage(role="assistant", content="noted", message_id=message_id + 1),
        ],
    )


async def holds_secret(_a: ShortTermMemory, b: ShortTermMemory) -> None:
    await b.capture(said(USER, SECRET))
    assert not await secret_gone(b)


async def secret_gone(memory: ShortTermMemory) -> bool:
    entry = memory.cache.peek(KEY)
    return entry is None or all(SECRET not in m.content for m in entry.messages)


async def nothing(_a: ShortTermMemory, b: ShortTermMemory) -> None:
    await b.departures()  # read now: B's next read is due within the bound


async def removed_before(a: ShortTermMemory, b: ShortTermMemory) -> None:
    await a.server_removed(SERVER)
    await a.flush()
    await until(lambda: departed(b), COHERENCE)


async def configured_and_held(a: ShortTermMemory, b: ShortTermMemory) -> None:
    await a.update_server_settings(SERVER, crude_message_count=3)
    await until(lambda: has_settings(b), COHERENCE)
    await holds_secret(a, b)
    await b.flush()  # the channel has a row: what clearing the server finds


async def departed(memory: ShortTermMemory) -> bool:
    return SERVER in await memory.departures()


async def returned(memory: ShortTermMemory) -> bool:
    return not await departed(memory)


async def has_settings(memory: ShortTermMemory) -> bool:
    return memory.settings_for(SERVER).crude_message_count == 3


async def server_cleared(memory: ShortTermMemory) -> bool:
    return await secret_gone(memory) and not await has_settings(memory)


async def opted_out(memory: ShortTermMemory) -> bool:
    return memory.is_opted_out(7)


async def tolerant(call: Awaitable[object]) -> None:
    """A change whose maker waits for it: not yet durable is what a fault makes it."""
    with contextlib.suppress(DurabilityError):
        await call


KINDS = {
    "message_deleted": Kind(
        holds_secret, lambda a: a.forget_messages(CHANNEL, [MESSAGE]), secret_gone
    ),
    "message_edited": Kind(
        holds_secret, lambda a: a.edit_message(CHANNEL, MESSAGE, "other words"), secret_gone
    ),
    "channel_cleared": Kind(
        holds_secret, lambda a: a.clear_short_term_memory_for_channel(CHANNEL), secret_gone
    ),
    "user_purged": Kind(
        holds_secret, lambda a: a.clear_short_term_memory_for_user(USER), secret_gone
    ),
    "server_removed": Kind(nothing, lambda a: a.server_removed(SERVER), departed),
    "server_returned": Kind(removed_before, lambda a: a.server_returned(SERVER), returned),
    "server_cleared": Kind(
        configured_and_held, lambda a: tolerant(a.clear_server(SERVER)), server_cleared
    ),
    "settings": Kind(
        nothing,
        lambda a: tolerant(a.update_server_settings(SERVER, crude_message_count=3)),
        has_settings,
    ),
    "opt_out": Kind(nothing, lambda a: tolerant(a.set_user_opt_out(7, True)), opted_out),
}


async def until(condition: Callable[[], Awaitable[bool]], within: float) -> float:
    """Seconds until ``condition`` held (a store error while it is asked counts as not
    yet); fails past ``within``."""
    started = time.monotonic()
    while True:
        with contextlib.suppress(Exception):
            if await condition():
                return time.monotonic() - started
        if time.monotonic() - started > within:
            raise AssertionError(f"not honoured within {within} s")
        await asyncio.sleep(0.01)


async def durable(memory: ShortTermMemory) -> None:
    """Return once everything ``memory`` queued is durable (the fault is gone)."""
    deadline = time.monotonic() + DURABLE_WITHIN
    while True:
        try:
            await memory.flush()
            return
        except DurabilityError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def failed_once(memory: ShortTermMemory) -> None:
    """Wait for A's writer to have failed a transaction (the change met the fault)."""
    await until(lambda: _true(memory.writer.counters.failures > 0), DURABLE_WITHIN)


async def _true(value: bool) -> bool:
    return value


@contextlib.asynccontextmanager
async def write_lock(config: STMConfig) -> AsyncIterator[None]:
    """Another connection holds the lock every writing transaction needs."""
    if config.database.startswith("postgres"):
        import asyncpg

        conn = await asyncpg.connect(config.database)
        transaction = conn.transaction()
        await transaction.start()
        try:
            await conn.execute(FEED_LOCK)
            yield
        finally:
            await transaction.rollback()
            await conn.close()
        return
    db = sqlite3.connect(config.database, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        yield
        db.execute("ROLLBACK")
    finally:
        db.close()


@pytest.fixture
def shared_config(config: STMConfig, tmp_path: Path) -> STMConfig:
    return config.model_copy(
        update={
            "busy_timeout_ms": 50,
            "coherence_seconds": COHERENCE,
            "journal": str(tmp_path / "journal"),
        }
    )


async def opened(config: STMConfig, clock: Clock) -> tuple[ShortTermMemory, ChangeFaults]:
    store = ChangeFaults(await open_store(config))
    memory = await ShortTermMemory.open(config, store=store, clock=clock)  # type: ignore[arg-type]
    return memory, store


@pytest.mark.parametrize("fault", ["io", "lock", "restart"])
@pytest.mark.parametrize("kind", sorted(KINDS))
async def test_another_process_honours_the_change_once_the_fault_is_gone(
    shared_config: STMConfig, clock: Clock, kind: str, fault: str
) -> None:
    change = KINDS[kind]
    a, a_store = await opened(shared_config, clock)
    b = await ShortTermMemory.open(shared_config, clock=clock)
    successor: ShortTermMemory | None = None
    try:
        await change.before(a, b)
        await a.flush()
        if fault == "io":
            a_store.change_failures = 1
            await change.make(a)
            await failed_once(a)
            maker = a
        elif fault == "lock":
            async with write_lock(shared_config):
                await change.make(a)
                await failed_once(a)
            maker = a
        else:
            a_store.broken = True
            await change.make(a)
            with pytest.raises(DurabilityError):
                await a.close()
            assert Path(shared_config.journal or "").exists()
            successor = maker = await ShortTermMemory.open(shared_config, clock=clock)
            # In force in the successor as it was in A, before the database has it.
            assert await change.honoured(successor)
        await durable(maker)
        await until(lambda: change.honoured(b), COHERENCE)
        assert await change.honoured(maker)
    finally:
        for memory in (a, b, successor):
            if memory is not None:
                with contextlib.suppress(DurabilityError):
                    await memory.close()


async def test_an_upgrade_whose_prompt_showed_a_message_deleted_elsewhere_is_refused(
    shared_config: STMConfig, clock: Clock
) -> None:
    """The delete failed once where Discord told of it; retried, it still overtakes the
    turn another process began before it, whose prompt showed the message."""
    a, a_store = await opened(shared_config, clock)
    b = await ShortTermMemory.open(shared_config, clock=clock)
    try:
        await b.capture(said(USER, SECRET))
        turn_ctx = ctx(user=2, channel=CHANNEL + 1, server=SERVER)  # recalls CHANNEL
        assert SECRET in str(await b.build_context(turn_ctx))
        a_store.change_failures = 1
        await a.forget_messages(CHANNEL, [MESSAGE])
        await failed_once(a)
        await durable(a)
        result = await b.run_tool(turn_ctx, {"summary": f"they said {SECRET}"})
        assert not result.success
        other = ctx(user=3, channel=CHANNEL + 1, server=SERVER)

        async def gone() -> bool:
            return SECRET not in str(await b.build_context(other))

        await until(gone, COHERENCE)
    finally:
        await a.close()
        await b.close()


async def test_flush_names_a_change_that_is_not_durable_yet(
    shared_config: STMConfig, clock: Clock
) -> None:
    a, a_store = await opened(shared_config, clock)
    try:
        a_store.broken = True
        await a.forget_messages(CHANNEL, [MESSAGE])
        await a.server_removed(SERVER)
        with pytest.raises(DurabilityError) as raised:
            await a.flush()
        failures = " ".join(raised.value.failures)
        assert f"message(s) deleted in channel {CHANNEL}" in failures
        assert f"removal from server {SERVER}" in failures
        assert raised.value.at_risk == []  # the journal holds them
        a_store.broken = False
        await durable(a)
    finally:
        await a.close()


async def test_a_reload_of_what_the_store_holds_keeps_what_is_not_durable_yet(
    shared_config: STMConfig, clock: Clock
) -> None:
    """A's setting and opt-out wait for the database; meanwhile another process changes
    another server's settings and A reloads what the store holds: A's own changes stay in
    force there, before and after they are durable, and reach the other process."""
    a, a_store = await opened(shared_config, clock)
    b = await ShortTermMemory.open(shared_config, clock=clock)
    try:
        a_store.broken = True
        await tolerant(a.update_server_settings(SERVER, crude_message_count=3))
        await tolerant(a.set_user_opt_out(7, True))
        await b.update_server_settings(SERVER + 1, crude_message_count=4)

        async def reloaded() -> bool:
            return a.settings_for(SERVER + 1).crude_message_count == 4

        await until(reloaded, COHERENCE)
        assert await has_settings(a) and await opted_out(a)
        a_store.broken = False
        await durable(a)
        await until(lambda: has_settings(b), COHERENCE)
        await until(lambda: opted_out(b), COHERENCE)
        await b.update_server_settings(SERVER + 1, crude_message_count=5)

        async def again() -> bool:
            return a.settings_for(SERVER + 1).crude_message_count == 5

        await until(again, COHERENCE)
        assert await has_settings(a) and await opted_out(a)
    finally:
        await a.close()
        await b.close()
