"""Durable stores: the ``Store`` protocol, and opening the SQLite or PostgreSQL store the
settings name.

A host passes a store to ``ShortTermMemory.open(config, store=...)``: one opened here, or
one wrapping it (``stm.testing.FaultyStore`` is such a wrapper). Writing a new kind of
store is a change to the library, not to a host: see ``docs/extending-the-store.md``.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from .._config import STMConfig
from .._errors import NoDatabase, StoreError
from ._base import NoteVersion, Store

__all__ = ["NoteVersion", "Store", "check_database", "is_postgres_url", "open_store"]


def is_postgres_url(database: str) -> bool:
    """True when ``database`` names a PostgreSQL server rather than an SQLite file."""
    return database.startswith(("postgresql://", "postgres://"))


async def open_store(config: STMConfig) -> Store:
    """Open the store that ``STM_DATABASE`` names: a ``postgresql://`` URL, else SQLite."""
    if is_postgres_url(config.database):
        from ._postgres import PostgresStore

        return await PostgresStore.open(
            config.database,
            busy_timeout_ms=config.busy_timeout_ms,
            statement_timeout_ms=config.statement_timeout_ms,
        )
    from ._sqlite import SQLiteStore

    return await SQLiteStore.open(config.database, busy_timeout_ms=config.busy_timeout_ms)


async def check_database(config: STMConfig) -> None:
    """Raise the ``StoreError`` that opening ``STM_DATABASE`` would meet, creating nothing.

    For a host to stop before logging in: an existing database is opened read-only, which
    finds a corrupt file or a newer schema (``SchemaVersionError``); a missing file needs
    only a folder this user can create it in. The memory's own open creates it, and so
    knows that it starts empty.
    """
    from ._inspect import file_missing, open_inspector

    if config.database == ":memory:":
        return
    if file_missing(config):
        await asyncio.to_thread(_check_creatable, config.database)
        return
    try:
        inspector = await open_inspector(config, require_current=False)
    except NoDatabase:
        return  # a PostgreSQL database without the schema yet: the memory creates it
    await inspector.close()


def _check_creatable(database: str) -> None:
    path = Path(database).expanduser()
    if path.is_dir():
        raise StoreError(f"{path} is a folder, not a database file")
    folder = path.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create {path}: {folder} is not a folder this user can write to")
