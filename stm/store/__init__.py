"""Durable stores: the protocol (``base``), the SQLite store, and choosing one from the settings."""

from __future__ import annotations

from ..config import STMConfig
from ..errors import ConfigError
from .base import Store
from .sqlite import SQLiteStore

__all__ = ["Store", "open_store"]


async def open_store(config: STMConfig) -> Store:
    """Open the store that ``STM_DATABASE`` names."""
    if config.database.startswith(("postgresql://", "postgres://")):
        raise ConfigError(
            "STM_DATABASE: PostgreSQL is not supported by this version; "
            "use an SQLite path or ':memory:'"
        )
    return await SQLiteStore.open(config.database, busy_timeout_ms=config.busy_timeout_ms)
