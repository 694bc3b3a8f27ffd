"""Poison operations: a batch that failed in a way no retry can cure (``is_permanent``) is
bisected down to the one operation at fault, which is dropped and reported, so that it
cannot jam the queue behind it."""

from __future__ import annotations

import logging

from ._errors import RejectedWriteError
from ._metrics import WriterCounters
from ._queued import Queued

__all__ = ["Bisection"]

log = logging.getLogger("stm.writer")


class Bisection:
    """Finds the culprit of a batch that failed for good by running its items one per
    transaction (a write-behind batch row by row), and drops it, telling its caller."""

    def __init__(self, counters: WriterCounters) -> None:
        self.counters = counters
        # Items at the head of the queue still to run one per transaction.
        self._isolate = 0

    @property
    def isolating(self) -> bool:
        """The next transaction takes one item only."""
        return bool(self._isolate)

    def committed(self, items: int) -> None:
        """A transaction of ``items`` items committed."""
        self._isolate = max(0, self._isolate - items)

    def failed(self, items: list[Queued], exc: Exception) -> list[Queued] | None:
        """A batch failed for good. In a batch of several, the culprit is looked for from
        now on, one item per transaction: None, nothing leaves the queue yet. Alone, its
        item leaves the head of the queue, replaced by what is returned: a write-behind
        batch of several rows by each row on its own; anything else by nothing, as it is
        dropped: logged, counted and its caller told (``RejectedWriteError``)."""
        if len(items) > 1:
            self._isolate = len(items)
            return None
        item = items[0]
        if item.op is None and len(item.dirty) > 1:
            # One row of a write-behind batch: write the others, each on its own.
            self._isolate = len(item.dirty)
            return [
                Queued(item.seq, None, dirty={key: entry}, what=f"write-behind of {key}")
                for key, entry in item.dirty.items()
            ]
        self._isolate = max(0, self._isolate - 1)
        self.counters.rejected += 1
        what = item.what
        if item.op is None:
            what = "write-behind of " + ", ".join(item.dirty)
        log.error("short-term memory dropped %s, which it can never store: %s", what, exc)
        if item.future is not None and not item.future.done():
            item.future.set_exception(RejectedWriteError(what, exc))
        return []
