"""Time for background work: a monotonic clock, sleeping, waiting with a deadline, the
one rule for waiting longer after each failure (``Backoff``), and how large a purge's
next step may be to hold the write lock briefly (``StepSizer``, one per kind of work in
``PurgeSteps``).

The writer (write-behind, retry backoff, scrub delay) and the janitor take a
``Scheduler`` instead of reading the event loop's clock and sleeping on it, so
a test can pass one whose time it moves by hand.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "MAX_BACKOFF",
    "STEP_TARGET_SECONDS",
    "Backoff",
    "LoopScheduler",
    "PurgeSteps",
    "Scheduler",
    "StepSizer",
]

MAX_BACKOFF = 30.0
# How long a purge's step may hold the write lock: what waits behind it waits about this
# long, plus its own transaction.
STEP_TARGET_SECONDS = 0.02


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


@dataclass(slots=True)
class Backoff:
    """Waits that double after each failure, from ``first`` up to ``MAX_BACKOFF``: the
    writer's retries of the queue and of a scrub share this rule. ``at`` is when the
    next try is due (0: now; a caller may bring it forward by setting it to 0)."""

    first: float
    delay: float = 0.0
    at: float = 0.0

    def failed(self, now: float) -> float:
        """One more failure at ``now``: the next try waits longer; returns the wait."""
        self.delay = min(MAX_BACKOFF, max(self.first, self.delay * 2))
        self.at = now + self.delay
        return self.delay

    def succeeded(self) -> None:
        self.delay = self.at = 0.0


@dataclass
class StepSizer:
    """The share of its chunks a purge's next step takes (``size``, at most 1), so that a
    step holds the write lock for about ``target`` seconds, on whatever store and machine:
    after each step it is scaled by how far that step was from the target, by at most
    half or double at a time, and never below ``floor``. Timed on the real clock: it is
    the lock that others wait for, not the scheduler's time."""

    target: float = STEP_TARGET_SECONDS
    floor: float = 1 / 16
    size: float = 1.0

    def took(self, seconds: float) -> None:
        ratio = self.target / max(seconds, 1e-6)
        self.size = min(1.0, max(self.floor, self.size * min(2.0, max(0.5, ratio))))


@dataclass
class PurgeSteps:
    """How large each kind of work of a purge's next step may be: a :class:`StepSizer` per
    kind (``stm.store._base.PurgePhase``), since a unit of each costs differently (a chain
    followed more than one seeded, a row cleared more than a range told). A kind's first
    step takes ``start`` of its chunks, not the size another kind ended at; a step that did
    several kinds counts against each of them. ``start`` is a quarter: a full chunk of
    some kinds holds the lock past the target on a large database (a page of ranges told,
    30-58 ms on PostgreSQL at a million rows), and a step quicker than the target doubles
    the next, so the full chunks are two steps away."""

    target: float = STEP_TARGET_SECONDS
    start: float = 0.25
    sizers: dict[str, StepSizer] = field(default_factory=dict)

    def sizer(self, phase: str) -> StepSizer:
        """The sizer of ``phase``, made at ``start`` the first time."""
        sizer = self.sizers.get(phase)
        if sizer is None:
            sizer = self.sizers[phase] = StepSizer(target=self.target, size=self.start)
        return sizer

    def sizes(self) -> tuple[tuple[str, float], ...]:
        """The share of its chunks each kind of work seen so far takes next."""
        return tuple((phase, sizer.size) for phase, sizer in self.sizers.items())

    def took(self, phases: Iterable[str], seconds: float) -> None:
        """A step that did the work of ``phases`` held the lock ``seconds``."""
        for phase in phases:
            sizer = self.sizer(phase)
            sizer.target = self.target
            sizer.took(seconds)
