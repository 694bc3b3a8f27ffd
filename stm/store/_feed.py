"""The change feed, written once for both stores: a batch's changes before they are
written, a follower's page, pruning, and the deletes a write must honour.

How a change is written (and so how it gets its position) is each store's own:
SQLite's ``AUTOINCREMENT`` key, PostgreSQL's counter row and ``NOTIFY``. What is
read, and how the feed is pruned, is the same on both, as procedures (see
``chains``) a store runs in the transaction it opens for them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from ._base import GUARD_KINDS_SQL, Change, ChangeKind, FeedPage
from ._chains import Procedure, Step, forget_purges
from ._dialect import Dialect

__all__ = [
    "COLUMNS",
    "Changes",
    "Pending",
    "Position",
    "current_position",
    "deletes_after",
    "prune",
    "read",
]

# A change's columns in the order ``Change`` takes them.
COLUMNS = "position, kind, origin, at, key, version, channel_id, user_id, server_id"
# A change as the feed stores it, before it has a position: kind, key, version, channel,
# user, server.
Pending = tuple[ChangeKind, str | None, int | None, int | None, int | None, int | None]


class Changes:
    """The changes of one batch, in op order, not written yet (the store writes them,
    with ``origin``, at the end of the batch or when a :class:`Position` asks)."""

    def __init__(self, origin: str = "") -> None:
        self.origin = origin
        self.pending: list[Pending] = []

    def append(self, change: Pending) -> None:
        """Add ``change`` after the others."""
        self.pending.append(change)

    def extend(self, changes: Iterable[Pending]) -> None:
        """Add ``changes`` after the others, in order."""
        self.pending.extend(changes)


@dataclass(frozen=True, slots=True)
class Position:
    """A procedure's request to its store: write what is pending and ``change`` now, and
    answer ``change``'s position (a purge records its ranges by it)."""

    change: Pending


def current_position(dialect: Dialect) -> Procedure[int]:
    """The position of the newest change ever written (0 when there was none)."""
    row = yield Step(dialect.position, {}, "one")
    return 0 if row is None or row[0] is None else int(row[0])


def read(after: int, limit: int, dialect: Dialect) -> Procedure[FeedPage]:
    """The feed after ``after`` (see ``FeedPage``); run in one snapshot."""
    pruned = yield Step("SELECT pruned_through FROM stm_feed WHERE id = 1", {}, "one")
    if after < int(pruned[0]):
        return FeedPage((), (yield from current_position(dialect)), fell_behind=True)
    rows = yield Step(
        f"SELECT {COLUMNS} FROM stm_changes WHERE position > :after ORDER BY position LIMIT :limit",
        {"after": after, "limit": limit},
        "all",
    )
    changes = tuple(Change(*row) for row in rows)
    return FeedPage(changes, changes[-1].position if changes else after, more=len(changes) == limit)


def prune(
    older_than: float, keep_last: int, dialect: Dialect, keep_after: int | None = None
) -> Procedure[int]:
    """Delete old changes, remembering the newest position deleted; returns how many.

    What goes is always a prefix of the feed (every position up to the newest change
    older than ``older_than``, none after ``keep_after``): clocks of several processes
    disagree, positions do not. The newest old change is found walking back from the
    newest position, through the retained changes only, so ``at`` needs no index.
    Positions have no gaps, so the newest deleted is ``through`` whenever any is."""
    newest = yield Step(dialect.position_locked, {}, "one")
    newest_position = 0 if newest is None or newest[0] is None else int(newest[0])
    old = yield Step(
        "SELECT max(position) FROM stm_changes WHERE at < :older_than",
        {"older_than": older_than},
        "one",
    )
    through = min(int(old[0] or 0), newest_position - keep_last)
    if keep_after is not None:
        through = min(through, keep_after)
    gone = yield Step(
        "DELETE FROM stm_changes WHERE position <= :through", {"through": through}, "count"
    )
    if gone:
        yield Step(
            f"UPDATE stm_feed SET pruned_through = {dialect.greatest}(pruned_through, :through) "
            "WHERE id = 1",
            {"through": through},
            "exec",
        )
        yield from forget_purges(through)
    return int(gone)


def deletes_after(
    after: int, kinds_sql: str, not_origin: str | None = None
) -> Procedure[list[Change]]:
    """The changes of ``kinds_sql`` (an SQL list of kinds, all of ``GUARD_KINDS_SQL``)
    after ``after``, in order, except those of ``not_origin`` when given. Read through the
    index of the feed's deletes (``stm_changes_deletes``), whose condition is the first
    list: never through the other changes after ``after``."""
    sql = f"SELECT {COLUMNS} FROM stm_changes WHERE position > :after AND kind IN {GUARD_KINDS_SQL}"
    if kinds_sql != GUARD_KINDS_SQL:
        sql += f" AND kind IN {kinds_sql}"
    params: dict[str, object] = {"after": after}
    if not_origin is not None:
        sql += " AND origin <> :origin"
        params["origin"] = not_origin
    rows = yield Step(sql + " ORDER BY position", params, "all")
    return [Change(*row) for row in rows]
