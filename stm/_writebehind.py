"""Write-behind: the entries captures changed, written in batches after a delay rather than
one round trip per capture."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace

from ._cache import Entry
from ._convert import row_of
from ._timing import Scheduler
from .store._base import LoadChannelKeys, LoadRecent, LoadRows, StoredRow, Touch

__all__ = [
    "TouchGuard",
    "WriteBehind",
    "deposit",
    "describe",
    "read_again",
    "unread_turns",
]

# (the feed position the cache is current with, crude and summary expiry thresholds) for
# each write-behind batch: see ``Touch``.
TouchGuard = Callable[[], tuple[int | None, float, float]]


class WriteBehind:
    """The dirty entries not queued yet, since when they wait, and the ``Touch`` that writes
    a batch of them: one job, apart from the queue."""

    def __init__(
        self,
        delay: float,
        scheduler: Scheduler,
        guard: TouchGuard | None,
        held: Callable[[Entry], bool] | None = None,
    ) -> None:
        self.delay = delay
        self.scheduler = scheduler
        self.guard = guard
        # Whether the cache holds this very entry (see ``take_read_by``); None: it may not.
        self.held = held
        self._dirty: dict[str, Entry] = {}
        # Entries evicted before they were written, whose key a new entry took since: the
        # turns they counted are nowhere else (the new entry counts from zero until its
        # row is read, and the row lacks them), so they are written all the same, ahead of
        # the new entry's read or in the next batch.
        self._displaced: dict[str, Entry] = {}
        self._since = 0.0

    def __len__(self) -> int:
        return len(self._dirty) + len(self._displaced)

    def mark(self, entry: Entry) -> bool:
        """Write ``entry``'s identity and counters behind; True when it is the first dirty
        entry (the writer must wake to write it ``delay`` from now)."""
        first = not self._dirty and not self._displaced
        if first:
            self._since = self.scheduler.now()
        old = self._dirty.get(entry.key)
        if old is not None and old is not entry and old.hydrated and not old.deleted:
            self._displaced[entry.key] = old
        self._dirty[entry.key] = entry
        return first

    def waiting(self) -> Iterator[Entry]:
        """The entries not queued yet (an evicted one too, whose key a new entry took)."""
        yield from self._dirty.values()
        yield from self._displaced.values()

    def evicted(self, key: str) -> Entry | None:
        """The dirty entry of ``key`` that the cache no longer holds (evicted), if any."""
        entry = self._dirty.get(key)
        if entry is None or entry.deleted or self.held is None or self.held(entry):
            return None
        return entry

    def take_unread_counts(self, key: str) -> Entry | None:
        """The evicted entry of ``key`` that counted turns before its row was read, taken
        out (None: there is none). It writes no counters (they are not known), so the turns
        it counted are known nowhere else: the key's next entry takes them over."""
        entry = self.evicted(key)
        if entry is None or entry.hydrated:
            return None
        if not (entry.turns_since_refresh or entry.last_refreshed_turn):
            return None  # nothing to take over; its identity is still written behind
        del self._dirty[key]
        return entry

    @staticmethod
    def dropped(dirty: dict[str, Entry], seq: int) -> None:
        """The batch ``seq`` was dropped (no retry can write it): it added nothing."""
        for entry in dirty.values():
            entry.deposited = tuple(d for d in entry.deposited if d[0] != seq)

    def drop(self, keys: Iterable[str]) -> None:
        """Do not write these keys behind (they were deleted)."""
        for key in keys:
            self._dirty.pop(key, None)
            self._displaced.pop(key, None)

    def take_read_by(self, op: LoadRows | LoadRecent | LoadChannelKeys) -> dict[str, Entry]:
        """The dirty entries whose rows ``op`` reads, taken out of the batch ({}: none), to
        be written just ahead of it: what it reads then holds their counters.

        Only entries whose counters are known: one not hydrated yet writes no counters,
        and its own hydration must not read back what it writes. A recall group's rows
        (``LoadRecent``) and a channel's keys (``LoadChannelKeys``) are used only for
        entries the cache does not hold, so only the dirty entries it no longer holds
        (evicted) are taken for them; a key's row (``LoadRows``) is used either way."""
        dirty = self._dirty
        if not dirty and not self._displaced:
            return {}
        match op:
            case LoadRows(keys):
                read = [dirty[key] for key in keys if key in dirty]
                # An evicted entry's counters, ahead of the read of its successor's row.
                read += [self._displaced.pop(key) for key in keys if key in self._displaced]
            case LoadRecent():
                group = (op.scope, op.owner_id, op.server_id, op.persona_id)
                read = [e for e in dirty.values() if e.group == group and not self._held(e)]
            case LoadChannelKeys(channel_id):
                read = [
                    e for e in dirty.values() if e.channel_id == channel_id and not self._held(e)
                ]
        taken = {e.key: e for e in read if e.hydrated and not e.deleted}
        for key, entry in taken.items():
            if dirty.get(key) is entry:
                del dirty[key]
        return taken

    def _held(self, entry: Entry) -> bool:
        return self.held is not None and self.held(entry)

    def take(self) -> dict[str, Entry]:
        """The dirty entries, to queue as one batch ({}: none); none are left dirty. An
        evicted entry goes in place of the new entry of its key while that one's row is
        not read yet (it has no counters to write; once read, it is marked again)."""
        dirty, self._dirty = self._dirty, {}
        displaced, self._displaced = self._displaced, {}
        for key, old in displaced.items():
            new = dirty.get(key)
            if new is None or not new.hydrated:
                dirty[key] = old
        return dirty

    def due_at(self) -> float:
        """When the dirty entries are to be written (0: none are dirty)."""
        return self._since + self.delay if self._dirty or self._displaced else 0.0

    def touch(self, dirty: dict[str, Entry], seq: int) -> Touch:
        """The operation that writes a batch (``seq``, its place in the writer's queue).
        Built when it runs, not when marked: the latest counters, and never a deleted
        entry. An entry whose row was not read yet adds to the row the turns it did not
        add before (``deposit``)."""
        rows = tuple(
            row_of(e) if e.hydrated else deposit(e, seq) for e in dirty.values() if not e.deleted
        )
        if self.guard is None:
            return Touch(rows)
        after, crude_before, summary_before = self.guard()
        return Touch(rows, after, crude_before, summary_before)


def describe(dirty: dict[str, Entry]) -> str:
    """What a write-behind batch is, in a log line: its first keys."""
    keys = list(dirty)
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    return f"write-behind of {', '.join(keys[:3])}{more}"


def deposit(entry: Entry, seq: int) -> StoredRow:
    """The row the batch ``seq`` writes of ``entry``, whose row was not read yet: the turns
    it counted that no other batch added to its row, recorded against ``seq`` (again when
    the batch is retried: the failed attempt added nothing). A read queued after ``seq``
    finds them in the row, and the entry does not count them twice (``unread_turns``)."""
    earlier = tuple(d for d in entry.deposited if d[0] != seq)
    turns = entry.turns_since_refresh - sum(t for _, t in earlier)
    entry.deposited = (*earlier, (seq, turns)) if turns else earlier
    return replace(row_of(entry), turns_since_refresh=turns)


def unread_turns(entry: Entry, read_seq: int | None = None) -> int:
    """The turns ``entry`` counted that a row read at ``read_seq`` (None: read after every
    write so far) does not hold: those its write-behind had not added to the row by then."""
    return entry.turns_since_refresh - sum(
        t for s, t in entry.deposited if read_seq is None or s < read_seq
    )


def read_again(entry: Entry) -> None:
    """Have ``entry``'s row read again, though its counters were known: the row holds them
    (as far as they were written behind), so the read does not add them a second time."""
    entry.hydrated = False
    entry.deposited = ((0, entry.turns_since_refresh),)  # before any read's place
