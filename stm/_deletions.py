"""The log of recent deletions, so work begun before a delete can tell it was overtaken.

A read queued before a clear returns rows the clear removes; an upgrade whose turn
began before a purge was written from words the purge removed. Both check this log
instead of trusting what they saw. A purge's ranges (which versions of which notes
it cleared, ``_lineage.py``) are known once the store planned them; until then the
purge is *pending*, and everything it may reach is treated as reached. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from ._lineage import Pin, Range, covers
from ._provenance import Shown
from .store._base import (
    DeleteChannel,
    ForgetMessages,
    ForgetServer,
    PurgePreview,
    PurgeUser,
    RestoreNotes,
    StoredRow,
)

__all__ = [
    "Deletion",
    "DeletionLog",
    "Purge",
    "add_reach",
    "apply_to_row",
    "in_scope",
    "overtakes",
    "with_own",
]

Deletion = DeleteChannel | PurgeUser


@dataclass(slots=True, eq=False)
class Purge:
    """A user purge in the log: the cached keys it changed, and its ranges once planned
    (chain -> first version cleared; None while pending)."""

    deletion: PurgeUser
    keys: set[str] = field(default_factory=set)
    ranges: dict[int, int] | None = None
    # What the store did: own rows deleted, other rows whose notes it cleared (so far).
    removed: int = 0
    cleared: int = 0
    # What its ranges reach, by server, as the store counted it when it planned them, and
    # the user's own distilled rows it deleted, by server.
    reach: PurgePreview | None = None
    own_distilled: dict[int | None, int] = field(default_factory=dict)
    # What its ranges reach as counted so far (the store counts a wide reach in steps).
    counted: PurgePreview | None = None
    # Its ranges as told so far (the store tells a wide reach a page at a time), the
    # chain the last page told ended at, and whether a page told here began after another
    # chain: another process told the pages between (it carried the purge out meanwhile).
    pages: list[Range] = field(default_factory=list)
    told_through: int = 0
    gapped: bool = False
    # Its feed position, once known (the store's first answer, or a purge resumed), and
    # whether its ranges are being read whole from the store (told elsewhere).
    position: int | None = None
    reading: bool = False
    # A turn waited the whole while for its plan in vain: later ones do not wait for it.
    overdue: bool = False
    # While it is pending, the servers whose notes its plan may reach, once the store
    # said (those of the notes the user is a member of: lineage stays in its server);
    # None: any server in its scope.
    servers: frozenset[int | None] | None = None
    # Called once the ranges are known (the facade wakes the upgrades waiting on it).
    resolved: list[Callable[[], None]] = field(default_factory=list)
    # Called once, at the next progress: the servers are known, or the ranges.
    waiting: list[Callable[[], None]] = field(default_factory=list)

    @property
    def pending(self) -> bool:
        """True until the store planned the purge's ranges."""
        return self.ranges is None

    def may_reach(self, server_id: int | None) -> bool:
        """While pending: may its plan reach notes of ``server_id``? (In its scope and,
        once the store said where the user's notes are, in one of those servers.)"""
        if not in_scope(self.deletion, server_id):
            return False
        return self.servers is None or server_id in self.servers

    def narrow(self, servers: Iterable[int | None]) -> None:
        """The store said which servers the plan may reach: only their notes wait for it."""
        if self.pending:
            self.servers = frozenset(servers)
            self._progressed()

    def tell(self, page: Sequence[Range], last: bool, after: int = 0) -> tuple[Range, ...] | None:
        """A page of the ranges the store planned, of chains after ``after``; all of them
        once ``last`` (else None: the purge is pending until the last page). None at the
        last page too when pages were told elsewhere (``gapped``): the ranges are then
        read whole from the store."""
        if after != self.told_through:
            self.gapped = True
        if page:
            self.told_through = page[-1].chain
        self.pages.extend(page)
        if not last or self.gapped:
            return None
        ranges, self.pages = tuple(self.pages), []
        return ranges

    def resolve(self, ranges: Iterable[Range]) -> None:
        """The store planned the purge: these are its ranges."""
        self.ranges = {r.chain: r.from_version for r in ranges}
        callbacks, self.resolved = self.resolved, []
        for callback in callbacks:
            callback()
        self._progressed()

    def _progressed(self) -> None:
        callbacks, self.waiting = self.waiting, []
        for callback in callbacks:
            callback()


def add_reach(total: PurgePreview | None, page: PurgePreview) -> PurgePreview:
    """What a purge reaches, counted so far (``total``) and by one more step (``page``):
    a purge of wide reach is counted a page of its ranges at a time."""
    if total is None:
        return page
    shared = dict(total.shared_by_server)
    for server, count in page.shared_by_server.items():
        shared[server] = shared.get(server, 0) + count
    # Each page counts the distilled rows of the servers it reaches: the latest stands.
    distilled = {**total.distilled_by_server, **page.distilled_by_server}
    counted = page.distilled_by_server
    kept = (s for s in total.distilled_at_least if s not in counted)
    at_least = frozenset(kept) | page.distilled_at_least
    return PurgePreview(0, total.shared + page.shared, shared, distilled, at_least)


def with_own(
    reach: PurgePreview, own: int, own_distilled: Mapping[int | None, int]
) -> PurgePreview:
    """What a purge reached as a preview counts it: the store counted its reach after the
    user's own rows went, so their ``own`` and distilled rows (by server) are added back;
    as a preview, only the servers it cleared shared notes in."""
    distilled = {
        server: count + own_distilled.get(server, 0)
        for server, count in reach.distilled_by_server.items()
        if server in reach.shared_by_server
    }
    at_least = frozenset(s for s in reach.distilled_at_least if s in distilled)
    return replace(reach, own=own, distilled_by_server=distilled, distilled_at_least=at_least)


# A deletion as the log holds it: a channel clear, a server forgotten, or messages deleted
# or edited on Discord, with the keys it changed; or a purge.
# A restore of notes is logged so, with its key: it overtakes the turns that write the key.
Logged = tuple[DeleteChannel | ForgetServer | ForgetMessages | RestoreNotes, frozenset[str]] | Purge
_NOTHING: frozenset[str] = frozenset()


class DeletionLog:
    """Numbered recent deletions (the oldest are forgotten past ``size``)."""

    def __init__(self, size: int = 4096) -> None:
        self._recent: deque[tuple[int, Logged]] = deque(maxlen=size)
        self.seq = 0
        # Purges not planned yet, oldest first: what they may reach is hidden meanwhile.
        self.pending: list[Purge] = []

    def record(
        self,
        deletion: DeleteChannel | ForgetServer | ForgetMessages | RestoreNotes,
        keys: frozenset[str] = _NOTHING,
    ) -> None:
        """Note a channel clear, a server forgotten (or messages deleted or edited on
        Discord) and the cached keys it changed; ``seq`` counts deletions."""
        self.seq += 1
        self._recent.append((self.seq, (deletion, keys)))

    def record_purge(self, deletion: PurgeUser, keys: Iterable[str] = ()) -> Purge:
        """Note a user purge (pending until its ranges are known) and the keys it changed."""
        purge = Purge(deletion, set(keys))
        self.seq += 1
        self._recent.append((self.seq, purge))
        self.pending.append(purge)
        purge.resolved.append(lambda: self._resolved(purge))
        return purge

    def _resolved(self, purge: Purge) -> None:
        if purge in self.pending:
            self.pending.remove(purge)

    def since(self, seq: int) -> list[Logged] | None:
        """Deletions made after ``seq``; None if some of them are no longer remembered."""
        if seq == self.seq:
            return []
        if not self._recent or self._recent[0][0] > seq + 1:
            return None
        return [logged for n, logged in self._recent if n > seq]

    def overtake_all(self) -> None:
        """Count every piece of work begun before now as overtaken (deletions were missed)."""
        self.seq += 1
        self._recent.clear()


def in_scope(deletion: PurgeUser, server_id: int | None) -> bool:
    """Does a purge (everywhere, or in its server) reach memory of ``server_id``?"""
    return deletion.server_id is None or deletion.server_id == server_id


def apply_to_row(row: StoredRow, logged: Logged) -> StoredRow | None:
    """What is left of a row read before a deletion ran (a pending purge's ranges are
    applied to the cache once known, whatever entered it meanwhile)."""
    if isinstance(logged, tuple):
        deletion = logged[0]
        if isinstance(deletion, ForgetMessages | RestoreNotes):
            return row  # rows hold no crude messages; a restore is read again after it
        if isinstance(deletion, ForgetServer):
            return None if row.server_id == deletion.server_id else row
        return None if row.channel_id == deletion.channel_id else row
    purge = logged.deletion
    if purge.server_id is not None and row.server_id != purge.server_id:
        return row
    if row.scope == "user" and row.user_id == purge.user_id:
        return None
    if logged.ranges is not None and covers(logged.ranges, row.pin):
        return replace(row, summary=None, categories={}, pin=None)
    return row


def overtakes(
    deletions: list[Logged],
    shown: Shown,
    own_keys: tuple[str, ...],
    server_id: int | None,
    current: Mapping[str, Pin | None] | None = None,
) -> bool:
    """Did any of ``deletions`` remove words a turn could have put in its summary or reply?

    A turn is overtaken by a clear of any channel its prompt showed (its own among
    them), by its server forgotten, by a message deleted or edited on Discord that a
    window of such a channel (or its own) held, by a purge (in its server, or
    everywhere) of any user whose words its prompt showed directly, by a purge that
    cleared a version of notes it showed (or, while the purge is pending, that may
    have: any it showed), and by a purge that changed the turn's own entries (the model
    sees its own channel's history through the host). ``current`` gives the pins of
    notes shown before theirs was known.
    """
    for logged in deletions:
        if isinstance(logged, tuple):
            # A clear, or a message deleted or edited on Discord that a window of the
            # channel held (it may be in what the prompt showed of it); a restore of
            # notes the turn writes.
            if isinstance(logged[0], RestoreNotes):
                if any(key in logged[1] for key in own_keys):
                    return True
                continue
            if isinstance(logged[0], ForgetServer):
                # The turn's server forgotten (its channels held here were cleared too,
                # each logged as a clear).
                if logged[0].server_id == server_id or any(k in logged[1] for k in own_keys):
                    return True
                continue
            if logged[0].channel_id in shown.channels:
                return True
            if any(key in logged[1] for key in own_keys):
                return True
            continue
        if not in_scope(logged.deletion, server_id):
            continue
        if logged.deletion.user_id in shown.users or any(key in logged.keys for key in own_keys):
            return True
        if logged.ranges is None:
            if shown.notes and logged.may_reach(server_id):
                return True
        elif any(covers(logged.ranges, pin) for pin in shown.pins(current)):
            return True
    return False
