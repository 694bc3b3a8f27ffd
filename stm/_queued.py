"""One piece of work in the writer's queue: an operation (or a write-behind batch), who
waits for it, and what the journal holds of it."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ._cache import Entry
from .store._base import Op

__all__ = ["Queued"]


@dataclass(eq=False)
class Queued:
    """An item of the writer's queue, answered in queue order."""

    seq: int
    op: Op | None  # None: a write-behind batch of dirty entries
    dirty: dict[str, Entry] = field(default_factory=dict)
    # Further operations answered with ``op`` by one future (of the list of their results).
    more: tuple[Op, ...] | None = None
    future: asyncio.Future[Any] | None = None
    what: str = ""
    # The id of its record in the pending-change journal ("": none yet), and whether
    # that record is durable.
    journal_id: str = ""
    journaled: bool = False
    # Called with the result once committed, before any later item's (the cache applies
    # what the store decided in commit order: an upgrade's version, a purge's ranges).
    on_result: Callable[[Any], None] | None = None
    # The item whose work this continues (a purge's later chunks): flush() waits for it.
    origin: int = 0
    # A write-behind batch of the dirty entries whose rows the read queued right behind it
    # reads: it goes in that read's batch, and the other dirty entries do not.
    for_read: bool = False

    @property
    def retried(self) -> bool:
        """Kept and retried on failure (deletes, write-behind) instead of failing its caller."""
        return self.future is None
