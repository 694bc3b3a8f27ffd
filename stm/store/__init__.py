"""Durable stores: the protocol (``base``), SQLite, PostgreSQL, and choosing one from the
settings."""

from __future__ import annotations

from ..config import STMConfig
from .base import Store

__all__ = ["Store", "is_postgres_url", "open_store"]


def is_postgres_url(database: str) -> bool:
    """True when ``database`` names a PostgreSQL server rather than an SQLite file."""
    return database.startswith(("postgresql://", "postgres://"))


async def open_store(config: STMConfig) -> Store:
    """Open the store that ``STM_DATABASE`` names: a ``postgresql://`` URL, else SQLite."""
    if is_postgres_url(config.database):
        from .postgres import PostgresStore

        return await PostgresStore.open(
            config.database,
            busy_timeout_ms=config.busy_timeout_ms,
            statement_timeout_ms=config.statement_timeout_ms,
        )
    from .sqlite import SQLiteStore

    return await SQLiteStore.open(config.database, busy_timeout_ms=config.busy_timeout_ms)
