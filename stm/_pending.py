"""Which of the writer's queued changes the pending-change journal (``stm/_journal.py``)
holds: a change whose batch failed is acknowledged as pending and must outlive this
process, so it is saved there, and its record goes once the change is committed."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ._journal import Journal, Pending
from ._queued import Queued
from .store._base import SharedChange

__all__ = ["PendingChanges", "journals"]

log = logging.getLogger("stm.writer")


def journals(item: Queued) -> bool:
    """Is ``item`` a change the journal keeps while it is pending?"""
    return isinstance(item.op, SharedChange)


class PendingChanges:
    """Keeps the journal in step with the queue: replays it at start, saves the queued
    changes it lacks when a batch fails, drops their records once committed (no journal:
    each step does nothing)."""

    def __init__(self, journal: Journal | None) -> None:
        self.journal = journal
        # Why the journal could not take the changes last given to it (None: it could).
        self.failure: OSError | None = None

    def replay(self) -> list[Pending]:
        """The changes acknowledged as pending before a restart, in order, to go first;
        the damaged lines the journal skipped are dropped from it once read."""
        journal = self.journal
        if journal is None:
            return []
        pending = journal.load()
        if journal.skipped:
            journal.drop_damaged()
        return pending

    def save(self, queue: Iterable[Queued]) -> None:
        """A pending change must outlive this process: it is acknowledged as pending. Save
        the queued changes the journal does not hold yet; when it cannot take them, keep
        the reason, which ``flush()`` and ``close()`` report (``at_risk``)."""
        journal = self.journal
        if journal is None:
            return
        pending = [i for i in queue if journals(i) and not i.journaled]
        if not pending:
            return
        records = []
        for item in pending:
            # One id per change, also when an append that failed is tried again.
            item.journal_id = item.journal_id or journal.new_id()
            assert isinstance(item.op, SharedChange)
            records.append(Pending(item.journal_id, item.op))
        try:
            journal.append(records)
        except OSError as exc:
            if self.failure is None:
                log.error(
                    "pending changes could not be saved to %s, so a restart before the "
                    "database takes them would lose them: %s",
                    journal.path,
                    exc,
                )
            self.failure = exc
            return
        for item in pending:
            item.journaled = True
        if self.failure is not None:
            log.warning("pending changes are saved to %s again", journal.path)
        self.failure = None

    def done(self, items: Iterable[Queued]) -> None:
        """Drop the records of these items from the journal: they are committed (or can
        never be)."""
        if self.journal is not None:
            self.journal.remove([i.journal_id for i in items if i.journal_id])

    def at_risk(self, queue: Iterable[Queued]) -> list[str]:
        """The changes queued and not committed that the journal does not hold either: a
        restart now would lose them."""
        if self.journal is None or self.failure is None:
            return []
        why = f"{self.journal.path}: {self.failure}"
        return [f"{i.what} ({why})" for i in queue if journals(i) and not i.journaled]
