"""The write path: one background task that turns queued operations into group commits.

Every durable operation goes through one FIFO queue. The writer takes all
that is queued, runs it as one transaction, then answers each caller, so
concurrent upgrades share a commit and a caller hears "saved" only after its
commit. Entries changed by captures are only marked dirty; their identity
and counters are written behind, in batches (``WriteBehind``), which ride along
with any commit that happens anyway.

Reads of rows the cache does not hold (``store.base.READS``) go through the
same queue, so a read is answered after every delete queued before it. A read
is not a commit that happens anyway: when only reads are queued, their batch is
one the store runs as a read transaction, and the write-behind does not ride
along with it (when writes are queued too, everything shares their commit).
Only the dirty entries whose rows the read reads are queued just ahead of it
(``WriteBehind.take_read_by``), so that what it reads holds their counters; the
other dirty entries wait for their own batch.

Every change other processes must honour (``store.base.SharedChange``: deletes,
Discord's message deletes and edits, a server's removal and its cancellation,
settings, opt-outs) takes one path, ``submit_change``: its maker applied it here
already, so no caller waits on its transaction. When a batch fails, callers waiting
for an answer get the error at once (their write is not acknowledged), while the
changes and write-behind stay at the head of the queue and are retried, in order,
with backoff (``Retrying``): nothing queued behind a change can overtake it, so a
delete that is late is never undone by a write that came after it, and the changes
are saved to the journal meanwhile (``PendingChanges``), replayed first after a
restart. A failure that can never pass (a value
the store cannot hold) is told apart: the operation is found and dropped, and
what was queued behind it goes ahead (``Bisection``), so one poison operation
cannot jam the queue. While deletes wait out a backoff, an operation whose
caller waits for an answer brings the retry forward: its caller hears after
one attempt, not after the backoff, whether it was saved.

A scrub (emptying the WAL of what deletes left in it, see ``Scrub``) is not
queued work: ``Scrubs`` says when it runs, between batches.

``Writer`` is the queue and its loop; each other job is a collaborator it builds, in
the order each needs the one before, and starts nothing until ``start()``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ._cache import Entry
from ._errors import DurabilityError
from ._journal import Journal
from ._metrics import WriterCounters
from ._pending import PendingChanges
from ._poison import Bisection
from ._queued import Queued
from ._retrying import Retrying
from ._scrubs import Scrubs
from ._timing import LoopScheduler, PurgeSteps, Scheduler
from ._writebehind import TouchGuard, WriteBehind, describe
from .store._base import (
    READS,
    DeleteChannel,
    DeleteExpired,
    Expired,
    ForgetMessages,
    ForgetServer,
    LoadChannelKeys,
    LoadRecent,
    LoadRows,
    MarkDeparture,
    Op,
    PurgeResult,
    PurgeUser,
    RestoreNotes,
    SaveOptOut,
    SaveServerSettings,
    SharedChange,
    Store,
    SweepPurge,
)
from .store._faults import is_permanent

__all__ = ["Writer"]

log = logging.getLogger("stm.writer")
MAX_BATCH = 2000


class Writer:
    """The single writer of a store: its queue, and the loop that commits it in batches."""

    def __init__(
        self,
        store: Store,
        *,
        write_behind: float,
        retry_delay: float,
        scrub_delay: float = 1.0,
        scheduler: Scheduler | None = None,
        journal: Journal | None = None,
        touch_guard: TouchGuard | None = None,
        held: Callable[[Entry], bool] | None = None,
    ) -> None:
        self.store = store
        self.scheduler = scheduler or LoopScheduler()
        # Its jobs, each built inert, before the one that needs it.
        self.counters = WriterCounters()
        self.retrying = Retrying(retry_delay)
        # ``held``: whether the cache holds this very entry (``WriteBehind.take_read_by``).
        self.write_behind = WriteBehind(write_behind, self.scheduler, touch_guard, held)
        self.pending_changes = PendingChanges(journal)
        self.bisection = Bisection(self.counters)
        self.scrubs = Scrubs(store, scrub_delay, retry_delay)
        self.purge_steps = PurgeSteps()
        self._queue: deque[Queued] = deque()
        # Queued items that continue an earlier one's work.
        self._continuations = 0
        self._seq = 0
        self._wake = asyncio.Event()
        self._progress = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(
        self,
        sweeps: Sequence[int] = (),
        on_step: Mapping[int, Callable[[Any], None]] | None = None,
        replayed: Callable[[SharedChange], Callable[[Any], None] | None] | None = None,
    ) -> None:
        """Start committing: first the changes the journal kept as pending before a restart
        (``replayed`` is told of each, in order, as its maker applied it here, and returns
        what its commit answers), and the purges whose later chunks a stopped process left
        (``sweeps``, feed positions; ``on_step`` answers each step of those it names with
        its ``SweepStep``), then whatever is submitted. Work submitted before this is
        refused."""
        if self._task is not None:
            raise RuntimeError("the writer is already started")
        # Changes acknowledged as pending before a restart go first, before any read.
        for pending in self.pending_changes.replay():
            op = pending.op
            told = None if replayed is None else replayed(op)
            self._push(
                Queued(
                    self._next(),
                    op,
                    what=_describe(op),
                    journal_id=pending.id,
                    journaled=True,
                    on_result=told,
                )
            )
        for position in sweeps:
            # A purge whose later chunks a stopped process left: finish it first, its steps
            # sized as any other purge's.
            self.resume(position, None if on_step is None else on_step.get(position))
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
        """Queue ``op``; the future answers with its result once committed, or the error.
        A shared change never comes this way (TypeError): it takes ``submit_change``, whose
        retries and journal this path, failed at once, would skip."""
        _not_shared((op,))
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        what = what or type(op).__name__
        refusal = self._refusal()
        if refusal is not None:
            # Nothing would ever answer it: the caller hears at once that it was not saved.
            future.set_exception(DurabilityError([f"{what}: {refusal}"]))
            return future
        if isinstance(op, READS):
            self._queue_read_by(op)
        self._push(Queued(self._next(), op, future=future, what=what))
        if self.retrying.due_at:
            # Deletes ahead wait out a backoff (up to MAX_BACKOFF) and nothing may overtake
            # them: retry them now with this behind them, so its caller hears after one
            # attempt whether it was saved instead of after the backoff.
            self.retrying.now()
        return future

    def submit_all(
        self,
        ops: Sequence[Op],
        what: str,
        on_result: Callable[[list[Any]], None] | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Queue ``ops`` (one at least) to commit together, in order; the future answers
        with the list of their results once committed, or the error. ``on_result`` is
        called with them first, in commit order. Shared changes take ``submit_change``
        (TypeError here, as in ``submit``)."""
        _not_shared(ops)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        refusal = self._refusal()
        if refusal is not None:
            future.set_exception(DurabilityError([f"{what}: {refusal}"]))
            return future
        item = Queued(self._next(), ops[0], more=tuple(ops[1:]), future=future, what=what)
        item.on_result = on_result
        self._push(item)
        if self.retrying.due_at:
            self.retrying.now()  # as in submit
        return future

    def submit_change(
        self,
        op: SharedChange | DeleteExpired,
        what: str = "",
        on_result: Callable[[Any], None] | None = None,
    ) -> int:
        """Queue a change other processes must honour (or a janitor's chunk of expired
        rows): it is retried until durable, and journaled while it is pending (a janitor's
        chunk is not: the next pass finds its rows again). Dirty entries go first. Returns
        its place in the queue (``flush(through=)`` waits for it and what it leaves; it
        raises DurabilityError naming it while it is not durable).

        A delete that removes something makes a scrub due (coalesced, within
        ``scrub_delay``; ``flush`` runs a due one at once). A purge's first transaction
        answers ``on_result`` with its ``PurgeResult``; the rows it leaves are cleared
        by later transactions, queued behind what is queued then (``flush`` waits for
        them), each answering ``on_result`` with its ``SweepStep`` (rows cleared, more
        left, a page of the purge's ranges once planned, and what the page reaches)."""
        self._swap_dirty()
        seq = self._next()
        self._push(Queued(seq, op, what=what or _describe(op), on_result=on_result))
        return seq

    def resume(self, position: int, on_step: Callable[[Any], None] | None = None) -> None:
        """Queue the next step of the purge at feed ``position``, which another process
        began (it stopped before finishing it): its steps follow until it is done, each
        answering ``on_step`` with its ``SweepStep``, and ``flush`` waits for them."""
        sweep = self._sweep(position)
        self._push(Queued(self._next(), sweep, what=_describe(sweep), on_result=on_step))

    def sweeping(self) -> set[int]:
        """The feed positions of the purges whose steps are queued here."""
        return {i.op.position for i in self._queue if isinstance(i.op, SweepPurge)}

    def mark_dirty(self, entry: Entry) -> None:
        """Write ``entry``'s identity and counters behind."""
        if self.write_behind.mark(entry):
            self._wake.set()

    def queue_dirty(self) -> None:
        """Queue the dirty entries now, so that what is submitted next is written after them."""
        self._swap_dirty()

    @property
    def last_queued(self) -> int:
        """The place in the queue of the item queued last (what is queued after it, later)."""
        return self._seq

    def drop_dirty(self, keys: Iterable[str]) -> None:
        """Do not write these keys behind (they were deleted)."""
        self.write_behind.drop(keys)

    def unwritten(self, which: Callable[[Entry], bool]) -> bool:
        """True when an entry ``which`` selects (not deleted) waits to be written: dirty,
        or in a write-behind batch queued and not committed yet."""
        batches = (item.dirty.values() for item in self._queue if item.dirty)
        waiting = (self.write_behind.waiting(), *batches)
        return any(not e.deleted and which(e) for entries in waiting for e in entries)

    @property
    def healthy(self) -> bool:
        """False while a failed write is being retried: what is queued waits for it."""
        return self.retrying.healthy

    def trouble(self) -> asyncio.Event:
        """An event set at the next failed transaction (someone waiting for a commit can
        stop waiting: what is queued now waits for a retry)."""
        return self.retrying.trouble()

    @property
    def pending(self) -> int:
        """Operations queued and not yet committed (write-behind counts as one)."""
        return len(self._queue) + (1 if self.write_behind else 0)

    # The counters ``memory.stats`` and the tests read by name (all: ``counters``).
    @property
    def round_trips(self) -> int:
        """Store round trips: transactions tried and scrubs."""
        return self.counters.round_trips

    @property
    def commits(self) -> int:
        """Transactions committed."""
        return self.counters.commits

    @property
    def rejected(self) -> int:
        """Operations dropped because the store can never hold them."""
        return self.counters.rejected

    def failing(self) -> list[str]:
        """What is being retried after a failure."""
        lines = []
        failure = self.retrying.failure
        if failure is not None:
            lines = [f"{item.what}: {failure}" for item in self._queue if item.retried]
        return lines + self.scrubs.failing()

    def at_risk(self) -> list[str]:
        """The changes queued and not committed that the journal does not hold either: a
        restart now would lose them."""
        return self.pending_changes.at_risk(self._queue)

    def _durability_error(self, failures: list[str]) -> DurabilityError:
        return DurabilityError(failures, self.at_risk())

    # -- waiting ------------------------------------------------------------
    async def flush(
        self, *, attempts: int = 1, scrub: bool = True, through: int | None = None
    ) -> None:
        """Return once everything queued so far is committed, with the work it left (a
        purge's later steps, a janitor pass's later chunks), and, with ``scrub``, scrubbed
        from the files; raise DurabilityError if it cannot be after ``attempts`` tries.

        With ``through`` (what ``submit_change`` returned): once that item, what was queued
        before it and its own later steps are, but not the later chunks of work queued
        before it (a purge made during a long janitor pass does not wait for the pass)."""
        if through is None:
            self._swap_dirty()
        target = self._seq if through is None else through
        tries = scrub_tries = 0
        covering = 0  # the scrub that covers what was waited for, once it is known
        while True:
            if self._finished_through() >= target if through is None else self._settled(target):
                # Scrub what the deletes so far left behind (once they are committed).
                scrubs = self.scrubs
                if not scrub:
                    return
                if not covering:
                    if not scrubs.pending:
                        return
                    covering = scrubs.next_covering()
                if scrubs.scrubbed >= covering:
                    return
                if scrubs.failure is not None and not scrubs.running:
                    if scrub_tries >= attempts:
                        raise self._durability_error(self.failing())
                    scrub_tries += 1
                if not scrubs.running:
                    scrubs.now(self.scheduler.now())
                    self._wake.set()
            elif not self.retrying.healthy and self.retrying.due_at:
                if tries >= attempts:
                    raise self._durability_error(self.failing())
                tries += 1
                self.retrying.now()  # try again now rather than after the backoff
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

    def _settled(self, seq: int) -> bool:
        """True once the item ``seq``, everything queued before it and the work it left are
        committed or answered; later chunks of work queued before it may not be."""
        return not any(i.origin == seq or (not i.origin and i.seq <= seq) for i in self._queue)

    def _next(self) -> int:
        self._seq += 1
        return self._seq

    def _push(self, item: Queued) -> None:
        self._queue.append(item)
        self._wake.set()

    def _swap_dirty(self) -> None:
        if dirty := self.write_behind.take():
            self._push(Queued(self._next(), None, dirty=dirty, what=describe(dirty)))

    def _queue_read_by(self, op: LoadRows | LoadRecent | LoadChannelKeys) -> None:
        """Queue the dirty entries whose rows ``op`` reads, just ahead of it (it is queued
        next): the rows it reads hold their counters. The other dirty entries stay dirty."""
        if dirty := self.write_behind.take_read_by(op):
            what = describe(dirty)
            self._push(Queued(self._next(), None, dirty=dirty, what=what, for_read=True))

    def _reads_ahead(self) -> bool:
        """True when everything queued is reads (with the write-behind of what they read):
        a batch that commits nothing else. When writes wait behind them, the reads share
        their commit, as everything queued does (an upgrade storm makes one round trip)."""
        queue = self._queue
        return bool(queue) and all(_light(item) for item in queue)

    def _reading(self, now: float) -> bool:
        """True when the next batch is reads (``_reads_ahead``) and the write-behind is not
        due: the other dirty entries do not ride along with it."""
        if not self._reads_ahead():
            return False
        due = self.write_behind.due_at()
        return not due or due > now

    async def _run(self) -> None:
        while True:
            now = self.scheduler.now()
            if self.retrying.due_at > now:
                wake_at: float | None = self.retrying.due_at
            elif self._queue:
                wake_at = now
            else:
                write_behind_at = self.write_behind.due_at()
                scrub_at = self.scrubs.wake_at()
                due = [t for t in (scrub_at, write_behind_at) if t]
                wake_at = min(due) if due else None
            if wake_at is None or wake_at > now:
                self._wake.clear()
                await self.scheduler.wait(self._wake, wake_at)
                continue
            if self._scrub_due(now):
                await self._scrub()
                continue
            # Write-behind rides along with any commit that happens anyway; a read's batch
            # is no such commit: it would wait for, and sync, a write transaction.
            if not self._reading(now):
                self._swap_dirty()
            await self._cycle()

    def _scrub_due(self, now: float) -> bool:
        """Scrub between batches once due, but not while deletes are queued: they would
        need another scrub right after (a burst of purges shares one). Unless a caller
        waits for it: a purge's answer does not wait for another purge's last step."""
        if not self.scrubs.due(now):
            return False
        if self.scrubs.awaited:
            return True
        return not any(
            isinstance(i.op, DeleteChannel | PurgeUser | SweepPurge) for i in self._queue
        )

    async def _scrub(self) -> None:
        """Scrub what committed deletes left in the files without holding up the queue."""
        self.counters.round_trips += 1
        await self.scrubs.run(self.scheduler.now())
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    async def _cycle(self) -> None:
        items = self._next_batch()
        counters = self.counters
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
                    ops.append(self.write_behind.touch(item.dirty, item.seq))
            counters.round_trips += 1
            if not self.retrying.healthy:
                counters.retries += 1
            started = time.perf_counter()
            try:
                results = await self.store.run(ops)
            finally:
                took = time.perf_counter() - started
                counters.store_seconds += took
            if isinstance(items[0].op, SweepPurge):
                # A purge's step is a batch of its own; it says which kinds of work it did.
                self.purge_steps.took(getattr(results[0], "phases", ()), took)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            counters.failures += 1
            if is_permanent(exc):
                self._reject(items, exc)
            else:
                self._fail(items, exc)
        else:
            counters.committed(len(ops))
            self.bisection.committed(len(items))
            for _ in items:
                self._pop()
            self.retrying.succeeded()
            to_scrub = False
            if several:
                results = _per_item(items, results)
            for item, result in zip(items, results, strict=True):
                if item.future is not None and not item.future.done():
                    item.future.set_result(result)
                if item.on_result is not None:
                    self._tell(item, result)
                # Only a delete that removed something leaves anything to scrub.
                if (
                    isinstance(item.op, DeleteChannel | PurgeUser | DeleteExpired | ForgetServer)
                    and result
                ):
                    to_scrub = True
                op = item.op
                if (
                    isinstance(op, DeleteExpired)
                    and isinstance(result, Expired)
                    and result.after is not None
                ):
                    # A janitor chunk with rows left to look at: the next, after them.
                    self._follow(item, replace(op, after=result.after))
                if isinstance(item.op, PurgeUser | SweepPurge):
                    try:
                        position, cleared, more = _progress(item.op, result)
                    except Exception:
                        # A store answering out of contract must not stop the writer: the
                        # rest of the purge is left to the next open's pending sweeps.
                        log.exception("%s: the store's answer cannot be read", item.what)
                        to_scrub = True
                        continue
                    to_scrub = to_scrub or bool(cleared)
                    if more:
                        self._continue(item, position)
            if to_scrub:
                self.scrubs.after_deletes(self.scheduler.now())
            self.pending_changes.done(items)
        progress, self._progress = self._progress, asyncio.Event()
        progress.set()

    def _pop(self) -> Queued:
        """Take the head of the queue off it."""
        item = self._queue.popleft()
        if item.origin:
            self._continuations -= 1
        return item

    def _tell(self, item: Queued, result: Any) -> None:
        assert item.on_result is not None
        try:
            item.on_result(result)
        except Exception:
            log.exception("short-term memory could not apply %s to its cache", item.what)

    def _continue(self, item: Queued, position: int) -> None:
        """Queue the next chunk of the purge ``item`` is (or continues), behind what is
        queued: a purge of many rows never holds other work up for long."""
        self._follow(item, self._sweep(position))

    def _follow(self, item: Queued, op: SweepPurge | DeleteExpired) -> None:
        """Queue ``op``, the next chunk of the work ``item`` is (or continues), behind what
        is queued; ``flush`` waits for it as for ``item``, and ``item``'s caller hears of
        it too (a purge's ``SweepStep``)."""
        self._continuations += 1
        origin = item.origin or item.seq
        more = Queued(self._next(), op, what=item.what, on_result=item.on_result, origin=origin)
        self._push(more)

    def _sweep(self, position: int) -> SweepPurge:
        """The next step of the purge at ``position``, each kind of its work sized by how
        long the last steps of that kind took."""
        steps = self.purge_steps
        return SweepPurge(position, steps.start, steps.sizes())

    def _next_batch(self) -> list[Queued]:
        """The items of the next transaction, in order. A purge's step is a transaction of
        its own: what was queued before it commits without waiting for it, and what comes
        after waits for one bounded step at most."""
        items: list[Queued] = []
        limit = 1 if self.bisection.isolating else MAX_BATCH
        for item in self._queue:
            if isinstance(item.op, PurgeUser | SweepPurge):
                if not items:
                    items.append(item)
                break
            items.append(item)
            if len(items) == limit:
                break
        return items

    def _reject(self, items: list[Queued], exc: Exception) -> None:
        """A failure that no retry can cure: the bisection looks for the culprit and drops
        it, and what was queued behind it goes on."""
        replacing = self.bisection.failed(items, exc)
        if replacing is None:
            return
        item = self._pop()
        self._queue.extendleft(reversed(replacing))
        if not replacing:
            self.pending_changes.done([item])
            if item.op is None:
                self.write_behind.dropped(item.dirty, item.seq)

    def _fail(self, items: list[Queued], exc: Exception) -> None:
        first = self.retrying.failed(exc)
        self.pending_changes.save(self._queue)
        # Every caller waiting, in this batch or queued behind it, hears of the failure
        # now: nothing behind a failing delete can commit before it, and a prompt answer
        # ("not saved", "could not be read") beats waiting out the backoff.
        waiting = [item.future for item in self._queue if item.future is not None]
        self._queue = deque(item for item in self._queue if item.future is None)
        self._continuations = sum(1 for item in self._queue if item.origin)
        for future in waiting:
            if not future.done():
                future.set_exception(exc)
        kept = [item for item in items if item.retried]
        # What waits behind the batch is named too: a purge is a batch of its own.
        behind = [item for item in self._queue if item not in kept]
        self.retrying.retry(kept, first, self.scheduler.now(), behind)


def _not_shared(ops: Sequence[Op]) -> None:
    """Refuse a shared change on a path that fails its caller at once: it would skip the
    retries and the journal of ``submit_change``."""
    for op in ops:
        if isinstance(op, SharedChange):
            raise TypeError(f"{type(op).__name__} is a shared change: queue it with submit_change")


def _light(item: Queued) -> bool:
    """A read, or the write-behind of the entries a read reads (``Writer._queue_read_by``)."""
    return item.for_read or (item.more is None and isinstance(item.op, READS))


def _per_item(items: list[Queued], results: list[object]) -> list[object]:
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
        case ForgetMessages(channel_id, ids, edited):
            return (
                f"{len(ids)} message(s) {'edited' if edited else 'deleted'} in channel {channel_id}"
            )
        case MarkDeparture(server_id, None):
            return f"recording return to server {server_id}"
        case MarkDeparture(server_id, _):
            return f"recording removal from server {server_id}"
        case ForgetServer(server_id):
            return f"forgetting server {server_id}"
        case SaveServerSettings(server_id, _):
            return f"settings of server {server_id}"
        case SaveOptOut(user_id, opted_out, _):
            return f"{'opt-out' if opted_out else 'opt-in'} of user {user_id}"
        case RestoreNotes(key, version):
            return f"restoring version {version} of the notes of {key}"
    return type(op).__name__
