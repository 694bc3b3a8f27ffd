"""The bisection on its own: a batch that failed for good is run item by item, a
write-behind batch row by row, until the one operation at fault is dropped and its caller
told (the writer's part: tests/test_writer_poison.py)."""

from __future__ import annotations

import asyncio

import pytest
from test_writebehind import entry

from stm import RejectedWriteError
from stm._metrics import WriterCounters
from stm._poison import Bisection
from stm._queued import Queued
from stm.store._base import DeleteChannel


def test_a_batch_of_several_is_split_before_anything_is_dropped() -> None:
    counters = WriterCounters()
    bisection = Bisection(counters)
    items = [Queued(n, DeleteChannel(n)) for n in (1, 2, 3)]
    assert not bisection.isolating
    assert bisection.failed(items, ValueError("bad")) is None
    assert bisection.isolating and counters.rejected == 0
    bisection.committed(2)
    assert bisection.isolating  # one item still runs alone
    bisection.committed(1)
    assert not bisection.isolating


async def test_the_culprit_alone_is_dropped_and_its_caller_told() -> None:
    counters = WriterCounters()
    bisection = Bisection(counters)
    future: asyncio.Future[object] = asyncio.get_running_loop().create_future()
    item = Queued(7, DeleteChannel(9), future=future, what="clearing channel 9")
    assert bisection.failed([item], ValueError("out of range")) == []
    assert counters.rejected == 1
    with pytest.raises(RejectedWriteError, match="clearing channel 9"):
        await future


def test_a_write_behind_batch_is_retried_row_by_row() -> None:
    """Only the bad row of a write-behind batch is lost: the others are written alone."""
    counters = WriterCounters()
    bisection = Bisection(counters)
    dirty = {e.key: e for e in map(entry, (1, 2, 3))}
    batch = Queued(4, None, dirty=dirty, what="write-behind")
    rows = bisection.failed([batch], ValueError("bad"))
    assert rows is not None
    assert [list(r.dirty) for r in rows] == [[key] for key in dirty]
    assert all(r.seq == 4 and r.op is None for r in rows)
    assert rows[0].what == "write-behind of shortterm:server:1:1"
    assert bisection.isolating and counters.rejected == 0
    # The bad row, alone, is dropped.
    assert bisection.failed([rows[1]], ValueError("bad")) == []
    assert counters.rejected == 1
