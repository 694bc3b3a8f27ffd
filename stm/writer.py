"""The write path: one background task that turns queued operations into group commits.

Every durable operation goes through one FIFO queue. The writer takes all
that is queued, runs it as one transaction, then answers each caller, so
concurrent upgrades share a commit and a caller hears "saved" only after its
commit. Entries changed by captures are only marked dirty; their identity
and counters are written behind, in batches.

When a batch fails, callers waiting for an answer get the error at once
(their write is not acknowledged), while deletes and write-behind stay at
the head of the queue and are retried, in order, with backoff: nothing
queued behind a delete can overtake it, so a delete that is late is never
undone by a write that came after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .cache import Entry
from .convert import row_of
from .errors import DurabilityError
from .store.base import (
    DeleteChannel,
    DeleteExpired,
    Op,
    PurgeUser,
    Scrub,
    Store,
    Touch,
)
from .timing import LoopScheduler, Scheduler

__all__ = ["Writer"]

log = logging.getLogger("stm.writer")
MAX_BATCH = 2000
MAX_BACKOFF = 30.0


@dataclass(eq=False)
class _Item:
    seq: int
    op: Op | None  # None: a write-behind batch of dirty entries
    dirty: dict[str, Entry] = field(default_factory=dict)
    future: asyncio.Future[Any] | None = None
    what: str = ""

    @property
    def retried(self) -> bool:
        """Kept and retried on failure (deletes, write-behind) instead of failing its caller."""
        return self.future is None


class Writer:
    """The single writer of a store."""

    def __init__(
        self,
        store: Store,
        *,
        write_behind: float,
        retry_delay: float,
        scrub_delay: float = 30.0,
        scheduler: Scheduler | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler or LoopScheduler()
        self.write_behind = write_behind
        self.retry_delay = retry_delay
        self.scrub_delay = scrub_delay
        # When the file is next rewritten to erase what purges and clears deleted (0: none due).
        self._scrub_at = 0.0
        self.commits = 0
        self.round_trips = 0
        self._queue: deque[_Item] = deque()
        self._dirty: dict[str, Entry] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._failure: BaseException | None = None
        self._backoff = 0.0
        self._retry_at = 0.0
        self._dirty_since = 0.0
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stm-writer")

    # -- submitting ---------------------------------------------------------
    def submit(self, op: Op, what: str = "") -> asyncio.Future[Any]:
        """Queue ``op``; the future answers with its result once committed, or the error."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._push(_Item(self._next(), op, future=future, what=what or type(op).__name__))
        return future

    def submit_delete(self, op: DeleteChannel | PurgeUser | DeleteExpired, what: str) -> None:
        """Queue a delete; it is retried until durable. Dirty entries go first.

        Purges and clears also schedule a scrub of the file (coalesced; ``flush``
        runs a due one at once)."""
        self._swap_dirty()
        self._push(_Item(self._next(), op, what=what))
        if isinstance(op, DeleteChannel | PurgeUser) and not self._scrub_at:
            self._scrub_at = self.scheduler.now() + self.scrub_delay

    def mark_dirty(self, entry: Entry) -> None:
        """Write ``entry``'s identity and counters behind."""
        if not self._dirty:
            self._dirty_since = self.scheduler.now()
            self._wake.set()
        self._dirty[entry.key] = entry

    def queue_dirty(self) -> None:
        """Queue the dirty entries now, so that what is submitted next is written after them."""
        self._swap_dirty()

    def forget_dirty(self, keys: Iterable[str]) -> None:
        """Do not write these keys behind (they were deleted)."""
        for key in keys:
            self._dirty.pop(key, None)

    @property
    def pending(self) -> int:
        """Operations queued and not yet committed (write-behind counts as one)."""
        return len(self._queue) + (1 if self._dirty else 0)

    def failing(self) -> list[str]:
        """What is being retried after a failure."""
        if self._failure is None:
            return []
        return [f"{item.what}: {self._failure}" for item in self._queue if item.retried]

    # -- waiting ------------------------------------------------------------
    async def flush(self, *, attempts: int = 1, scrub: bool = True) -> None:
        """Return once everything queued so far is committed (and, with ``scrub``, a due
        scrub done); raise DurabilityError if it cannot be after ``attempts`` tries."""
        self._swap_dirty()
        if scrub:
            self._queue_scrub()
        target = self._seq
        tries = 0
        while self._finished_through() < target:
            if self._failure is not None and self._retry_at:
                if tries >= attempts:
                    raise DurabilityError(self.failing())
                tries += 1
                self._retry_at = 0.0  # try again now rather than after the backoff
                self._wake.set()
            if self._task.done():
                raise DurabilityError(self.failing() or ["the writer has stopped"])
            progress = self._progress
            await progress.wait()

    async def close(self) -> None:
        """Finish everything (a few tries), then stop; raise DurabilityError if work is left."""
        try:
            await self.flush(attempts=3)
        finally:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            for item in self._queue:
                if item.future is not None and not item.future.done():
                    item.future.set_exception(DurabilityError([f"{item.what}: closed"]))

    # -- the loop -----------------------------------------------------------
    def _finished_through(self) -> int:
        """Every item up to this sequence number is committed or answered (the queue is FIFO)."""
        return self._queue[0].seq - 1 if self._queue else self._seq

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _push(self, item: _Item) -> None:
        self._queue.append(item)
        self._wake.set()

    def _queue_scrub(self) -> None:
        if self._scrub_at:
            self._scrub_at = 0.0
            self._push(_Item(self._next(), Scrub(), what="erasing deleted text from the file"))

    def _swap_dirty(self) -> None:
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            self._push(_Item(self._next(), None, dirty=dirty, what="write-behind"))

    async def _run(self) -> None:
        while True:
            now = self.scheduler.now()
            if self._retry_at > now:
                wake_at: float | None = self._retry_at
            elif self._queue:
                wake_at = now
            else:
                write_behind_at = self._dirty_since + self.write_behind if self._dirty else 0.0
                due = [t for t in (self._scrub_at, write_behind_at) if t]
                wake_at = min(due) if due else None
            if wake_at is None or wake_at > now:
                self._wake.clear()
                await self.scheduler.wait(self._wake, wake_at)
                continue
            if self._scrub_at and self._scrub_at <= now:
                self._queue_scrub()
            # Write-behind rides along with any commit that happens anyway.
            self._swap_dirty()
            await self._cycle()

    async def _cycle(self) -> None:
        items = self._next_batch()
        try:
            ops: list[Op] = []
            for item in items:
                if item.op is not None:
                    ops.append(item.op)
                else:
                    # Built now, not when marked: the latest counters, and never a deleted entry.
                    rows = tuple(row_of(e) for e in item.dirty.values() if not e.deleted)
                    ops.append(Touch(rows))
            self.round_trips += 1
            results = await self.store.run(ops)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(items, exc)
        else:
            self.commits += 1
            for _ in items:
                self._queue.popleft()
            if self._failure is not None:
                log.warning("short-term memory writes are durable again")
            self._failure = None
            self._backoff = self._retry_at = 0.0
            for item, result in zip(items, results, strict=True):
                if item.future is not None and not item.future.done():
                    item.future.set_result(result)
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _next_batch(self) -> list[_Item]:
        """The items of the next transaction, in order. A scrub goes alone: it can fail
        after its commit, and must not fail writes that were committed with it."""
        items: list[_Item] = []
        for item in self._queue:
            if isinstance(item.op, Scrub) and items:
                break
            items.append(item)
            if isinstance(item.op, Scrub) or len(items) == MAX_BATCH:
                break
        return items

    def _fail(self, items: list[_Item], exc: Exception) -> None:
        first = self._failure is None
        self._failure = exc
        kept = [item for item in items if item.retried]
        # Every caller waiting, in this batch or queued behind it, hears of the failure
        # now: nothing behind a failing delete can commit before it, and a prompt answer
        # ("not saved", "could not be read") beats waiting out the backoff.
        waiting = [item.future for item in self._queue if item.future is not None]
        self._queue = deque(item for item in self._queue if item.future is None)
        for future in waiting:
            if not future.done():
                future.set_exception(exc)
        if kept:
            self._backoff = min(MAX_BACKOFF, max(self.retry_delay, self._backoff * 2))
            self._retry_at = self.scheduler.now() + self._backoff
            level = logging.ERROR if first else logging.WARNING
            log.log(
                level,
                "short-term memory could not be made durable, retrying in %.1fs: %s",
                self._backoff,
                "; ".join(item.what for item in kept),
                exc_info=first,
            )
        else:
            self._failure = None
