"""What the deletes in the pending-change journal are about to erase: reads leave it out instead of
showing it as held."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import dataclass
from typing import Any

from .._config import STMConfig
from .._journal import Journal
from ..store._base import DeleteChannel, Inspector, PurgeUser, StoredRow

__all__ = ["PendingCover", "pending_cover"]


@dataclass(frozen=True, slots=True)
class PendingCover:
    """The keys of rows a pending delete erases or clears, and how many deletes wait."""

    keys: frozenset[str] = frozenset()
    deletes: int = 0
    journal: str | None = None

    def kept(self, rows: list[StoredRow]) -> list[StoredRow]:
        """``rows`` without those a pending delete reaches."""
        return [row for row in rows if row.key not in self.keys] if self.keys else rows

    def json(self, left_out: int) -> dict[str, Any]:
        """What an output says of them (nothing when no delete waits)."""
        if not self.deletes:
            return {}
        return {
            "pending_deletes": {
                "deletes": self.deletes,
                "journal": self.journal,
                "left_out": left_out,
                "means": (
                    "deletes that could not be committed yet wait in the pending-delete "
                    "journal and are applied at the next open of the database; the entries "
                    "they erase or clear are left out here"
                ),
            }
        }

    def line(self, left_out: int) -> str | None:
        """The same, for people (None when nothing was left out)."""
        if not left_out:
            return None
        return (
            f"left out: {left_out} entries that pending deletes in the journal {self.journal} "
            "erase or clear at the next open of the database"
        )


async def pending_cover(store: Inspector, config: STMConfig) -> PendingCover:
    """What the deletes waiting in ``config``'s journal reach in ``store`` now: every row
    of a cleared channel; a purged user's own rows and the shared rows whose notes the
    purge clears (in its server, or everywhere)."""
    journal = Journal.for_config(config)
    if journal is None:
        return PendingCover()
    pending = await asyncio.to_thread(functools.partial(journal.load, replaying=False))
    # The journal holds other pending changes too (settings, Discord events): only the
    # deletes of rows are left out of what a read shows.
    deletes = [r.op for r in pending if isinstance(r.op, DeleteChannel | PurgeUser)]
    keys: set[str] = set()
    for op in deletes:
        if isinstance(op, DeleteChannel):
            keys.update(row.key for row in await store.rows_of_channel(op.channel_id))
        elif isinstance(op, PurgeUser):
            held = await store.holdings_of_user(op.user_id, op.erasure)
            keys.update(
                row.key
                for row in held.own + held.contributed
                if op.server_id is None or row.server_id == op.server_id
            )
    return PendingCover(frozenset(keys), len(deletes), str(journal.path))
