"""Retries of the writer's queue: while the batch at its head fails, whether it is failing,
when it is tried again (the one ``Backoff`` rule) and who hears of each failure."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from ._queued import Queued
from ._timing import Backoff

__all__ = ["Retrying"]

log = logging.getLogger("stm.writer")
# How many of the items queued behind a failing batch its warning names.
_NAMED_BEHIND = 5


class Retrying:
    """Whether the head of the queue is failing and when it is tried again (the one
    ``Backoff``), and the event that tells waiters of each failed transaction."""

    def __init__(self, retry_delay: float) -> None:
        self.failure: BaseException | None = None
        self.backoff = Backoff(retry_delay)
        self._trouble = asyncio.Event()

    @property
    def healthy(self) -> bool:
        """False while a failed write is being retried."""
        return self.failure is None

    @property
    def due_at(self) -> float:
        """When the failed head of the queue is tried again (0: no retry waits)."""
        return self.backoff.at

    def now(self) -> None:
        """Try again at once rather than after the backoff."""
        self.backoff.at = 0.0

    def trouble(self) -> asyncio.Event:
        """An event set at the next failed transaction."""
        return self._trouble

    def failed(self, exc: BaseException) -> bool:
        """A transaction failed: whoever waits on ``trouble`` hears it now. True when it is
        the first failure since the last commit."""
        first = self.failure is None
        self.failure = exc
        trouble, self._trouble = self._trouble, asyncio.Event()
        trouble.set()
        return first

    def retry(
        self, kept: list[Queued], first: bool, now: float, behind: Sequence[Queued] = ()
    ) -> None:
        """Retry ``kept`` (the failed batch's deletes and write-behind) after the backoff,
        and log it, naming what waits ``behind`` it too; with nothing kept, nothing is
        failing any more."""
        if not kept:
            self.failure = None
            return
        wait = self.backoff.failed(now)
        named = [item.what for item in behind[:_NAMED_BEHIND]]
        if len(behind) > _NAMED_BEHIND:
            named.append(f"{len(behind) - _NAMED_BEHIND} more")
        log.log(
            logging.ERROR if first else logging.WARNING,
            "short-term memory could not be made durable, retrying in %.1fs: %s%s",
            wait,
            "; ".join(item.what for item in kept),
            f" (queued behind it: {'; '.join(named)})" if named else "",
            exc_info=first,
        )

    def succeeded(self) -> None:
        """A transaction committed."""
        if self.failure is not None:
            log.info("short-term memory writes are durable again")
        self.failure = None
        self.backoff.succeeded()
