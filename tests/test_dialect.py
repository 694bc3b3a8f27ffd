"""The two stores' spellings: a list of values is one statement text whatever its length, so
what SQLite keeps of the statements it prepared stays bounded as users come and go."""

from __future__ import annotations

import gc
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from helpers import stored_row

from benchmarks.churn import sqlite_memory
from stm import ShortTermMemory, STMConfig
from stm._errors import StoreError
from stm._keys import user_key
from stm.store._base import LoadRows, StoredRow, Touch
from stm.store._dialect import POSTGRES, SQLITE
from stm.store._sqlite import _check_json, migrate, run_batch
from stm.testing import ctx, turn


def _sqlite_library() -> Any:
    """The SQLite library the ``sqlite3`` module uses, for ``sqlite3_memory_used`` (the
    churn benchmark's reading of it)."""
    library = sqlite_memory()
    if library is None:
        pytest.skip("this build of SQLite exports no sqlite3_memory_used")
    return library


@pytest.mark.parametrize("dialect", [SQLITE, POSTGRES], ids=["sqlite", "postgres"])
def test_a_list_is_one_statement_whatever_its_length(dialect: Any) -> None:
    """``in_list`` and ``table`` spell 1, 7 or 3,000 values with one text each: the values
    are parameters, never part of the statement."""
    lists = {dialect.in_list("key", "keys", [f"k{n}" for n in range(size)], "text[]")[0]
             for size in (1, 7, 3000)}  # fmt: skip
    pair = (("parent", "bigint"), ("child", "bigint"))
    tables = {dialect.table("pairs", pair, [(n, n + 1) for n in range(size)])[0]
              for size in (1, 7, 3000)}  # fmt: skip
    assert len(lists) == 1
    assert len(tables) == 1


def _rows(count: int) -> tuple[StoredRow, ...]:
    """Rows of ``count`` users of one channel, identity only (as write-behind writes them)."""
    return tuple(
        stored_row(user_key(10_000 + n, 5), 1, 10_000 + n, 5, summary=None, updated_at=1e9)
        for n in range(count)
    )


def test_a_batch_larger_than_sqlites_variable_limit_is_written_and_read(tmp_path: Path) -> None:
    """A write-behind batch, and a read, of more keys than SQLite binds in one statement
    (its variable limit, here lowered to 999 as older builds have it) work: the keys are one
    parameter."""
    db = sqlite3.connect(tmp_path / "m.db", isolation_level=None)
    try:
        migrate(db)
        db.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
        rows = _rows(2_500)
        run_batch(db, [Touch(rows, crude_before=0.0, summary_before=0.0)])
        (found,) = run_batch(db, [LoadRows(tuple(r.key for r in rows), 0.0, 0.0)])
        assert isinstance(found, list)
        assert sorted(r.key for r in found) == sorted(r.key for r in rows)
    finally:
        db.close()


async def test_sqlite_memory_stays_flat_as_users_come_and_go(tmp_path: Path) -> None:
    """Distinct users through a cache of 20 keys, each capturing in a server channel and
    reading a DM of their own, their captures written behind in batches of a new size each
    time: SQLite's own memory does not grow with them.

    Each batch of write-behind once spelled its keys as a parameter each, a statement
    of every size that SQLite prepared and kept (about 200 bytes a key): ~3,900 users grew
    it by about 1.8 MiB here. The page cache is held to 16 pages, so that the file growing
    under it does not count; the bound leaves room for a connection the store opens
    meanwhile (its checkpointer's, about 120 KB, once the WAL holds 4 MiB)."""
    library = _sqlite_library()
    config = STMConfig(database=str(tmp_path / "m.db"), cache_max_keys=20)
    async with ShortTermMemory.open(config) as memory:
        await memory.store.execute("PRAGMA cache_size = 16")
        user = 0

        async def users(count: int) -> None:
            nonlocal user
            for _ in range(count):
                user += 1
                await memory.capture(turn(ctx(user=user, channel=500 + user % 7), f"hi {user}"))
                await memory.build_context(ctx(user=user, channel=900_000 + user, server=None))
            await memory.flush()  # one write-behind batch of this round's keys

        for size in range(1, 11):  # every statement a turn uses, prepared once
            await users(size)
        gc.collect()
        before = library.sqlite3_memory_used()
        for size in range(11, 91):
            await users(size)
        gc.collect()
        grown = library.sqlite3_memory_used() - before
    assert user > 4_000
    assert grown < 512 * 1024, f"SQLite's memory grew by {grown:,} bytes over {user:,} users"


class _NoJson:
    """A connection to a build of SQLite without its JSON functions."""

    def execute(self, sql: str) -> Any:
        raise sqlite3.OperationalError("no such table: json_each")


def test_a_sqlite_without_json_functions_is_refused_at_open() -> None:
    """Lists are bound as JSON arrays: a build of SQLite without ``json_each`` is named at
    open, not found out at the first write-behind batch."""
    with pytest.raises(StoreError, match="has no JSON functions"):
        _check_json(_NoJson(), "m.db")  # type: ignore[arg-type]
