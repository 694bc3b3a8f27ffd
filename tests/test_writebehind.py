"""Write-behind on its own: which entries are dirty, when they are due, and the ``Touch``
that writes a batch of them (built when it runs, never for a deleted entry)."""

from __future__ import annotations

from helpers import server_entry

from stm._cache import Entry
from stm._writebehind import WriteBehind, describe
from stm.testing import ManualScheduler


def entry(channel: int) -> Entry:
    return server_entry(channel)


def test_the_first_dirty_entry_makes_a_batch_due_after_the_delay() -> None:
    """Only the first mark asks the writer to wake; later ones ride along in its batch."""
    scheduler = ManualScheduler(start=100.0)
    behind = WriteBehind(5.0, scheduler, None)
    assert behind.due_at() == 0.0 and len(behind) == 0
    first = entry(1)
    assert behind.mark(first)
    scheduler.advance(3.0)
    assert not behind.mark(entry(2))
    assert not behind.mark(first)  # marked again: still one entry
    assert behind.due_at() == 105.0 and len(behind) == 2


def test_taking_the_batch_leaves_nothing_dirty() -> None:
    behind = WriteBehind(5.0, ManualScheduler(), None)
    first, second = entry(1), entry(2)
    behind.mark(first)
    behind.mark(second)
    assert behind.take() == {first.key: first, second.key: second}
    assert behind.take() == {} and behind.due_at() == 0.0
    assert behind.mark(entry(3))  # a new batch starts


def test_forgotten_keys_are_not_written() -> None:
    behind = WriteBehind(5.0, ManualScheduler(), None)
    behind.mark(entry(1))
    behind.mark(entry(2))
    behind.drop(["shortterm:server:1:1", "shortterm:server:1:9"])
    assert list(behind.take()) == ["shortterm:server:1:2"]


def test_the_touch_carries_the_guard_and_leaves_deleted_entries_out() -> None:
    """The guard is asked when the batch is built, and a deleted entry is never written."""
    asked: list[int] = []

    def guard() -> tuple[int | None, float, float]:
        asked.append(1)
        return 42, 10.0, 20.0

    behind = WriteBehind(5.0, ManualScheduler(), guard)
    kept, gone = entry(1), entry(2)
    gone.deleted = True
    behind.mark(kept)
    behind.mark(gone)
    dirty = behind.take()
    assert asked == []
    touch = behind.touch(dirty, 1)
    assert asked == [1]
    assert [row.key for row in touch.rows] == [kept.key]
    assert (touch.after, touch.crude_before, touch.summary_before) == (42, 10.0, 20.0)
    unguarded = WriteBehind(5.0, ManualScheduler(), None).touch(dirty, 2)
    assert unguarded.after is None and unguarded.crude_before is None


def test_a_batch_is_described_by_its_first_keys() -> None:
    dirty = {e.key: e for e in map(entry, range(5))}
    assert describe(dirty) == (
        "write-behind of shortterm:server:1:0, shortterm:server:1:1, shortterm:server:1:2"
        " and 2 more"
    )
