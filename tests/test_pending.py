"""The journal keeper on its own: the queued deletes a failed batch leaves are saved once
each, their records go once committed, and a journal that cannot take them is reported
as putting them at risk (the file format: tests/test_journal.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from stm.journal import Journal, Pending
from stm.pending import PendingDeletes, journals
from stm.queued import Queued
from stm.store.base import DeleteChannel, DeleteExpired, PurgeUser, SaveOptOut


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


def test_only_channel_clears_and_purges_are_journaled() -> None:
    assert [journals(item) for item in queue()] == [True, False, True, False]


def test_saved_once_replayed_in_order_and_dropped_once_committed(tmp_path: Path) -> None:
    journal = Journal(tmp_path / "pending")
    keeper = PendingDeletes(journal)
    items = queue()
    keeper.save(items)
    assert [i.journaled for i in items] == [True, False, True, False]
    keeper.save(items)  # already held: not appended again
    replayed = PendingDeletes(Journal(journal.path)).replay()
    assert [p.op for p in replayed] == [DeleteChannel(10), PurgeUser(7, None)]
    assert [p.id for p in replayed] == [items[0].journal_id, items[2].journal_id]
    keeper.done(items[:1])
    assert [p.op for p in journal.load()] == [PurgeUser(7, None)]
    keeper.done(items)
    assert not journal.path.exists()


def test_a_journal_that_cannot_take_them_puts_them_at_risk(tmp_path: Path) -> None:
    journal = FullJournal(tmp_path / "pending")
    keeper = PendingDeletes(journal)
    items = queue()
    journal.full = True
    keeper.save(items)
    risk = keeper.at_risk(items)
    assert len(risk) == 2 and "clearing channel 10" in risk[0] and "No space" in risk[0]
    ids = [items[0].journal_id, items[2].journal_id]
    journal.full = False
    keeper.save(items)  # the same ids, once it can
    assert [items[0].journal_id, items[2].journal_id] == ids
    assert keeper.at_risk(items) == []
    assert [p.id for p in journal.load()] == ids


def test_without_a_journal_nothing_is_kept_and_nothing_at_risk() -> None:
    keeper = PendingDeletes(None)
    items = queue()
    keeper.save(items)
    keeper.done(items)
    assert keeper.replay() == [] and keeper.at_risk(items) == []
    assert not any(i.journaled for i in items)
