"""The SQLite store: WAL, migrations by user_version, clear errors for unusable files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from conftest import Opener, ctx, turn

from stm import SchemaVersionError, ShortTermMemory, STMConfig, StoreError
from stm.store.sqlite import MIGRATIONS, SQLiteStore


async def test_new_file_is_wal_and_at_the_latest_version(db_path: Path) -> None:
    """A new database is created in WAL mode, with secure delete, at the newest schema."""
    store = await SQLiteStore.open(str(db_path))
    try:
        assert await store.schema_version() == len(MIGRATIONS)
        assert (await store.execute("PRAGMA journal_mode"))[0][0] == "wal"
        assert (await store.execute("PRAGMA secure_delete"))[0][0] == 1
        tables = {r[0] for r in await store.execute("SELECT name FROM sqlite_master")}
        assert "short_term_memories" in tables
    finally:
        await store.close()


async def test_reopening_does_not_migrate_again(db_path: Path) -> None:
    """Migrations are forward-only and run once."""
    for _ in range(2):
        store = await SQLiteStore.open(str(db_path))
        await store.close()
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)


async def test_newer_schema_is_refused(db_path: Path) -> None:
    """A file from a newer version is refused with a clear error, and left untouched."""
    with sqlite3.connect(db_path) as db:
        db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 3}")
    with pytest.raises(SchemaVersionError, match="newer"):
        await ShortTermMemory.open(STMConfig(database=str(db_path)))
    with sqlite3.connect(db_path) as db:
        assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS) + 3


async def test_corrupt_file_is_refused(db_path: Path) -> None:
    """A file that is not a database fails at start with a message naming it."""
    db_path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StoreError, match=str(db_path.name)):
        await ShortTermMemory.open(STMConfig(database=str(db_path)))


async def test_folder_is_created(tmp_path: Path) -> None:
    """The database folder is created when missing."""
    path = tmp_path / "deep" / "er" / "stm.sqlite3"
    async with ShortTermMemory.open(STMConfig(database=str(path))) as memory:
        await memory.capture(turn(ctx(), "x"))
    assert path.exists()


async def test_in_memory_database(tmp_path: Path) -> None:
    """':memory:' works for tests and throwaway bots."""
    async with ShortTermMemory.open(STMConfig(database=":memory:")) as memory:
        await memory.capture(turn(ctx(), "x"))
        assert (await memory.run_tool(ctx(), {"summary": "in memory"})).success
        await memory.flush()


async def test_postgres_url_is_a_clear_error() -> None:
    """A PostgreSQL URL is refused with a message naming the setting."""
    with pytest.raises(ValueError, match="STM_DATABASE"):
        await ShortTermMemory.open(STMConfig(database="postgresql://localhost/stm"))


async def test_open_is_awaitable_and_a_context_manager(
    open_memory: Opener, config: STMConfig
) -> None:
    """Both forms of open work, and the context manager closes."""
    async with ShortTermMemory.open(config) as memory:
        assert not memory.closed
    assert memory.closed
    awaited = await open_memory()
    assert isinstance(awaited, ShortTermMemory)
