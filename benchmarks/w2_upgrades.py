"""W2 upgrade storm: many callers upgrade summaries at once; count acknowledged durable upgrades.

An upgrade is acknowledged when ``run_tool`` returns success, which it does
only after the transaction holding it has committed (``synchronous = FULL``).
Each call gets a new TurnContext, as each generation does: a successful
upgrade disables the tool for the rest of its turn. Every caller works in its
own channel of one server, so one upgrade writes two rows (the user-scoped
and the server-scoped entry) and their contributor rows.

The floor is what a careful engineer would write with sqlite3 alone: the same
callers queue the same rows (upsert of both entries, their contributor rows
replaced) and one writer thread commits everything queued as one
transaction, also ``synchronous = FULL``; a caller hears back after the commit
holding its rows. The old floor (one transaction per upgrade) is kept, labelled.

The two-process rows start two OS processes upgrading against one database
at once (half the callers each) and report their combined rate; the four-process
rows, four (a quarter each): every process reads in the rows the others upgrade in
the server its callers share.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
import time
from collections.abc import Callable, Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from subprocess import PIPE
from typing import Any

from .common import LargestFile, scratch_dir, text
from .database import POSTGRES_SCHEMES, Skipped, memory_database, open_memory, skipped

SERVER = 7
ROOT = Path(__file__).resolve().parent.parent


def summary(caller: int, n: int) -> str:
    return text(f"s{caller}.{n}", 1000)


# -- this project ----------------------------------------------------------------
async def _upgrade_storm(memory: Any, first: int, callers: int, per_caller: int) -> dict[str, Any]:
    """``callers`` concurrent callers, numbered from ``first``, each upgrading in turn."""
    from stm import TurnContext

    failures = 0

    async def caller(c: int) -> None:
        nonlocal failures
        for n in range(per_caller):
            ctx = TurnContext(user_id=100 + c, channel_id=5000 + c, server_id=SERVER)
            result = await memory.run_tool(ctx, {"summary": summary(c, n)})
            failures += not result.success

    base = memory.stats
    wall = time.time()
    start = time.perf_counter()
    await asyncio.gather(*(caller(c) for c in range(first, first + callers)))
    seconds = time.perf_counter() - start
    stats = memory.stats
    return {
        "started": wall,
        "ended": wall + seconds,
        "seconds": seconds,
        "upgrades": callers * per_caller,
        "failed": failures,
        "commits": stats["commits"] - base["commits"],
        "round_trips": stats["round_trips"] - base["round_trips"],
    }


async def _wrong_rows(database: str, callers: int, per_caller: int) -> int:
    """Callers whose server row does not hold their last summary, read back after a reopen."""
    from stm._keys import server_key

    memory = await open_memory(database)
    try:
        wrong = 0
        for c in range(callers):
            entry = await memory.get_entry(server_key(SERVER, 5000 + c))
            wrong += entry is None or entry.summary != summary(c, per_caller - 1)
    finally:
        await memory.close()
    return wrong


def _wal_watch(database: str) -> LargestFile:
    """The largest size of an SQLite database's WAL during the storm (nothing to watch on
    PostgreSQL: the file's name does not exist there, and it reads as empty)."""
    return LargestFile(f"{database}-wal")


def _largest_wal(wal: LargestFile) -> dict[str, Any]:
    return {} if wal.path.startswith(POSTGRES_SCHEMES) else {"largest_wal_bytes": wal.largest}


def _rates(result: dict[str, Any]) -> dict[str, Any]:
    upgrades = result["upgrades"]
    result["upgrades_per_s"] = upgrades / result["seconds"]
    result["upgrades_per_commit"] = upgrades / max(result["commits"], 1)
    return result


async def run_stm(callers: int, per_caller: int, backend: str = "sqlite") -> dict[str, Any]:
    async with memory_database(backend, "w2") as database:
        memory = await open_memory(database)
        try:
            with _wal_watch(database) as wal:
                result = await _upgrade_storm(memory, 0, callers, per_caller)
        finally:
            await memory.close()
        result |= _largest_wal(wal)
        result["wrong_rows"] = await _wrong_rows(database, callers, per_caller)
    result["processes"] = 1
    return _rates(result)


async def run_stm_postgresql(callers: int, per_caller: int) -> dict[str, Any]:
    return await run_stm(callers, per_caller, backend="postgresql")


async def run_stm_processes(
    callers: int, per_caller: int, backend: str = "sqlite", processes: int = 2
) -> dict[str, Any]:
    """The callers split over ``processes`` OS processes on one database."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    share = callers // processes  # the callers of each process
    async with memory_database(backend, f"w2x{processes}") as database:
        children: list[asyncio.subprocess.Process] = []
        try:
            # Started one after the other: the first has created the schema before the
            # others open, as a further bot process would find it.
            for first in range(0, share * processes, share):
                child = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "benchmarks.w2_upgrades", "child", database,
                    str(first), str(share), str(per_caller),
                    cwd=ROOT, env=env, stdin=PIPE, stdout=PIPE,
                )  # fmt: skip
                children.append(child)
                assert child.stdout is not None
                if (await child.stdout.readline()).strip() != b"ready":
                    raise RuntimeError("a W2 child process failed to open the memory")
            for child in children:
                assert child.stdin is not None
                child.stdin.write(b"go\n")
                await child.stdin.drain()
            parts = []
            with _wal_watch(database) as wal:
                for child in children:
                    out, _ = await child.communicate()
                    if child.returncode != 0:
                        raise RuntimeError(f"a W2 child process exited with {child.returncode}")
                    parts.append(json.loads(out.decode().strip().splitlines()[-1]))
        finally:
            for child in children:
                if child.returncode is None:
                    child.kill()
                    await child.wait()
        wrong = await _wrong_rows(database, processes * share, per_caller)
    if any("skipped" in p for p in parts):
        raise Skipped(parts[0]["skipped"])
    seconds = max(p["ended"] for p in parts) - min(p["started"] for p in parts)
    result = {
        "seconds": seconds,
        "upgrades": sum(p["upgrades"] for p in parts),
        "failed": sum(p["failed"] for p in parts),
        "commits": sum(p["commits"] for p in parts),
        "round_trips": sum(p["round_trips"] for p in parts),
        "wrong_rows": wrong,
        "processes": processes,
        "per_process_upgrades_per_s": [p["upgrades"] / p["seconds"] for p in parts],
        **_largest_wal(wal),
    }
    return _rates(result)


async def run_stm_postgresql_two_processes(callers: int, per_caller: int) -> dict[str, Any]:
    return await run_stm_processes(callers, per_caller, backend="postgresql")


async def run_stm_four_processes(callers: int, per_caller: int) -> dict[str, Any]:
    return await run_stm_processes(callers, per_caller, processes=4)


async def run_stm_postgresql_four_processes(callers: int, per_caller: int) -> dict[str, Any]:
    return await run_stm_processes(callers, per_caller, backend="postgresql", processes=4)


async def _child(database: str, first: int, callers: int, per_caller: int) -> None:
    try:
        memory = await open_memory(database)
    except Skipped as exc:
        print("ready", flush=True)
        sys.stdin.readline()
        print(json.dumps(skipped(str(exc))))
        return
    try:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
        result = await _upgrade_storm(memory, first, callers, per_caller)
    finally:
        await memory.close()
    print(json.dumps(result))


# -- the floors: sqlite3 with the same rows ------------------------------------------------
# The same table and indexes as the library's, so each upsert maintains as much.
FLOOR_SCHEMA = """
CREATE TABLE memories (
    id INTEGER PRIMARY KEY, key TEXT NOT NULL UNIQUE, scope TEXT NOT NULL,
    server_id INTEGER, user_id INTEGER, channel_id INTEGER NOT NULL, persona_id INTEGER,
    categories TEXT NOT NULL DEFAULT '{}', summary TEXT,
    turns_since_refresh INTEGER NOT NULL DEFAULT 0, updated_at REAL NOT NULL
);
CREATE INDEX memories_by_channel ON memories (channel_id);
CREATE INDEX memories_by_user ON memories (user_id, server_id);
CREATE INDEX memories_by_group ON memories (scope, server_id, user_id, persona_id, updated_at);
CREATE INDEX memories_by_updated ON memories (updated_at);
CREATE TABLE contributors (
    user_id INTEGER NOT NULL,
    memory_id INTEGER NOT NULL REFERENCES memories (id) ON DELETE CASCADE,
    PRIMARY KEY (user_id, memory_id)
) WITHOUT ROWID;
CREATE INDEX contributors_by_memory ON contributors (memory_id);
"""
UPSERT = (
    "INSERT INTO memories (key, scope, server_id, user_id, channel_id, summary, updated_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET summary = excluded.summary, "
    "turns_since_refresh = 0, updated_at = excluded.updated_at RETURNING id"
)

Row = tuple[str, str, int | None, int | None, int, str, float]


def _floor_db(folder: Path) -> sqlite3.Connection:
    db = sqlite3.connect(folder / "floor.sqlite3", isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.executescript(FLOOR_SCHEMA)
    return db


def _upgrade_rows(c: int, n: int) -> list[Row]:
    """The two rows one upgrade writes: the caller's user-scoped and server-scoped entry."""
    user, channel, text_, now = 100 + c, 5000 + c, summary(c, n), time.time()
    return [
        (f"shortterm:user:{user}:{channel}", "user", SERVER, user, channel, text_, now),
        (f"shortterm:server:{SERVER}:{channel}", "server", SERVER, None, channel, text_, now),
    ]


def _write(db: sqlite3.Connection, rows: list[Row], user: int) -> None:
    for row in rows:
        (memory_id,) = db.execute(UPSERT, row).fetchone()
        db.execute("DELETE FROM contributors WHERE memory_id = ?", (memory_id,))
        db.execute("INSERT INTO contributors (user_id, memory_id) VALUES (?, ?)", (user, memory_id))


def _floor_wrong(db: sqlite3.Connection, callers: int, per_caller: int) -> int:
    stored = dict(db.execute("SELECT key, summary FROM memories WHERE scope = 'server'"))
    return sum(
        stored.get(f"shortterm:server:{SERVER}:{5000 + c}") != summary(c, per_caller - 1)
        for c in range(callers)
    )


async def run_sqlite3_group(callers: int, per_caller: int) -> dict[str, Any]:
    loop = asyncio.get_running_loop()
    queue: list[tuple[list[Row], int, asyncio.Future[None]]] = []
    wake = asyncio.Event()
    commits = 0
    with scratch_dir() as folder, ThreadPoolExecutor(1) as thread:
        db = _floor_db(folder)

        def commit(batch: list[tuple[list[Row], int]]) -> None:
            db.execute("BEGIN IMMEDIATE")
            try:
                for rows, user in batch:
                    _write(db, rows, user)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

        async def writer() -> None:
            nonlocal commits
            while True:
                await wake.wait()
                wake.clear()
                if not queue:
                    return  # woken with nothing queued: the callers are done
                batch = queue[:]
                del queue[:]
                try:
                    # On its own thread, so callers keep queueing while the commit syncs.
                    await loop.run_in_executor(thread, commit, [(r, u) for r, u, _ in batch])
                except Exception as exc:
                    for _, _, future in batch:
                        future.set_exception(exc)
                else:
                    commits += 1
                    for _, _, future in batch:
                        future.set_result(None)
                if queue:
                    wake.set()

        async def caller(c: int) -> None:
            for n in range(per_caller):
                future = loop.create_future()
                queue.append((_upgrade_rows(c, n), 100 + c, future))
                wake.set()
                await future

        try:
            task = asyncio.create_task(writer())
            start = time.perf_counter()
            await asyncio.gather(*(caller(c) for c in range(callers)))
            seconds = time.perf_counter() - start
            wake.set()
            await task
            wrong = _floor_wrong(db, callers, per_caller)
        finally:
            db.close()
    upgrades = callers * per_caller
    return {
        "upgrades_per_s": upgrades / seconds,
        "seconds": seconds,
        "upgrades": upgrades,
        "commits": commits,
        "upgrades_per_commit": upgrades / max(commits, 1),
        "wrong_rows": wrong,
        "processes": 1,
    }


async def run_sqlite3_per_row(callers: int, per_caller: int) -> dict[str, Any]:
    # One writer, one transaction per upgrade: what a caller pays without group commit.
    upgrades = callers * per_caller
    with scratch_dir() as folder:
        db = _floor_db(folder)
        try:
            start = time.perf_counter()
            for n in range(per_caller):
                for c in range(callers):
                    db.execute("BEGIN IMMEDIATE")
                    _write(db, _upgrade_rows(c, n), 100 + c)
                    db.execute("COMMIT")
            seconds = time.perf_counter() - start
            wrong = _floor_wrong(db, callers, per_caller)
        finally:
            db.close()
    return {
        "upgrades_per_s": upgrades / seconds,
        "seconds": seconds,
        "upgrades": upgrades,
        "commits": upgrades,
        "upgrades_per_commit": 1.0,
        "wrong_rows": wrong,
        "processes": 1,
    }


SYSTEMS: dict[str, Callable[[int, int], Coroutine[Any, Any, dict[str, Any]]]] = {
    "stm": run_stm,
    "stm-2proc": run_stm_processes,
    "stm-postgresql": run_stm_postgresql,
    "stm-postgresql-2proc": run_stm_postgresql_two_processes,
    "stm-4proc": run_stm_four_processes,
    "stm-postgresql-4proc": run_stm_postgresql_four_processes,
    "sqlite3-group": run_sqlite3_group,
    "sqlite3-per-row": run_sqlite3_per_row,
}


def run(system: str, quick: bool) -> dict[str, Any]:
    callers, per_caller = (20, 20) if quick else (100, 100)
    try:
        result = asyncio.run(SYSTEMS[system](callers, per_caller))
    except Skipped as exc:
        result = skipped(str(exc))
    result["callers"], result["per_caller"] = callers, per_caller
    return result


if __name__ == "__main__":
    # A child of a two-process row: child DATABASE FIRST CALLERS PER_CALLER.
    if sys.argv[1:2] != ["child"]:
        raise SystemExit("usage: python -m benchmarks.w2_upgrades child DATABASE FIRST N PER")
    database, first, count, per = sys.argv[2], *map(int, sys.argv[3:6])
    asyncio.run(_child(database, first, count, per))
