"""When the writer next scrubs from the files what committed deletes left in them (the
store's ``Scrub``), and the state of the last try.

A scrub is not queued work: it is coalesced into one step that runs between batches
after deletes that removed something, takes a bounded time, and is retried on its own
(with the writer's one ``Backoff`` rule) when a reader holds the WAL, without holding up
the queue.
"""

from __future__ import annotations

import asyncio
import logging

from ._timing import Backoff
from .store._base import Scrub, Store

__all__ = ["Scrubs"]

log = logging.getLogger("stm.writer")
_SCRUBBING = "erasing deleted text from the file"


class Scrubs:
    """Due after deletes that removed something, run between batches, retried on its own:
    the scrub's schedule and the state of its last try, one job apart from the queue."""

    def __init__(self, store: Store, delay: float, retry_delay: float) -> None:
        self.store = store
        self.delay = delay
        self.due_at = 0.0  # 0: none due (a test's clock may stand at 0, so "now" is 1e-9)
        self.retry = Backoff(retry_delay)
        self.failure: BaseException | None = None
        self.running = False
        # Someone waits for it (``now``): it runs even while more deletes are queued.
        self.awaited = False
        # Tries started, and the number of the last that scrubbed (``next_covering``).
        self.started = 0
        self.scrubbed = 0

    @property
    def pending(self) -> bool:
        """A scrub is due or running."""
        return bool(self.due_at) or self.running

    def after_deletes(self, now: float) -> None:
        """Deletes committed: scrub after ``delay`` (a burst of them shares one)."""
        if not self.due_at:
            self.due_at = now + self.delay

    def next_covering(self) -> int:
        """The number of the first try that scrubs what is committed now: the one running
        (tries run between the writer's batches, so no commit lands during one), else the
        next."""
        return self.started if self.running else self.started + 1

    def now(self, now: float) -> None:
        """Scrub at once, rather than when due or after the backoff, and before the deletes
        queued meanwhile are done (a caller waits for it)."""
        self.due_at = max(now, 1e-9)
        self.retry.at = 0.0
        self.awaited = True

    def wake_at(self) -> float:
        """When the writer must wake for it (0: no scrub due)."""
        return max(self.due_at, self.retry.at) if self.due_at else 0.0

    def due(self, now: float) -> bool:
        return bool(self.due_at) and self.wake_at() <= now

    def failing(self) -> list[str]:
        """The scrub being retried after a failure, as ``Writer.failing`` lists it."""
        return [] if self.failure is None else [f"{_SCRUBBING}: {self.failure}"]

    async def run(self, now: float) -> None:
        """Scrub; on failure, log and schedule the next try with the backoff."""
        self.due_at = 0.0
        self.running = True
        self.awaited = False
        self.started += 1
        number = self.started
        try:
            await self.store.run([Scrub()])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            first = self.failure is None
            self.failure = exc
            wait = self.retry.failed(now)
            self.due_at = self.retry.at
            log.log(
                logging.WARNING if first else logging.INFO,
                "deleted text could not be erased from the files yet, retrying in %.1fs: %s",
                wait,
                exc,
            )
        else:
            if self.failure is not None:
                log.warning("deleted text is erased from the files again")
            self.failure = None
            self.scrubbed = number
            self.retry.succeeded()
        finally:
            self.running = False
