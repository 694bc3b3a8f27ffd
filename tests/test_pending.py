"""The journal keeper on its own: the queued changes a failed batch leaves are saved once
each, their records go once committed, and a journal that cannot take them is reported
as putting them at risk (the file format: tests/test_journal.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stm._journal import Journal, Pending
from stm._pending import PendingChanges, journals
from stm._queued import Queued
from stm.store._base import DeleteChannel, DeleteExpired, PurgeUser, SaveOptOut


class FullJournal(Journal):
    """A journal whose appends fail while ``full``."""

    full = False

    def append(self, records: Sequence[Pending]) -> None:
        if self.full:
            raise OSError(28, "No space left on device")
        super().append(records)


def queue() -> list[Queued]:
    return [
        Queued(1, DeleteChannel(10), what="clearing channel 10"),
        Queued(2, SaveOptOut(5, True, 1.0), what="opt-out"),
        Queued(3, PurgeUser(7, None), what="purging user 7 everywhere"),
        Queued(4, DeleteExpired(1.0, 2.0), what="expired"),
    ]


def test_every_shared_change_is_journaled_and_a_janitor_chunk_is_not() -> None:
    """A janitor's chunk of expired rows is found again by the next pass; every change
    another process must honour is kept."""
    assert [journals(item) for item in queue()] == [True, True, True, False]


def test_saved_once_replayed_in_order_and_dropped_once_committed(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "pending")
    keeper = PendingChanges(journal)
    items = queue()
    keeper.save(items)
    assert [i.journaled for i in items] == [True, True, True, False]
    keeper.save(items)  # already held: not appended again
    replayed = PendingChanges(Journal(journal.path)).replay()
    assert [p.op for p in replayed] == [items[0].op, items[1].op, items[2].op]
    assert [p.id for p in replayed] == [i.journal_id for i in items[:3]]
    keeper.done(items[:2])
    assert [p.op for p in journal.load()] == [PurgeUser(7, None)]
    keeper.done(items)
    assert not journal.path.exists()


def test_a_journal_that_cannot_take_them_puts_them_at_risk(tmp_path: Path) -> None:
    journal = FullJournal(tmp_path / "pending")
    keeper = PendingChanges(journal)
    items = queue()
    journal.full = True
    keeper.save(items)
    risk = keeper.at_risk(items)
    assert len(risk) == 3 and "clearing channel 10" in risk[0] and "No space" in risk[0]
    assert "opt-out" in risk[1]
    ids = [i.journal_id for i in items[:3]]
    journal.full = False
    keeper.save(items)  # the same ids, once it can
    assert [i.journal_id for i in items[:3]] == ids
    assert keeper.at_risk(items) == []
    assert [p.id for p in journal.load()] == ids


def test_without_a_journal_nothing_is_kept_and_nothing_at_risk() -> None:
    keeper = PendingChanges(None)
    items = queue()
    keeper.save(items)
    keeper.done(items)
    assert keeper.replay() == [] and keeper.at_risk(items) == []
    assert not any(i.journaled for i in items)
