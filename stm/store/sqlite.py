"""The SQLite store: WAL, forward-only migrations, secure delete, crypto-shredding.

This is the only module that speaks SQL to SQLite. One connection, on one
thread of its own, serves the whole process; the facade's writer hands it one
batch at a time, so no two tasks ever share a transaction. The functions
below the class run on that thread (and take a plain ``sqlite3`` connection,
so tests can inspect the very statements they issue).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

from ..errors import SchemaVersionError, StoreError
from ..expiry import EXPIRED_SQL
from . import shred
from .base import (
    DeleteChannel,
    DeleteExpired,
    LoadRecent,
    LoadRows,
    Op,
    PurgeUser,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    Scrub,
    StoredRow,
    Touch,
)

__all__ = ["MIGRATIONS", "SQLiteStore", "apply", "migrate", "run_batch", "statements"]

_T = TypeVar("_T")

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE short_term_memories (
        id INTEGER PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL CHECK (scope IN ('server', 'user')),
        server_id INTEGER,
        user_id INTEGER,
        channel_id INTEGER NOT NULL,
        persona_id INTEGER,
        parent_channel_id INTEGER,
        channel_name TEXT,
        server_name TEXT,
        channel_private INTEGER NOT NULL DEFAULT 0,
        categories TEXT NOT NULL DEFAULT '{}',
        summary TEXT,
        turns_since_refresh INTEGER NOT NULL DEFAULT 0,
        last_refreshed_turn INTEGER NOT NULL DEFAULT 0,
        updated_at REAL NOT NULL
    );
    CREATE INDEX stm_by_channel ON short_term_memories (channel_id);
    CREATE INDEX stm_by_user ON short_term_memories (user_id, server_id);
    CREATE INDEX stm_by_group
        ON short_term_memories (scope, server_id, user_id, persona_id, updated_at);
    CREATE INDEX stm_by_updated ON short_term_memories (updated_at);
    CREATE TABLE short_term_memory_contributors (
        user_id INTEGER NOT NULL,
        memory_id INTEGER NOT NULL REFERENCES short_term_memories (id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, memory_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_contributors_by_memory ON short_term_memory_contributors (memory_id);
    CREATE TABLE stm_server_settings (
        server_id INTEGER PRIMARY KEY,
        settings TEXT NOT NULL
    );
    CREATE TABLE stm_user_opt_outs (
        user_id INTEGER PRIMARY KEY,
        since REAL NOT NULL
    );
    """,
    shred.MIGRATION,
)

_COLUMNS = (
    "key, scope, server_id, user_id, channel_id, persona_id, parent_channel_id, channel_name, "
    "server_name, channel_private, summary, categories, turns_since_refresh, "
    "last_refreshed_turn, updated_at"
)
_IDENTITY = (
    "INSERT INTO short_term_memories (key, scope, server_id, user_id, channel_id, persona_id, "
    "parent_channel_id, channel_name, server_name, channel_private, turns_since_refresh, "
    "last_refreshed_turn, updated_at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (key) DO UPDATE SET "
    "parent_channel_id = excluded.parent_channel_id, "
    "channel_name = coalesce(excluded.channel_name, channel_name), "
    "server_name = coalesce(excluded.server_name, server_name), "
    "channel_private = excluded.channel_private, "
    "updated_at = max(updated_at, excluded.updated_at)"
)
_TOUCH = (
    _IDENTITY + ", turns_since_refresh = excluded.turns_since_refresh, "
    "last_refreshed_turn = excluded.last_refreshed_turn"
)
_SAVE = (
    f"INSERT INTO short_term_memories ({_COLUMNS}, key_slot) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) "
    "ON CONFLICT (key) DO UPDATE SET "
    "parent_channel_id = excluded.parent_channel_id, "
    "channel_name = coalesce(excluded.channel_name, channel_name), "
    "server_name = coalesce(excluded.server_name, server_name), "
    "channel_private = excluded.channel_private, "
    "summary = excluded.summary, categories = excluded.categories, "
    "turns_since_refresh = excluded.turns_since_refresh, "
    "last_refreshed_turn = excluded.last_refreshed_turn, key_slot = excluded.key_slot, "
    "updated_at = max(updated_at, excluded.updated_at) RETURNING id"
)
# Rows past their TTL, by the rule the cache applies (stm/expiry.py): a row exactly at
# its TTL goes in the same janitor pass as its cache entry.
_EXPIRED = EXPIRED_SQL
_LIVE = f"NOT ({_EXPIRED})"


class SQLiteStore:
    """A store in one SQLite file (or ``:memory:``).

    The connection lives on one dedicated thread, and a whole batch runs there
    in one hop: a transaction of many statements costs the event loop one
    wake-up, not one per statement.
    """

    def __init__(self, executor: ThreadPoolExecutor, connection: sqlite3.Connection, path: str):
        self._executor = executor
        self._db = connection
        self.path = path
        self.closed = False
        # True when the table held no row at open: nothing durable predates this process.
        self.empty_at_open = False

    @classmethod
    async def open(cls, path: str, *, busy_timeout_ms: int = 5000) -> SQLiteStore:
        """Open (creating if needed) and migrate the database at ``path``."""
        if path != ":memory:":
            try:
                await asyncio.to_thread(_make_folder, path)
            except OSError as exc:
                raise StoreError(f"cannot create the folder of {path!r}: {exc}") from exc
        executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stm-sqlite")
        loop = asyncio.get_running_loop()
        try:
            db = await loop.run_in_executor(executor, _connect, path, busy_timeout_ms)
        except sqlite3.Error as exc:
            executor.shutdown(wait=False)
            raise StoreError(f"cannot open short-term memory database {path!r}: {exc}") from exc
        except BaseException:
            executor.shutdown(wait=False)
            raise
        store = cls(executor, db, path)
        try:
            store.empty_at_open = await store._call(_prepare, db, path, busy_timeout_ms)
        except BaseException:
            await store.close()
            raise
        return store

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the connection's thread."""
        if self.closed:
            raise StoreError(f"short-term memory database {self.path!r} is closed")
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    async def schema_version(self) -> int:
        """The ``PRAGMA user_version`` of the file."""
        return int(await self._call(_scalar, self._db, "PRAGMA user_version"))

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction; one result per op."""
        return await self._call(run_batch, self._db, ops, self.path != ":memory:")

    async def load_server_settings(self) -> dict[int, str]:
        """Every stored server's settings JSON."""
        rows = await self._load("SELECT server_id, settings FROM stm_server_settings")
        return {int(server): str(settings) for server, settings in rows}

    async def load_opt_outs(self) -> set[int]:
        """Every user who opted out."""
        return {int(row[0]) for row in await self._load("SELECT user_id FROM stm_user_opt_outs")}

    async def _load(self, sql: str) -> list[tuple[Any, ...]]:
        # Start-up reads: a damaged file must surface as a StoreError naming it.
        try:
            return await self.execute(sql)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"short-term memory database {self.path!r} cannot be read: {exc}"
            ) from exc

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement outside the batch path (inspection, tests); return its rows."""
        return await self._call(_fetch, self._db, sql, params)

    async def close(self) -> None:
        """Close the connection."""
        if not self.closed:
            try:
                await asyncio.get_running_loop().run_in_executor(self._executor, self._db.close)
            finally:
                self.closed = True
                self._executor.shutdown(wait=False)


# -- on the connection's thread ------------------------------------------------------
def _connect(path: str, busy_timeout_ms: int) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)


def _scalar(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    row = db.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _fetch(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in db.execute(sql, params).fetchall()]


def _prepare(db: sqlite3.Connection, path: str, busy_timeout_ms: int) -> bool:
    """Set the connection up and migrate; True when the memories table is empty."""
    try:
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        mode = _scalar(db, "PRAGMA journal_mode = WAL")
        if path != ":memory:" and str(mode).lower() != "wal":
            raise StoreError(f"{path!r}: could not switch to WAL (journal_mode={mode})")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("PRAGMA foreign_keys = ON")
        db.execute("PRAGMA secure_delete = ON")
        migrate(db, path)
        _check_writable(db, path)
        return _scalar(db, "SELECT 1 FROM short_term_memories LIMIT 1") is None
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"short-term memory database {path!r} cannot be used: {exc}") from exc


def _check_writable(db: sqlite3.Connection, path: str) -> None:
    """Fail now rather than at the first write when the file can only be read (a read-only
    file opens without complaint)."""
    version = int(_scalar(db, "PRAGMA user_version"))
    try:
        db.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            return  # another process writes now: a passing lock, handled at run time
        raise
    try:
        db.execute(f"PRAGMA user_version = {version}")
    except sqlite3.OperationalError as exc:
        if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_READONLY:
            raise
        raise StoreError(f"short-term memory database {path!r} is read-only: {exc}") from exc
    finally:
        db.execute("ROLLBACK")


def migrate(db: sqlite3.Connection, path: str = "") -> None:
    """Bring the schema to the newest version, one transaction per migration."""
    version = int(_scalar(db, "PRAGMA user_version"))
    if version > len(MIGRATIONS):
        raise SchemaVersionError(
            f"{path!r} has schema version {version}, newer than this version of the "
            f"library understands ({len(MIGRATIONS)}); upgrade the library or use another file"
        )
    sealed = 0
    for number in range(version, len(MIGRATIONS)):
        db.execute("BEGIN IMMEDIATE")
        try:
            if MIGRATIONS[number] is shred.MIGRATION:
                _run_script(db, MIGRATIONS[number])
                sealed = shred.seal_legacy(db)
            else:
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        db.execute(statement)
            db.execute(f"PRAGMA user_version = {number + 1}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
    if sealed and _on_disk(db):
        # Once: the plain text written by earlier versions may survive in page gaps.
        db.execute("VACUUM")


def run_batch(db: sqlite3.Connection, ops: Sequence[Op], checkpoint: bool = True) -> list[object]:
    """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction; one result per op.

    A batch of only ``Scrub`` erases instead, outside any transaction."""
    if ops and all(isinstance(op, Scrub) for op in ops):
        if checkpoint and _on_disk(db):
            _erase(db)
        return [None] * len(ops)
    results: list[object] = []
    db.execute("BEGIN IMMEDIATE")
    try:
        for op in ops:
            results.append(apply(db, op))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return results


# How long erasing may wait for another connection's read transaction to end before it
# gives up (and is tried again later): the writer waits for the erasure.
ERASE_WAIT_MS = 20


def _erase(db: sqlite3.Connection) -> None:
    """Empty the WAL, whose old page images still hold destroyed keys, into the file.

    The cost is that of the pages written since the last checkpoint (at most the
    auto-checkpoint's 1000), whatever the size of the file."""
    timeout = int(_scalar(db, "PRAGMA busy_timeout"))
    db.execute(f"PRAGMA busy_timeout = {ERASE_WAIT_MS}")
    try:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        db.execute(f"PRAGMA busy_timeout = {timeout}")
    if busy:
        # Another connection reads an old snapshot: the WAL cannot be emptied yet.
        raise StoreError(
            "the WAL could not be emptied: another connection holds a read transaction"
        )


def _run_script(db: sqlite3.Connection, script: str) -> None:
    """Run each statement of ``script``."""
    for statement in statements(script):
        db.execute(statement)


def statements(script: str) -> list[str]:
    """The complete statements of ``script`` (a trigger's body holds semicolons, so
    splitting on them does not work)."""
    found, statement = [], ""
    for line in script.splitlines(keepends=True):
        statement += line
        if sqlite3.complete_statement(statement):
            if statement.strip(" \n\t;"):
                found.append(statement)
            statement = ""
    if statement.strip():
        raise ValueError(f"incomplete statement in a migration: {statement!r}")
    return found


def _on_disk(db: sqlite3.Connection) -> bool:
    return any(row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main")


def apply(db: sqlite3.Connection, op: Op) -> object:
    """Run one operation inside the caller's transaction."""
    match op:
        case Scrub():
            return None  # done after the commit: VACUUM cannot run inside a transaction
        case Touch(rows):
            known = [_identity_params(r) for r in rows if r.counters_known]
            unknown = [_identity_params(r) for r in rows if not r.counters_known]
            if known:
                db.executemany(_TOUCH, known)
            if unknown:
                db.executemany(_IDENTITY, unknown)
            return len(rows)
        case SaveDistilled(row):
            params = _row_params(row)
            # Distilled text is stored encrypted under the row's own key (see shred.py).
            sealed = shred.seal_params(db, row.key, row.summary, params[11])
            memory_id = _scalar(db, _SAVE, (*params[:10], *sealed[:2], *params[12:], sealed[2]))
            db.execute(
                "DELETE FROM short_term_memory_contributors WHERE memory_id = ?", (memory_id,)
            )
            db.executemany(
                "INSERT INTO short_term_memory_contributors (user_id, memory_id) VALUES (?, ?)",
                [(user, memory_id) for user in sorted(row.contributors)],
            )
            return memory_id
        case DeleteChannel(channel_id):
            cursor = db.execute(
                "DELETE FROM short_term_memories WHERE channel_id = ?", (channel_id,)
            )
            return cursor.rowcount
        case PurgeUser(user_id, server_id):
            return _purge_user(db, user_id, server_id)
        case DeleteExpired(crude_before, summary_before):
            cursor = db.execute(
                f"DELETE FROM short_term_memories WHERE {_EXPIRED}",
                {"crude": crude_before, "summary": summary_before},
            )
            return cursor.rowcount
        case LoadRows(keys, crude_before, summary_before):
            return _load_rows(db, keys, crude_before, summary_before)
        case LoadRecent():
            return _load_recent(db, op)
        case SaveServerSettings(server_id, settings_json):
            db.execute(
                "INSERT INTO stm_server_settings (server_id, settings) VALUES (?, ?) "
                "ON CONFLICT (server_id) DO UPDATE SET settings = excluded.settings",
                (server_id, settings_json),
            )
            return None
        case SaveOptOut(user_id, opted_out, at):
            if opted_out:
                db.execute(
                    "INSERT OR IGNORE INTO stm_user_opt_outs (user_id, since) VALUES (?, ?)",
                    (user_id, at),
                )
            else:
                db.execute("DELETE FROM stm_user_opt_outs WHERE user_id = ?", (user_id,))
            return None
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


def _purge_user(db: sqlite3.Connection, user_id: int, server_id: int | None) -> int:
    in_server = "" if server_id is None else " AND server_id = :server"
    params = {"user": user_id, "server": server_id}
    # "+scope" keeps the planner off stm_by_group, whose leading scope column would match
    # half the table; the user's own index finds the few rows.
    cursor = db.execute(
        f"DELETE FROM short_term_memories WHERE +scope = 'user' AND user_id = :user{in_server}",
        params,
    )
    removed = cursor.rowcount
    touched = (
        "SELECT c.memory_id FROM short_term_memory_contributors c "
        "JOIN short_term_memories m ON m.id = c.memory_id "
        f"WHERE c.user_id = :user{in_server.replace('server_id', 'm.server_id')}"
    )
    ids = [row[0] for row in db.execute(touched, params).fetchall()]
    if ids:
        marks = ",".join("?" * len(ids))
        db.execute(
            "UPDATE short_term_memories SET summary = NULL, categories = '{}' "
            f"WHERE id IN ({marks})",
            ids,
        )
        db.execute(f"DELETE FROM short_term_memory_contributors WHERE memory_id IN ({marks})", ids)
    return removed + len(ids)


def _load_rows(
    db: sqlite3.Connection, keys: Sequence[str], crude_before: float, summary_before: float
) -> list[StoredRow]:
    if not keys:
        return []
    params = {"crude": crude_before, "summary": summary_before}
    named = {f"k{i}": key for i, key in enumerate(keys)}
    where = "key IN (" + ",".join(f":k{i}" for i in range(len(keys))) + ")"
    db.execute(f"DELETE FROM short_term_memories WHERE {where} AND {_EXPIRED}", {**params, **named})
    return _select(db, f"SELECT id, {_COLUMNS} FROM short_term_memories WHERE {where}", named)


def _load_recent(db: sqlite3.Connection, op: LoadRecent) -> list[StoredRow]:
    params: dict[str, Any] = {
        "crude": op.crude_before,
        "summary": op.summary_before,
        "owner": op.owner_id,
        "server": op.server_id,
        "persona": op.persona_id,
        "limit": op.limit,
    }
    if op.scope == "server":
        where = "scope = 'server' AND server_id = :owner AND user_id IS NULL"
    else:
        where = "scope = 'user' AND server_id IS :server AND user_id = :owner"
    where += " AND persona_id IS :persona AND channel_private = 0"
    return _select(
        db,
        f"SELECT id, {_COLUMNS} FROM short_term_memories WHERE {where} AND {_LIVE} "
        "ORDER BY updated_at DESC LIMIT :limit",
        params,
    )


def _select(db: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[StoredRow]:
    rows = db.execute(sql, params).fetchall()
    if not rows:
        return []
    ids = [row[0] for row in rows]
    marks = ",".join("?" * len(ids))
    contributors: dict[int, set[int]] = {}
    for memory_id, user in db.execute(
        "SELECT memory_id, user_id FROM short_term_memory_contributors "
        f"WHERE memory_id IN ({marks})",
        ids,
    ):
        contributors.setdefault(memory_id, set()).add(user)
    keys = shred.keys_of(db, ids)
    return [
        _row_from(row, frozenset(contributors.get(row[0], ())), keys.get(row[0])) for row in rows
    ]


def _make_folder(path: str) -> None:
    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _identity_params(row: StoredRow) -> tuple[Any, ...]:
    return (
        row.key, row.scope, row.server_id, row.user_id, row.channel_id, row.persona_id,
        row.parent_channel_id, row.channel_name, row.server_name, int(row.channel_private),
        row.turns_since_refresh, row.last_refreshed_turn, row.updated_at,
    )  # fmt: skip


def _row_params(row: StoredRow) -> tuple[Any, ...]:
    return (
        row.key, row.scope, row.server_id, row.user_id, row.channel_id, row.persona_id,
        row.parent_channel_id, row.channel_name, row.server_name, int(row.channel_private),
        row.summary, json.dumps(row.categories, ensure_ascii=False), row.turns_since_refresh,
        row.last_refreshed_turn, row.updated_at,
    )  # fmt: skip


def _row_from(row: Any, contributors: frozenset[int], secret: bytes | None = None) -> StoredRow:
    (_, key, scope, server_id, user_id, channel_id, persona_id, parent, channel_name,
     server_name, private, summary, categories, turns, refreshed, updated_at) = row  # fmt: skip
    summary = shred.open_text(secret, key, summary)
    categories = shred.open_text(secret, key, categories)
    loaded = json.loads(categories) if categories else {}
    return StoredRow(
        key=key,
        scope="server" if scope == "server" else "user",
        server_id=server_id,
        user_id=user_id,
        channel_id=channel_id,
        persona_id=persona_id,
        parent_channel_id=parent,
        channel_name=channel_name,
        server_name=server_name,
        channel_private=bool(private),
        summary=summary,
        categories={str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {},
        contributors=contributors,
        turns_since_refresh=int(turns),
        last_refreshed_turn=int(refreshed),
        updated_at=float(updated_at),
    )
