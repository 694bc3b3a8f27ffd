"""What a store tells an operator: counts, one user's or channel's rows, health checks.

These reads serve the operator command line (``python -m stm``), never the turn
path; a store opened for them is read-only and is never created or migrated.
"""

from __future__ import annotations

import os

from .._config import STMConfig
from .._redact import redact_url
from . import is_postgres_url
from ._base import Inspector

__all__ = [
    "file_missing",
    "open_inspector",
    "open_migrating",
    "shown",
]


async def open_inspector(config: STMConfig, *, require_current: bool = True) -> Inspector:
    """The read-only view of the database ``config`` names; it must exist already.

    Raises NoDatabase when there is none, StoreError when it cannot serve, and (with
    ``require_current``) when its schema is older than this code's.
    """
    if is_postgres_url(config.database):
        from ._postgres import PostgresStore

        return await PostgresStore.open_existing(
            config.database,
            lock_timeout_ms=config.busy_timeout_ms,
            statement_timeout_ms=config.statement_timeout_ms,
            require_current=require_current,
        )
    from ._sqlite import SQLiteStore

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
