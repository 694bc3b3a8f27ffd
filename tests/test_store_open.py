"""Opening one new database (a SQLite file, a PostgreSQL schema) from many processes at
the same moment."""

from __future__ import annotations

import multiprocessing
import sqlite3
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from store_open_worker import open_in_step, open_urls_in_step

from stm.store._schema import POSTGRES_MIGRATIONS
from stm.store._sqlite import MIGRATIONS, SQLiteStore

PROCESSES = 4
pytestmark = pytest.mark.process


def in_step(target: Callable[..., None], args: tuple[Any, ...], trials: int) -> list[Any]:
    """Run ``target(*args, barrier, results)`` in PROCESSES spawned processes, which open
    a database each trial at the same moment; every report they put, once each exited."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(PROCESSES)
    results = context.Queue()
    workers = [
        context.Process(target=target, args=(*args, barrier, results)) for _ in range(PROCESSES)
    ]
    for worker in workers:
        worker.start()
    reports = [results.get(timeout=120) for _ in range(PROCESSES * trials)]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return reports


@pytest.mark.parametrize(
    "trials",
    # A file that another process is switching to WAL answers "locked" without waiting
    # for the busy timeout about once in 300 openings: the slow run sees that case.
    [40, pytest.param(300, marks=pytest.mark.slow)],
)
def test_processes_opening_a_new_file_at_once_all_succeed(tmp_path: Path, trials: int) -> None:
    """Any number of processes may create and migrate one new file at the same moment:
    none fails, every one sees the newest schema, and exactly one (the one that made the
    schema) reports the file as empty at open."""
    base = str(tmp_path / "race")
    reports = in_step(open_in_step, (base, trials), trials)
    errors = [r for r in reports if r[3] is not None]
    assert errors == []
    assert {version for *_, version, _ in reports} == {len(MIGRATIONS)}
    creators = Counter(trial for trial, empty, _, _ in reports if empty)
    assert creators == Counter(range(trials))
    for trial in range(trials):
        with sqlite3.connect(f"{base}-{trial}.sqlite3") as db:
            assert db.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
            assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("store_kind", ["postgres"], indirect=True)
def test_processes_creating_a_new_postgres_schema_at_once_all_succeed(
    fresh_database: Callable[[str], str],
) -> None:
    """Any number of processes may create and migrate one new PostgreSQL schema at the same
    moment: none fails and every one sees the newest schema (the advisory lock lets one
    migrate while the others wait for it)."""
    trials = 10
    urls = [fresh_database(f"race{trial}") for trial in range(trials)]
    reports = in_step(open_urls_in_step, (urls,), trials)
    assert [r for r in reports if r[2] is not None] == []
    assert {version for _, version, _ in reports} == {len(POSTGRES_MIGRATIONS)}


async def test_reopening_an_empty_file_is_not_empty_at_open(db_path: Path) -> None:
    """Only the open that created the schema may assume it holds every row: a file that
    already existed may be open in another process, even with no row in it."""
    first = await SQLiteStore.open(str(db_path))
    second = await SQLiteStore.open(str(db_path))
    try:
        assert first.empty_at_open
        assert not second.empty_at_open
    finally:
        await first.close()
        await second.close()
    third = await SQLiteStore.open(str(db_path))
    await third.close()
    assert not third.empty_at_open


async def test_in_memory_database_is_empty_at_open() -> None:
    """':memory:' is private to its connection: nothing can exist that it did not write."""
    store = await SQLiteStore.open(":memory:")
    await store.close()
    assert store.empty_at_open


async def test_a_file_at_an_older_version_is_migrated_in_one_step(db_path: Path) -> None:
    """A file made by the first schema gains the later ones and keeps its rows."""
    with sqlite3.connect(db_path) as db:
        db.executescript(MIGRATIONS[0])
        db.execute(
            "INSERT INTO short_term_memories (key, scope, channel_id, updated_at) "
            "VALUES ('shortterm:server:1:2', 'server', 2, 1.0)"
        )
        db.execute("PRAGMA user_version = 1")
    store = await SQLiteStore.open(str(db_path))
    try:
        assert not store.empty_at_open
        assert await store.schema_version() == len(MIGRATIONS)
        assert await store.execute("SELECT key, version FROM short_term_memories") == [
            ("shortterm:server:1:2", 0)
        ]
    finally:
        await store.close()


@pytest.mark.parametrize("version", range(len(MIGRATIONS) + 1))
def test_migrate_is_idempotent(tmp_path: Path, version: int) -> None:
    """Running the migration again on a file at any version changes nothing."""
    from stm.store._sqlite import migrate

    db = sqlite3.connect(tmp_path / "m.sqlite3", isolation_level=None)
    try:
        for number in range(version):
            db.executescript(MIGRATIONS[number])
        db.execute(f"PRAGMA user_version = {version}")
        assert migrate(db) == version
        schema = db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall()
        assert migrate(db) == len(MIGRATIONS)
        assert db.execute("SELECT sql FROM sqlite_master ORDER BY name").fetchall() == schema
    finally:
        db.close()
