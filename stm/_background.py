"""Background work of an open memory: supervised tasks, the periodic janitor, and opening.

Tasks started in the background (reads that hydrate entries) are held until
they finish, so ``flush`` and ``close`` can wait for them and a failure is
logged with the task's name instead of vanishing. The janitor runs at an
interval on the memory's scheduler, so tests move its time by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator
from types import TracebackType
from typing import Any, Generic, Protocol, TypeVar

from ._timing import Scheduler

__all__ = ["Background", "Opening"]

log = logging.getLogger("stm")


class Background:
    """The memory's background tasks: started, supervised, awaited and stopped together."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler
        self.tasks: set[asyncio.Task[Any]] = set()
        self._periodic: list[asyncio.Task[None]] = []

    def spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        """Run ``coro`` in the background; a failure is logged under ``name``."""
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self.tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self.tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "short-term memory task %s failed", task.get_name(), exc_info=task.exception()
            )

    async def gather(self) -> None:
        """Return once every task started so far (and every task they started) is done."""
        while self.tasks:
            await asyncio.gather(*list(self.tasks), return_exceptions=True)

    def every(self, seconds: float, job: Callable[[], Awaitable[object]], name: str) -> None:
        """Run ``job`` every ``seconds`` until ``stop``; a failing run is logged, not fatal."""
        self._periodic.append(
            asyncio.get_running_loop().create_task(self._repeat(seconds, job, name), name=name)
        )

    async def _repeat(
        self, seconds: float, job: Callable[[], Awaitable[object]], name: str
    ) -> None:
        while True:
            await self.scheduler.sleep(seconds)
            try:
                await job()
            except Exception:
                log.exception("short-term memory %s failed", name.removeprefix("stm-"))

    def forever(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        """Run ``coro`` (a loop, such as the feed's follower) until ``stop``."""
        self._periodic.append(asyncio.get_running_loop().create_task(coro, name=name))

    @property
    def periodic(self) -> list[asyncio.Task[None]]:
        """The periodic tasks (the janitor, the follower)."""
        return list(self._periodic)

    async def stop(self) -> None:
        """Stop the periodic jobs, then wait for every other task."""
        for task in self._periodic:
            task.cancel()
        for task in self._periodic:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await self.gather()


class _Closable(Protocol):
    async def close(self) -> None: ...


_M = TypeVar("_M", bound=_Closable)


class Opening(Generic[_M]):
    """``await X.open(...)`` or ``async with X.open(...) as x``: closed on leaving the block."""

    def __init__(self, coro: Awaitable[_M]) -> None:
        self._coro = coro
        self._opened: _M | None = None

    def __await__(self) -> Generator[Any, None, _M]:
        return self._coro.__await__()

    async def __aenter__(self) -> _M:
        self._opened = await self._coro
        return self._opened

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._opened is not None:
            await self._opened.close()
