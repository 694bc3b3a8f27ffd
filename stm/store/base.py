"""What a durable store is: the rows it keeps and the operations it runs in one transaction."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from ..keys import Scope

__all__ = [
    "DeleteChannel",
    "DeleteExpired",
    "LoadRecent",
    "LoadRows",
    "Op",
    "PurgeUser",
    "SaveDistilled",
    "SaveOptOut",
    "SaveServerSettings",
    "Scrub",
    "Store",
    "StoredRow",
    "Touch",
]


@dataclass(frozen=True, slots=True)
class StoredRow:
    """One durable scope: everything of an entry except its crude messages."""

    key: str
    scope: Scope
    server_id: int | None
    user_id: int | None
    channel_id: int
    persona_id: int | None
    parent_channel_id: int | None
    channel_name: str | None
    server_name: str | None
    channel_private: bool
    summary: str | None
    categories: dict[str, str]
    contributors: frozenset[int]
    turns_since_refresh: int
    last_refreshed_turn: int
    updated_at: float
    counters_known: bool = True


@dataclass(frozen=True, slots=True)
class Touch:
    """Write identity, activity and counters of many rows; never their distilled content.

    A row whose ``counters_known`` is False (not hydrated yet) only gets its
    identity and ``updated_at``.
    """

    rows: tuple[StoredRow, ...]


@dataclass(frozen=True, slots=True)
class SaveDistilled:
    """Write a whole row, its distilled content and its contributors."""

    row: StoredRow


@dataclass(frozen=True, slots=True)
class DeleteChannel:
    """Delete every row of a channel, any scope or persona."""

    channel_id: int


@dataclass(frozen=True, slots=True)
class PurgeUser:
    """Delete the user's own rows and the distilled content the user contributed to."""

    user_id: int
    server_id: int | None


@dataclass(frozen=True, slots=True)
class DeleteExpired:
    """Delete rows inactive since before their TTL; returns how many."""

    crude_before: float
    summary_before: float


@dataclass(frozen=True, slots=True)
class LoadRows:
    """Read rows by key; expired ones (by the same thresholds) are deleted instead."""

    keys: tuple[str, ...]
    crude_before: float
    summary_before: float


@dataclass(frozen=True, slots=True)
class LoadRecent:
    """Read the newest unexpired rows of one recall group."""

    scope: Scope
    owner_id: int
    server_id: int | None
    persona_id: int | None
    limit: int
    crude_before: float
    summary_before: float


@dataclass(frozen=True, slots=True)
class Scrub:
    """Erase from the files what committed deletes destroyed (run alone, outside a
    transaction; it fails, to be tried again later, while another connection's read
    transaction keeps the WAL from being emptied).

    On SQLite the destroyed data are the keys of crypto-shredded rows (see
    ``store/shred.py``) and the cells secure delete zeroed; their old page images
    remain in the WAL until it is checkpointed and truncated.
    """


@dataclass(frozen=True, slots=True)
class SaveServerSettings:
    """Store a server's settings as JSON."""

    server_id: int
    settings_json: str


@dataclass(frozen=True, slots=True)
class SaveOptOut:
    """Store or clear a user's opt-out."""

    user_id: int
    opted_out: bool
    at: float


Op = (
    Touch
    | SaveDistilled
    | DeleteChannel
    | PurgeUser
    | DeleteExpired
    | LoadRows
    | LoadRecent
    | SaveServerSettings
    | SaveOptOut
    | Scrub
)


class Store(Protocol):
    """A durable store. Every call of ``run`` is one transaction: all of it or none."""

    @property
    def empty_at_open(self) -> bool:
        """True when the store held no memory rows when this process opened it, and no
        other process writes to it: a key the cache has never held then has no row."""
        ...

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one transaction; one result per op."""
        ...

    async def load_server_settings(self) -> dict[int, str]:
        """Every stored server's settings JSON."""
        ...

    async def load_opt_outs(self) -> set[int]:
        """Every user who opted out."""
        ...

    async def close(self) -> None:
        """Close the store."""
        ...
