"""The log of recent deletions, so work begun before a delete can tell it was overtaken.

A read queued before a clear returns rows the clear removes; an upgrade whose turn
began before a purge was written from words the purge erased. Both check this log
instead of trusting what they saw. Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import replace

from .store.base import DeleteChannel, PurgeUser, StoredRow

__all__ = ["Deletion", "DeletionLog", "apply_to_row", "overtakes"]

Deletion = DeleteChannel | PurgeUser


class DeletionLog:
    """Numbered recent deletions (the oldest are forgotten past ``size``)."""

    def __init__(self, size: int = 4096) -> None:
        self._recent: deque[tuple[int, Deletion]] = deque(maxlen=size)
        self.seq = 0

    def record(self, deletion: Deletion) -> None:
        """Note a deletion; ``seq`` counts them."""
        self.seq += 1
        self._recent.append((self.seq, deletion))

    def since(self, seq: int) -> list[Deletion] | None:
        """Deletions made after ``seq``; None if some of them are no longer remembered."""
        if seq == self.seq:
            return []
        if not self._recent or self._recent[0][0] > seq + 1:
            return None
        return [deletion for n, deletion in self._recent if n > seq]

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


def overtakes(deletions: list[Deletion], channel_id: int, server_id: int | None) -> bool:
    """Could any of ``deletions`` have erased words a turn in this channel saw?

    A clear of the channel did; so may a purge in its server (or everywhere), since
    the model saw the purged user's words in its prompt.
    """
    for deletion in deletions:
        if isinstance(deletion, DeleteChannel):
            if deletion.channel_id == channel_id:
                return True
        elif deletion.server_id is None or deletion.server_id == server_id:
            return True
    return False
