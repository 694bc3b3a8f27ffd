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
undone by a write that came after it. A failure that can never pass (a value
the store cannot hold) is told apart: the operation is dropped and reported,
and what was queued behind it goes ahead, so one poison operation cannot jam
the queue. While deletes wait out a backoff, an operation whose caller waits
for an answer brings the retry forward: its caller hears after one attempt,
not after the backoff, whether it was saved.

Erasure (emptying the WAL of what deletes left in it, see ``Scrub``) is not
queued work: it is coalesced into one step that runs between batches after
deletes that removed something, takes a bounded time, and is retried on its
own when a reader holds the WAL, without holding up the queue.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cache import Entry
from .convert import row_of
from .errors import DurabilityError, RejectedWriteError
from .journal import Journal, Pending
from .store.base import (
    DeleteChannel,
    DeleteExpired,
    Op,
    PurgeResult,
    PurgeUser,
    Scrub,
    Store,
    SweepPurge,
    Touch,
)
from .store.faults import is_permanent
from .timing import LoopScheduler, Scheduler

__all__ = ["Writer"]

log = logging.getLogger("stm.writer")
MAX_BATCH = 2000
MAX_BACKOFF = 30.0


# How many of the items queued behind a failing batch its warning names.
_NAMED_BEHIND = 5


@dataclass(eq=False)
class _Item:
    seq: int
    op: Op | None  # None: a write-behind batch of dirty entries
    dirty: dict[str, Entry] = field(default_factory=dict)
    # Further operations answered with ``op`` by one future (of the list of their results).
    more: tuple[Op, ...] | None = None
    future: asyncio.Future[Any] | None = None
    what: str = ""
    # The id of its record in the pending-delete journal ("": none yet), and whether
    # that record is durable.
    journal_id: str = ""
    journaled: bool = False
    # Called with the result once committed, before any later item's (the cache applies
    # what the store decided in commit order: an upgrade's version, a purge's ranges).
    on_result: Callable[[Any], None] | None = None
    # The item whose work this continues (a purge's later chunks): flush() waits for it.
    origin: int = 0

    @property
    def retried(self) -> bool:
        """Kept and retried on failure (deletes, write-behind) instead of failing its caller."""
        return self.future is None


@dataclass(slots=True)
class Backoff:
    """Waits that double after each failure, from ``first`` up to ``MAX_BACKOFF``: the
    writer's retries of the queue and of an erasure share this rule. ``at`` is when the
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


class Erasures:
    """When the writer next erases from the files what committed deletes left there (the
    store's ``Scrub``), and the state of the last try: one job, apart from the queue."""

    def __init__(self, store: Store, delay: float, retry_delay: float) -> None:
        self.store = store
        self.delay = delay
        self.due_at = 0.0  # 0: none due (a test's clock may stand at 0, so "now" is 1e-9)
        self.retry = Backoff(retry_delay)
        self.failure: BaseException | None = None
        self.running = False

    @property
    def pending(self) -> bool:
        """An erasure is due or running."""
        return bool(self.due_at) or self.running

    def after_deletes(self, now: float) -> None:
        """Deletes committed: erase after ``delay`` (a burst of them shares one)."""
        if not self.due_at:
            self.due_at = now + self.delay

    def now(self, now: float) -> None:
        """Erase at once, rather than when due or after the backoff."""
        self.due_at = max(now, 1e-9)
        self.retry.at = 0.0

    def wake_at(self) -> float:
        """When the writer must wake for it (0: no erasure due)."""
        return max(self.due_at, self.retry.at) if self.due_at else 0.0

    def due(self, now: float) -> bool:
        return bool(self.due_at) and self.wake_at() <= now

    async def run(self, now: float) -> None:
        """Erase; on failure, log and schedule the next try with the backoff."""
        self.due_at = 0.0
        self.running = True
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
            self.retry.succeeded()
        finally:
            self.running = False


class Writer:
    """The single writer of a store."""

    def __init__(
        self,
        store: Store,
        *,
        write_behind: float,
        retry_delay: float,
        scrub_delay: float = 1.0,
        scheduler: Scheduler | None = None,
        journal: Journal | None = None,
        touch_guard: Callable[[], tuple[int | None, float, float]] | None = None,
        sweeps: Sequence[int] = (),
    ) -> None:
        self.store = store
        self.scheduler = scheduler or LoopScheduler()
        self.write_behind = write_behind
        self.retry_delay = retry_delay
        self.scrub_delay = scrub_delay
        self.journal = journal
        # (the feed position the cache is current with, crude and summary expiry
        # thresholds) for each write-behind batch: see ``Touch``.
        self.touch_guard = touch_guard
        # When deleted data is next erased from the files (0: none due), and when a failed
        # erasure is tried again.
        self.erasures = Erasures(store, scrub_delay, retry_delay)
        self.rejected = 0
        # Run the items of a batch that failed for good one per transaction, to find the one.
        self._isolate = 0
        self.commits = 0
        self.round_trips = 0
        # Metrics (plain counters; see stm/metrics.py): operations committed, the largest
        # batch, time spent in the store, failed transactions and retries after one.
        self.ops_committed = 0
        self.largest_batch = 0
        self.store_seconds = 0.0
        self.failures = 0
        self.retries = 0
        self._queue: deque[_Item] = deque()
        # Queued items that continue an earlier one's work.
        self._continuations = 0
        self._dirty: dict[str, Entry] = {}
        self._seq = 0
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._trouble = asyncio.Event()
        self._failure: BaseException | None = None
        self._retry = Backoff(retry_delay)
        self._dirty_since = 0.0
        # Why the journal could not take the deletes last given to it (None: it could).
        self._journal_failure: OSError | None = None
        self._task: asyncio.Task[None] | None = None

    def start(self, sweeps: Sequence[int] = ()) -> None:
        """Start committing: first the deletes the journal kept as pending before a restart
        and the purges whose later chunks a stopped process left (``sweeps``, feed
        positions), then whatever is submitted. Work submitted before this is refused."""
        if self._task is not None:
            raise RuntimeError("the writer is already started")
        journal = self.journal
        if journal is not None:
            # Deletes acknowledged as pending before a restart go first, before any read.
            for pending in journal.load():
                op = pending.op
                self._push(
                    _Item(
                        self._next(), op, what=_describe(op), journal_id=pending.id, journaled=True
                    )
                )
            if journal.skipped:
                journal.drop_damaged()
        for position in sweeps:
            # A purge whose later chunks a stopped process left: finish it first.
            self._push(
                _Item(self._next(), SweepPurge(position), what=_describe(SweepPurge(position)))
            )
        self._task = asyncio.get_running_loop().create_task(self._run(), name="stm-writer")
        self._task.add_done_callback(self._stopped)

    @property
    def started(self) -> bool:
        """True once ``start`` ran (and until the end: a closed writer stays started)."""
        return self._task is not None

    def _refusal(self) -> str | None:
        """Why nothing submitted now would ever be answered, or None."""
        if self._task is None:
            return "the memory is not open yet"
        if self._task.done():
            return "the memory is closed"
        return None

    # -- submitting ---------------------------------------------------------
    def submit(self, op: Op, what: str = "") -> asyncio.Future[Any]:
        """Queue ``op``; the future answers with its result once committed, or the error."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        what = what or type(op).__name__
        refusal = self._refusal()
        if refusal is not None:
            # Nothing would ever answer it: the caller hears at once that it was not saved.
            future.set_exception(DurabilityError([f"{what}: {refusal}"]))
            return future
        self._push(_Item(self._next(), op, future=future, what=what))
        if self._retry.at:
            # Deletes ahead wait out a backoff (up to MAX_BACKOFF) and nothing may overtake
            # them: retry them now with this behind them, so its caller hears after one
            # attempt whether it was saved instead of after the backoff.
            self._retry.at = 0.0
        return future

    def submit_all(
        self,
        ops: Sequence[Op],
        what: str,
        on_result: Callable[[list[Any]], None] | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Queue ``ops`` (one at least) to commit together, in order; the future answers
        with the list of their results once committed, or the error. ``on_result`` is
        called with them first, in commit order."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        refusal = self._refusal()
        if refusal is not None:
            future.set_exception(DurabilityError([f"{what}: {refusal}"]))
            return future
        item = _Item(self._next(), ops[0], more=tuple(ops[1:]), future=future, what=what)
        item.on_result = on_result
        self._push(item)
        if self._retry.at:
            self._retry.at = 0.0  # as in submit
        return future

    def submit_delete(
        self,
        op: DeleteChannel | PurgeUser | DeleteExpired,
        what: str,
        on_result: Callable[[Any], None] | None = None,
    ) -> None:
        """Queue a delete; it is retried until durable. Dirty entries go first.

        A delete that removes something makes an erasure due (coalesced, within
        ``scrub_delay``; ``flush`` runs a due one at once). A purge's first transaction
        answers ``on_result`` with its ``PurgeResult``; the rows it leaves are cleared
        by later transactions, queued behind what is queued then (``flush`` waits for
        them), each answering ``on_result`` with ``(rows cleared, more left, the purge's
        ranges when that step completed its plan)``."""
        self._swap_dirty()
        self._push(_Item(self._next(), op, what=what, on_result=on_result))

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
    def healthy(self) -> bool:
        """False while a failed write is being retried: what is queued waits for it."""
        return self._failure is None

    def trouble(self) -> asyncio.Event:
        """An event set at the next failed transaction (someone waiting for a commit can
        stop waiting: what is queued now waits for a retry)."""
        return self._trouble

    @property
    def pending(self) -> int:
        """Operations queued and not yet committed (write-behind counts as one)."""
        return len(self._queue) + (1 if self._dirty else 0)

    def failing(self) -> list[str]:
        """What is being retried after a failure."""
        lines = []
        if self._failure is not None:
            lines = [f"{item.what}: {self._failure}" for item in self._queue if item.retried]
        if self.erasures.failure is not None:
            lines.append(f"{_ERASING}: {self.erasures.failure}")
        return lines

    def at_risk(self) -> list[str]:
        """The deletes queued and not committed that the journal does not hold either: a
        restart now would undo them."""
        if self.journal is None or self._journal_failure is None:
            return []
        why = f"{self.journal.path}: {self._journal_failure}"
        return [f"{i.what} ({why})" for i in self._queue if _journals(i) and not i.journaled]

    def _durability_error(self, failures: list[str]) -> DurabilityError:
        return DurabilityError(failures, self.at_risk())

    # -- waiting ------------------------------------------------------------
    async def flush(self, *, attempts: int = 1, scrub: bool = True) -> None:
        """Return once everything queued so far is committed (and, with ``scrub``, a due
        scrub done); raise DurabilityError if it cannot be after ``attempts`` tries."""
        self._swap_dirty()
        target = self._seq
        tries = scrub_tries = 0
        while True:
            if self._finished_through() >= target:
                # Erase what the deletes so far left behind (once they are committed).
                erasures = self.erasures
                if not scrub or not erasures.pending:
                    return
                if erasures.failure is not None and not erasures.running:
                    if scrub_tries >= attempts:
                        raise self._durability_error(self.failing())
                    scrub_tries += 1
                if not erasures.running:
                    erasures.now(self.scheduler.now())
                    self._wake.set()
            elif self._failure is not None and self._retry.at:
                if tries >= attempts:
                    raise self._durability_error(self.failing())
                tries += 1
                self._retry.at = 0.0  # try again now rather than after the backoff
                self._wake.set()
            if self._task is None or self._task.done():
                why = "the writer has stopped" if self._task else "the memory is not open yet"
                raise self._durability_error(self.failing() or [why])
            progress = self._progress
            await progress.wait()

    async def close(self) -> None:
        """Finish everything (a few tries), then stop; raise DurabilityError if work is left."""
        if self._task is None:
            return
        try:
            await self.flush(attempts=3)
        finally:
            self._task.cancel()
            # A loop that died of a bug was logged when it stopped; closing still closes.
            await asyncio.wait([self._task])
            for item in self._queue:
                if item.future is not None and not item.future.done():
                    item.future.set_exception(DurabilityError([f"{item.what}: closed"]))

    def _stopped(self, task: asyncio.Task[None]) -> None:
        """The loop ended: by ``close`` or by a bug. Whoever waits hears it now rather
        than never: a flush raises and every queued item's caller gets the error."""
        error = None if task.cancelled() else task.exception()
        if error is not None:
            log.error("short-term memory's writer stopped", exc_info=error)
            for item in self._queue:
                if item.future is not None and not item.future.done():
                    item.future.set_exception(
                        DurabilityError([f"{item.what}: the writer stopped ({error!r})"])
                    )
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    # -- the loop -----------------------------------------------------------
    def _finished_through(self) -> int:
        """Every item up to this sequence number is committed or answered, with the work
        it left (the queue is FIFO but for continuations, which count as their origin)."""
        if not self._queue:
            return self._seq
        first = self._queue[0].seq
        if self._continuations:
            first = min(first, *(i.origin for i in self._queue if i.origin))
        return first - 1

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _push(self, item: _Item) -> None:
        self._queue.append(item)
        self._wake.set()

    def _swap_dirty(self) -> None:
        if self._dirty:
            dirty, self._dirty = self._dirty, {}
            self._push(_Item(self._next(), None, dirty=dirty, what=_write_behind(dirty)))

    async def _run(self) -> None:
        while True:
            now = self.scheduler.now()
            if self._retry.at > now:
                wake_at: float | None = self._retry.at
            elif self._queue:
                wake_at = now
            else:
                write_behind_at = self._dirty_since + self.write_behind if self._dirty else 0.0
                scrub_at = self.erasures.wake_at()
                due = [t for t in (scrub_at, write_behind_at) if t]
                wake_at = min(due) if due else None
            if wake_at is None or wake_at > now:
                self._wake.clear()
                await self.scheduler.wait(self._wake, wake_at)
                continue
            if self._scrub_due(now):
                await self._scrub()
                continue
            # Write-behind rides along with any commit that happens anyway.
            self._swap_dirty()
            await self._cycle()

    def _scrub_due(self, now: float) -> bool:
        """Erase between batches once due, but not while deletes are queued: they would
        need another erasure right after (a burst of purges shares one)."""
        if not self.erasures.due(now):
            return False
        return not any(
            isinstance(i.op, DeleteChannel | PurgeUser | SweepPurge) for i in self._queue
        )

    async def _scrub(self) -> None:
        """Erase what committed deletes left in the files without holding up the queue."""
        self.round_trips += 1
        await self.erasures.run(self.scheduler.now())
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    async def _cycle(self) -> None:
        items = self._next_batch()
        try:
            ops: list[Op] = []
            several = False  # an item of several operations is in the batch
            for item in items:
                if item.op is not None:
                    ops.append(item.op)
                    if item.more is not None:
                        ops.extend(item.more)
                        several = True
                else:
                    # Built now, not when marked: the latest counters, and never a deleted entry.
                    rows = tuple(row_of(e) for e in item.dirty.values() if not e.deleted)
                    if self.touch_guard is None:
                        ops.append(Touch(rows))
                    else:
                        after, crude_before, summary_before = self.touch_guard()
                        ops.append(Touch(rows, after, crude_before, summary_before))
            self.round_trips += 1
            if self._failure is not None:
                self.retries += 1
            started = time.perf_counter()
            try:
                results = await self.store.run(ops)
            finally:
                self.store_seconds += time.perf_counter() - started
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self.failures += 1
            if is_permanent(exc):
                self._reject(items, exc)
            else:
                self._fail(items, exc)
        else:
            self.commits += 1
            self.ops_committed += len(ops)
            self.largest_batch = max(self.largest_batch, len(ops))
            self._isolate = max(0, self._isolate - len(items))
            for item in items:
                self._queue.popleft()
                if item.origin:
                    self._continuations -= 1
            if self._failure is not None:
                log.info("short-term memory writes are durable again")
            self._failure = None
            self._retry.succeeded()
            erased = False
            if several:
                results = _per_item(items, results)
            for item, result in zip(items, results, strict=True):
                if item.future is not None and not item.future.done():
                    item.future.set_result(result)
                if item.on_result is not None:
                    self._tell(item, result)
                # Only a delete that removed something leaves anything to erase.
                if isinstance(item.op, DeleteChannel | PurgeUser | DeleteExpired) and result:
                    erased = True
                if isinstance(item.op, PurgeUser | SweepPurge):
                    try:
                        position, cleared, more = _progress(item.op, result)
                    except Exception:
                        # A store answering out of contract must not stop the writer: the
                        # rest of the purge is left to the next open's pending sweeps.
                        log.exception("%s: the store's answer cannot be read", item.what)
                        erased = True
                        continue
                    erased = erased or bool(cleared)
                    if more:
                        self._continue(item, position)
            if erased:
                self.erasures.after_deletes(self.scheduler.now())
            self._journal_done(items)
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _tell(self, item: _Item, result: Any) -> None:
        assert item.on_result is not None
        try:
            item.on_result(result)
        except Exception:
            log.exception("short-term memory could not apply %s to its cache", item.what)

    def _continue(self, item: _Item, position: int) -> None:
        """Queue the next chunk of the purge ``item`` is (or continues), behind what is
        queued: a purge of many rows never holds other work up for long."""
        sweep = SweepPurge(position)
        self._continuations += 1
        origin = item.origin or item.seq
        # The purge's caller hears of each chunk too (``(rows cleared, more left)``).
        more = _Item(self._next(), sweep, what=item.what, on_result=item.on_result, origin=origin)
        self._push(more)

    def _next_batch(self) -> list[_Item]:
        """The items of the next transaction, in order. A purge's step is a transaction of
        its own: what was queued before it commits without waiting for it, and what comes
        after waits for one bounded step at most."""
        items: list[_Item] = []
        limit = 1 if self._isolate else MAX_BATCH
        for item in self._queue:
            if isinstance(item.op, PurgeUser | SweepPurge):
                if not items:
                    items.append(item)
                break
            items.append(item)
            if len(items) == limit:
                break
        return items

    def _reject(self, items: list[_Item], exc: Exception) -> None:
        """A failure that no retry can cure. In a batch of several, find the culprit by
        running them one by one; alone, drop it, report it, and go on with the rest."""
        if len(items) > 1:
            self._isolate = len(items)
            return
        item = items[0]
        self._queue.popleft()
        if item.origin:
            self._continuations -= 1
        if item.op is None and len(item.dirty) > 1:
            # One row of a write-behind batch: write the others, each on its own.
            for key, entry in reversed(item.dirty.items()):
                self._queue.appendleft(
                    _Item(item.seq, None, dirty={key: entry}, what=f"write-behind of {key}")
                )
            self._isolate = len(item.dirty)
            return
        self._isolate = max(0, self._isolate - 1)
        self.rejected += 1
        what = item.what
        if item.op is None:
            what = "write-behind of " + ", ".join(item.dirty)
        log.error("short-term memory dropped %s, which it can never store: %s", what, exc)
        if item.future is not None and not item.future.done():
            item.future.set_exception(RejectedWriteError(what, exc))
        self._journal_done([item])

    def _journal_done(self, items: list[_Item]) -> None:
        """Drop the records of these items from the journal: they are committed (or can
        never be)."""
        if self.journal is not None:
            self.journal.remove([i.journal_id for i in items if i.journal_id])

    def _fail(self, items: list[_Item], exc: Exception) -> None:
        first = self._failure is None
        self._failure = exc
        trouble, self._trouble = self._trouble, asyncio.Event()
        trouble.set()
        kept = [item for item in items if item.retried]
        if self.journal is not None:
            self._save_pending(self.journal)
        # Every caller waiting, in this batch or queued behind it, hears of the failure
        # now: nothing behind a failing delete can commit before it, and a prompt answer
        # ("not saved", "could not be read") beats waiting out the backoff.
        waiting = [item.future for item in self._queue if item.future is not None]
        self._queue = deque(item for item in self._queue if item.future is None)
        self._continuations = sum(1 for item in self._queue if item.origin)
        for future in waiting:
            if not future.done():
                future.set_exception(exc)
        if kept:
            wait = self._retry.failed(self.scheduler.now())
            level = logging.ERROR if first else logging.WARNING
            # What waits behind the batch is named too: a purge is a batch of its own.
            behind = [item.what for item in self._queue if item not in kept]
            if len(behind) > _NAMED_BEHIND:
                behind[_NAMED_BEHIND:] = [f"{len(behind) - _NAMED_BEHIND} more"]
            log.log(
                level,
                "short-term memory could not be made durable, retrying in %.1fs: %s%s",
                wait,
                "; ".join(item.what for item in kept),
                f" (queued behind it: {'; '.join(behind)})" if behind else "",
                exc_info=first,
            )
        else:
            self._failure = None

    def _save_pending(self, journal: Journal) -> None:
        """A pending delete must outlive this process: it is acknowledged as pending. Save
        the queued deletes the journal does not hold yet; when it cannot take them, keep
        the reason, which ``flush()`` and ``close()`` report (``at_risk``)."""
        pending = [i for i in self._queue if _journals(i) and not i.journaled]
        if not pending:
            return
        records = []
        for item in pending:
            # One id per delete, also when an append that failed is tried again.
            item.journal_id = item.journal_id or journal.new_id()
            assert isinstance(item.op, DeleteChannel | PurgeUser)
            records.append(Pending(item.journal_id, item.op))
        try:
            journal.append(records)
        except OSError as exc:
            if self._journal_failure is None:
                log.error(
                    "pending deletes could not be saved to %s, so a restart before the "
                    "database takes them would undo them: %s",
                    journal.path,
                    exc,
                )
            self._journal_failure = exc
            return
        for item in pending:
            item.journaled = True
        if self._journal_failure is not None:
            log.warning("pending deletes are saved to %s again", journal.path)
        self._journal_failure = None


def _journals(item: _Item) -> bool:
    """Is ``item`` a delete the journal keeps while it is pending?"""
    return isinstance(item.op, DeleteChannel | PurgeUser)


_ERASING = "erasing deleted text from the file"


def _per_item(items: list[_Item], results: list[object]) -> list[object]:
    """The results of a batch, one per item: the list of its results for an item of several."""
    grouped: list[object] = []
    at = 0
    for item in items:
        if item.more is None:
            grouped.append(results[at])
            at += 1
        else:
            end = at + 1 + len(item.more)
            grouped.append(results[at:end])
            at = end
    return grouped


def _progress(op: PurgeUser | SweepPurge, result: Any) -> tuple[int, int, bool]:
    """(the purge's position, rows it cleared in this transaction, whether more are left)."""
    if isinstance(result, PurgeResult):
        return result.position, result.cleared, result.more
    cleared, more = result[0], result[1]
    assert isinstance(op, SweepPurge)
    return op.position, int(cleared), bool(more)


def _describe(op: Op) -> str:
    match op:
        case SweepPurge(position):
            return f"clearing what the purge at feed position {position} reaches"
        case PurgeUser(user_id, None, _):
            return f"purging user {user_id} everywhere"
        case PurgeUser(user_id, server_id, _):
            return f"purging user {user_id} in server {server_id}"
        case DeleteChannel(channel_id):
            return f"clearing channel {channel_id}"
    return type(op).__name__


def _write_behind(dirty: dict[str, Entry]) -> str:
    """What a write-behind batch is, in a log line: its first keys."""
    keys = list(dirty)
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"write-behind of {', '.join(keys[:3])}{more}"
