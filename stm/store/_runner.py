"""What both stores answer alike: the methods that only run a shared procedure.

A store subclasses :class:`ProcedureStore` and says how it runs a procedure
(``chains``, ``ops``, ``feed``, ``operator``) in each of the four ways these
methods need: on its own, in one read snapshot, in one write transaction that
holds the feed, and as the operator's read (its failures explained). The methods
here then hold no SQL and no connection: each names its procedure once for both
stores.
"""

from __future__ import annotations

from typing import TypeVar

from .._lineage import Erasure, Pin, Range
from . import _chains as chains
from . import _feed as change_feed
from . import _operator as operator
from . import _ops as operations
from ._base import (
    FeedPage,
    NoteVersion,
    PurgePreview,
    PurgeUser,
    StoredRow,
    StoreStats,
    UserHoldings,
)
from ._dialect import Dialect
from ._ops import Procedure

__all__ = ["ProcedureStore"]

_T = TypeVar("_T")


class ProcedureStore:
    """The store methods that run one shared procedure (see the module's docstring)."""

    dialect: Dialect

    async def _once(self, procedure: Procedure[_T]) -> _T:
        """Run ``procedure`` alone, each statement in its own transaction."""
        raise NotImplementedError

    async def _snapshot(self, procedure: Procedure[_T]) -> _T:
        """Run ``procedure`` in one read snapshot."""
        raise NotImplementedError

    async def _exclusive(self, procedure: Procedure[_T]) -> _T:
        """Run ``procedure`` in one write transaction, no other writer of the feed beside."""
        raise NotImplementedError

    async def _inspect(self, procedure: Procedure[_T]) -> _T:
        """Run the operator's ``procedure`` in one read snapshot; a failure is a StoreError
        that says why the database cannot serve."""
        raise NotImplementedError

    async def _load(self, procedure: Procedure[_T]) -> _T:
        """Run the start-up read ``procedure``; a failure is a StoreError naming the
        database."""
        raise NotImplementedError

    async def _database_size(self) -> int | str:
        """The database's size in bytes, or the SQL that counts it."""
        raise NotImplementedError

    async def schema_version(self) -> int:
        """The schema version the database records."""
        return await self._once(operator.schema_version(self.dialect))

    async def load_server_settings(self) -> dict[int, str]:
        """Every stored server's settings JSON."""
        return await self._load(operator.server_settings())

    async def load_opt_outs(self) -> set[int]:
        """Every user who opted out."""
        return await self._load(operator.opt_outs())

    # -- the change feed (``base.Store``) -------------------------------------------------
    async def current_position(self) -> int:
        """The position of the newest committed change (0 when there was none)."""
        return await self._once(change_feed.current_position(self.dialect))

    async def read_changes(self, after: int, limit: int = 1000) -> FeedPage:
        """The committed changes after position ``after``, oldest first, at most ``limit``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return await self._snapshot(change_feed.read(after, limit, self.dialect))

    async def prune_changes(
        self, *, older_than: float, keep_last: int = 0, keep_after: int | None = None
    ) -> int:
        """Delete changes stamped before ``older_than``, except the newest ``keep_last`` and
        those after position ``keep_after`` (always a prefix of the feed: clocks disagree,
        positions do not)."""
        return await self._exclusive(
            change_feed.prune(older_than, max(0, keep_last), self.dialect, keep_after)
        )

    async def purge_ranges(self, position: int) -> tuple[Range, ...] | None:
        """The ranges the purge at feed ``position`` cleared; None while it is planned."""
        return await self._once(chains.planned_ranges(position))

    async def pending_sweeps(self) -> list[int]:
        """Positions of purges whose ranges still hold rows to clear."""
        return await self._once(chains.pending_sweeps())

    async def unplanned_purges(
        self,
    ) -> list[tuple[int, PurgeUser, frozenset[int | None] | None]]:
        """The purges a stopped process left before the store planned them, by position."""
        return await self._once(chains.unplanned_purges())

    # -- the operator's read-only view (``base.Inspector``) --------------------------------
    async def stats(self, thresholds: tuple[float, float], soon: tuple[float, float]) -> StoreStats:
        """Counts; ``thresholds`` and ``soon`` are (crude_before, summary_before) for now and
        for the end of the "near expiry" window."""
        size = await self._database_size()
        return await self._inspect(operator.stats(thresholds, soon, self.dialect, size))

    async def row(self, key: str) -> StoredRow | None:
        """The row under ``key``, expired or not."""
        return await self._inspect(operator.row(key))

    async def rows_of_channel(self, channel_id: int) -> list[StoredRow]:
        """Every row of a channel, any scope or persona, newest first."""
        return await self._inspect(operator.rows_of_channel(channel_id))

    async def note_history(self, key: str) -> list[NoteVersion]:
        """The versions of the notes of ``key`` its history keeps, newest first."""
        return await self._inspect(operations.note_history(key))

    async def holdings_of_user(self, user_id: int, erasure: Erasure = "complete") -> UserHoldings:
        """The user's own rows, the other rows a purge of the user would clear, and the
        opt-out."""
        return await self._inspect(operator.holdings(user_id, erasure, self.dialect))

    async def members(self, pin: Pin) -> list[int]:
        """Everyone whose words a prompt of ``pin``'s chain showed directly, to its version."""
        return await self._inspect(chains.members(pin))

    async def preview_purge(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now, by server."""
        return await self._inspect(chains.inspect_preview(user_id, server_id, erasure))

    async def count_expired(self, thresholds: tuple[float, float]) -> int:
        """Rows the janitor would delete now."""
        return await self._inspect(operator.count_expired(thresholds, self.dialect))
