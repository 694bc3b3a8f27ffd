"""The log of recent deletions, so work begun before a delete can tell it was overtaken.

A read queued before a clear returns rows the clear removes; an upgrade whose turn
began before a purge was written from words the purge erased. Both check this log
instead of trusting what they saw. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from .provenance import Shown
from .store.base import DeleteChannel, PurgeUser, StoredRow

__all__ = ["Deletion", "DeletionLog", "Touched", "apply_to_row", "overtakes"]

Deletion = DeleteChannel | PurgeUser
# A deletion and the cached keys it changed.
Touched = tuple[Deletion, frozenset[str]]
_NOTHING: frozenset[str] = frozenset()


class DeletionLog:
    """Numbered recent deletions (the oldest are forgotten past ``size``)."""

    def __init__(self, size: int = 4096) -> None:
        self._recent: deque[tuple[int, Deletion, frozenset[str]]] = deque(maxlen=size)
        self.seq = 0

    def record(self, deletion: Deletion, keys: frozenset[str] = _NOTHING) -> None:
        """Note a deletion and the cached keys it changed; ``seq`` counts them."""
        self.seq += 1
        self._recent.append((self.seq, deletion, keys))

    def since(self, seq: int) -> list[Deletion] | None:
        """Deletions made after ``seq``; None if some of them are no longer remembered."""
        touched = self.touched_since(seq)
        return None if touched is None else [deletion for deletion, _ in touched]

    def touched_since(self, seq: int) -> list[Touched] | None:
        """Deletions made after ``seq`` with the keys they changed; None if some of them
        are no longer remembered."""
        if seq == self.seq:
            return []
        if not self._recent or self._recent[0][0] > seq + 1:
            return None
        return [(deletion, keys) for n, deletion, keys in self._recent if n > seq]

    def forget_all(self) -> None:
        """Count every piece of work begun before now as overtaken (deletions were missed)."""
        self.seq += 1
        self._recent.clear()


def apply_to_row(row: StoredRow, deletion: Deletion) -> StoredRow | None:
    """What is left of a row read before ``deletion`` ran."""
    if isinstance(deletion, DeleteChannel):
        return None if row.channel_id == deletion.channel_id else row
    if deletion.server_id is not None and row.server_id != deletion.server_id:
        return row
    if row.scope == "user" and row.user_id == deletion.user_id:
        return None
    if deletion.user_id in row.contributors:
        return replace(row, summary=None, categories={}, contributors=frozenset())
    return row


def overtakes(
    deletions: list[Touched], shown: Shown, own_keys: tuple[str, ...], server_id: int | None
) -> bool:
    """Did any of ``deletions`` erase words a turn could have put in its summary or reply?

    A turn is overtaken by a clear of any channel its prompt showed (its own among
    them), by a purge (in its server, or everywhere) of any user whose words its
    prompt showed, and by a purge that changed the turn's own entries (the model
    sees its own channel's history through the host).
    """
    for deletion, keys in deletions:
        if isinstance(deletion, DeleteChannel):
            if deletion.channel_id in shown.channels:
                return True
        elif (deletion.server_id is None or deletion.server_id == server_id) and (
            deletion.user_id in shown.users or any(key in keys for key in own_keys)
        ):
            return True
    return False
