"""What a store tells an operator: counts, one user's or channel's rows, health checks.

These reads serve the operator command line (``python -m stm``), never the turn
path; a store opened for them is read-only and is never created or migrated.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from ..config import STMConfig
from ..errors import StoreError
from ..lineage import Erasure, Pin
from ..redact import redact_url
from . import is_postgres_url
from .base import PurgePreview, StoredRow

__all__ = [
    "CheckReport",
    "Inspector",
    "NoDatabase",
    "StoreStats",
    "UserHoldings",
    "file_missing",
    "open_inspector",
    "open_migrating",
    "shown",
]


class NoDatabase(StoreError):
    """There is no short-term memory database where the settings point (none was made)."""


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What the database holds, counted."""

    entries: int
    entries_by_scope: dict[str, int]
    distilled: int
    servers: int
    users: int
    expired: int
    near_expiry: int
    opt_outs: int
    server_settings: int
    schema_version: int
    database_bytes: int
    feed_position: int | None = None


@dataclass(frozen=True, slots=True)
class UserHoldings:
    """Everything a database holds about one user."""

    user_id: int
    own: list[StoredRow]
    # Other rows whose notes may hold the user's words (what a purge would clear).
    contributed: list[StoredRow]
    opted_out_since: float | None


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The result of the database's own integrity and foreign-key checks."""

    schema_version: int
    code_version: int
    integrity: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the file is sound and its schema is the one this code writes."""
        return (
            self.integrity == ["ok"]
            and not self.foreign_keys
            and self.schema_version == self.code_version
        )


@runtime_checkable
class Inspector(Protocol):
    """The operator's read-only view of a store."""

    async def stats(self, thresholds: tuple[float, float], soon: tuple[float, float]) -> StoreStats:
        """Counts; ``thresholds`` and ``soon`` are (crude_before, summary_before) for now and
        for the end of the "near expiry" window."""
        ...

    async def row(self, key: str) -> StoredRow | None:
        """The row under ``key``, expired or not."""
        ...

    async def rows_of_channel(self, channel_id: int) -> list[StoredRow]:
        """Every row of a channel, any scope or persona."""
        ...

    async def holdings_of_user(self, user_id: int, erasure: Erasure = "complete") -> UserHoldings:
        """The user's own rows, the other rows whose notes a purge of the user under
        ``erasure`` would clear (they may hold the user's words), and the opt-out."""
        ...

    async def members(self, pin: Pin) -> list[int]:
        """Everyone whose words a prompt of ``pin``'s chain showed directly, up to its
        version."""
        ...

    async def preview_purge(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user (within ``server_id``, when given) would delete and
        clear now, by server: what ``ShortTermMemory.preview_purge`` counts."""
        ...

    async def count_expired(self, thresholds: tuple[float, float]) -> int:
        """Rows the janitor would delete now."""
        ...

    async def check(self) -> CheckReport:
        """Integrity and foreign-key checks, and the schema version."""
        ...

    async def schema_version(self) -> int:
        """The schema version the database records."""
        ...

    async def close(self) -> None:
        """Close the store."""
        ...


async def open_inspector(config: STMConfig, *, require_current: bool = True) -> Inspector:
    """The read-only view of the database ``config`` names; it must exist already.

    Raises NoDatabase when there is none, StoreError when it cannot serve, and (with
    ``require_current``) when its schema is older than this code's.
    """
    if is_postgres_url(config.database):
        from .postgres import PostgresStore

        return await PostgresStore.open_existing(
            config.database,
            lock_timeout_ms=config.busy_timeout_ms,
            statement_timeout_ms=config.statement_timeout_ms,
            require_current=require_current,
        )
    from .sqlite import SQLiteStore

    return await SQLiteStore.open_existing(
        config.database, busy_timeout_ms=config.busy_timeout_ms, require_current=require_current
    )


async def open_migrating(config: STMConfig) -> Inspector:
    """The store ``config`` names, opened as the library opens it: created if missing,
    migrated to this code's schema."""
    from . import open_store

    store = await open_store(config)
    assert isinstance(store, Inspector)  # both stores answer the operator's reads
    return store


def file_missing(config: STMConfig) -> bool:
    """True when ``config`` names a database file that does not exist (opening the store
    would create it)."""
    database = config.database
    if database == ":memory:" or is_postgres_url(database):
        return False
    return not os.path.isfile(database)


def shown(database: str) -> str:
    """The ``database`` setting as output may show it: a URL without its passwords."""
    return redact_url(database)
