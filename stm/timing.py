"""Time for background work: a monotonic clock, sleeping, waiting with a deadline.

The writer (write-behind, retry backoff, scrub delay) and the janitor take a
``Scheduler`` instead of reading the event loop's clock and sleeping on it, so
a test can pass one whose time it moves by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Protocol

__all__ = ["LoopScheduler", "Scheduler"]


class Scheduler(Protocol):
    """Monotonic time in seconds, and waiting on it."""

    def now(self) -> float:
        """The current time."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return once ``seconds`` have passed."""
        ...

    async def wait(self, event: asyncio.Event, deadline: float | None) -> None:
        """Return once ``event`` is set or ``deadline`` (None: never) has come."""
        ...


class LoopScheduler:
    """The event loop's own clock."""

    def now(self) -> float:
        """The loop's monotonic time."""
        return asyncio.get_running_loop().time()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep``."""
        await asyncio.sleep(seconds)

    async def wait(self, event: asyncio.Event, deadline: float | None) -> None:
        """Wait for ``event`` until the loop's clock reaches ``deadline``."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout_at(deadline):
                await event.wait()
