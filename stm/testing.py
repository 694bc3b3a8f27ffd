"""Test doubles for hosts that test their own use of short-term memory, the same ones this
project's own tests use: a clock and a scheduler the test moves by hand, a real store that
fails or holds its transactions on demand, and builders of turns with small readable ids.

    from stm.testing import Clock, ctx, turn

    clock = Clock()
    memory = await ShortTermMemory.open(STMConfig(database=path), clock=clock)
    await memory.capture(turn(ctx(user=1, channel=10), "hello"))
    clock.advance(hours=13)  # past the crude window's TTL

They run the production paths: nothing here replaces the library's own logic.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stm import GenerationFinished, ShortTermMemory, STMConfig, TurnContext, exchange
from stm._errors import StoreError
from stm._lineage import Erasure
from stm.store import open_store
from stm.store._base import LoadRows, Op, PurgePreview, Store

__all__ = ["Clock", "FaultyStore", "ManualScheduler", "ctx", "faulty_memory", "turn"]


class Clock:
    """A clock the test moves by hand (epoch seconds), for ``ShortTermMemory.open(clock=)``."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 0.0, *, hours: float = 0.0, minutes: float = 0.0) -> None:
        """Move the clock on by ``seconds`` plus ``minutes`` and ``hours``."""
        self.now += seconds + minutes * 60 + hours * 3600


def ctx(
    user: int = 1,
    channel: int = 10,
    server: int | None = 100,
    persona: int | None = None,
    **fields: Any,
) -> TurnContext:
    """A turn context with small readable ids (``server=None`` for a DM)."""
    return TurnContext(
        user_id=user, channel_id=channel, server_id=server, persona_id=persona, **fields
    )


def turn(
    context: TurnContext, user_text: str, reply: str = "ok", **fields: Any
) -> GenerationFinished:
    """A finished generation in ``context``: the user's message and the bot's reply, built
    by ``stm.exchange`` as a host's are (the user named ``user<id>`` when the context has
    no name, the bot ``Bot``)."""
    return exchange(
        context,
        reply,
        user_text=user_text,
        user_name=context.user_name or f"user{context.user_id}",
        bot_name="Bot",
        **fields,
    )


class FaultyStore:
    """A real store whose transactions fail while ``broken`` is set or for the next
    ``failures`` batches (its previews aside while ``broken`` or for the next
    ``aside_failures``), and whose reads answer garbage while ``garbage_reads`` is set.
    ``batches`` records the operation names of every batch it was given."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.broken = False
        self.failures = 0
        self.garbage_reads = False
        self.aside_failures = 0
        self.batches: list[list[str]] = []
        self._gate: asyncio.Event | None = None
        self._holding = asyncio.Event()
        self._ran = asyncio.Event()

    def hold(self) -> None:
        """Hold the next transactions at the door until ``release``."""
        self._gate = asyncio.Event()
        self._holding = asyncio.Event()

    async def holding(self) -> None:
        """Return once a transaction is held (what it carries is in flight)."""
        await self._holding.wait()

    def release(self) -> None:
        """Let held transactions run (and fail, if the store is broken by then)."""
        if self._gate is not None:
            self._gate.set()
            self._gate = None

    async def until(self, condition: Callable[[], bool]) -> None:
        """Return once ``condition`` holds, checked after every transaction."""
        while not condition():
            ran = self._ran
            await ran.wait()

    async def run(self, ops: Sequence[Op]) -> list[object]:
        self.batches.append([type(op).__name__ for op in ops])
        gate = self._gate
        if gate is not None:
            self._holding.set()
            await gate.wait()
        try:
            return await self._run(ops)
        finally:
            ran, self._ran = self._ran, asyncio.Event()
            ran.set()

    async def _run(self, ops: Sequence[Op]) -> list[object]:
        if self.failures:
            self.failures -= 1
            raise OSError("disk unavailable")
        if self.broken:
            raise OSError("disk unavailable")
        results = await self.inner.run(ops)
        if self.garbage_reads:
            return [
                [None] if isinstance(op, LoadRows) else r
                for op, r in zip(ops, results, strict=True)
            ]
        return results

    @property
    def empty_at_open(self) -> bool:
        return self.inner.empty_at_open

    @property
    def clock(self) -> Callable[[], float]:
        """The real store's clock (a memory sets it to its own)."""
        return self.inner.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.inner.clock = clock

    async def preview_aside(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """The real store's, failing while ``broken`` or for the next ``aside_failures``."""
        if self.aside_failures:
            self.aside_failures -= 1
            raise StoreError("disk unavailable")
        if self.broken:
            raise StoreError("disk unavailable")
        return await self.inner.preview_aside(user_id, server_id, erasure)

    async def load_server_settings(self) -> dict[int, str]:
        return await self.inner.load_server_settings()

    async def load_opt_outs(self) -> set[int]:
        return await self.inner.load_opt_outs()

    async def close(self) -> None:
        await self.inner.close()

    def __getattr__(self, name: str) -> object:
        # The rest of the store (the change feed, inspection) is the real one's.
        return getattr(self.inner, name)


async def faulty_memory(
    config: STMConfig, **memory_options: object
) -> tuple[ShortTermMemory, FaultyStore]:
    """An open memory on a FaultyStore over the store ``config.database`` names."""
    store = FaultyStore(await open_store(config))
    memory = await ShortTermMemory.open(config, store=store, **memory_options)  # type: ignore[arg-type]
    return memory, store


@dataclass(eq=False)
class _Waiter:
    deadline: float | None
    event: asyncio.Event | None
    woken: asyncio.Future[None]


class ManualScheduler:
    """A ``stm.Scheduler`` whose time moves only when the test calls ``advance``.

    ``idle(name)`` is the gate a test waits at: it returns once the task of that name
    (``stm-writer``, ``stm-janitor``) is blocked in a wait that nothing has ended yet."""

    def __init__(self, start: float = 1000.0) -> None:
        self._now = start
        self._waiters: dict[str, _Waiter] = {}
        self._changed = asyncio.Event()

    def now(self) -> float:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self._block(self._now + seconds, None)

    async def wait(self, event: asyncio.Event, deadline: float | None) -> None:
        if event.is_set() or (deadline is not None and deadline <= self._now):
            return
        waiting = asyncio.ensure_future(event.wait())
        try:
            await self._block(deadline, event, also=waiting)
        finally:
            waiting.cancel()

    async def _block(
        self,
        deadline: float | None,
        event: asyncio.Event | None,
        also: asyncio.Future[Any] | None = None,
    ) -> None:
        task = asyncio.current_task()
        name = task.get_name() if task is not None else ""
        waiter = _Waiter(deadline, event, asyncio.get_running_loop().create_future())
        self._waiters[name] = waiter
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()
        try:
            if also is None:
                await waiter.woken
            else:
                await asyncio.wait({waiter.woken, also}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.woken.cancel()
            if self._waiters.get(name) is waiter:
                del self._waiters[name]

    def advance(self, seconds: float) -> None:
        """Move time on, waking every wait whose deadline has come."""
        self._now += seconds
        for waiter in self._waiters.values():
            due = waiter.deadline is not None and waiter.deadline <= self._now
            if due and not waiter.woken.done():
                waiter.woken.set_result(None)

    def next_deadline(self, name: str) -> float | None:
        """When the wait of task ``name`` ends by itself (None: it does not)."""
        waiter = self._waiters.get(name)
        return None if waiter is None else waiter.deadline

    async def idle(self, name: str) -> None:
        """Return once task ``name`` waits and nothing has woken it yet."""
        while True:
            waiter = self._waiters.get(name)
            if (
                waiter is not None
                and not waiter.woken.done()
                and (waiter.event is None or not waiter.event.is_set())
            ):
                return
            changed = self._changed
            await changed.wait()
