"""The SQLite store: WAL, forward-only migrations, secure delete, crypto-shredding.

This is the only module that speaks SQL to SQLite. One aiosqlite connection,
on the thread aiosqlite gives it, serves the whole process; the facade's
writer hands it one batch at a time, so no two tasks ever share a transaction.
The functions below the class run on that thread (and take a plain
``sqlite3`` connection, so tests can inspect the very statements they issue).

A whole batch runs there as one function: one hop between the event loop and
the thread per transaction, whatever its number of statements (one await per
statement costs several times more under an upgrade storm). aiosqlite's
public methods each run one statement; they are all built on
``Connection._execute(fn, *args)``, which runs any function on the
connection's thread in queue order, and this store uses it the same way
(``tests/test_store.py`` fails if a release of aiosqlite drops it).

Several processes may open the same file at once. Opening migrates inside
one ``BEGIN IMMEDIATE`` transaction that reads ``user_version`` only once it
holds the write lock, so of many processes opening a new file exactly one
creates the schema and the others find it made. SQLite lets one writer
commit at a time, so the change feed's positions (an ``AUTOINCREMENT`` key,
never reused, even after pruning) commit in order.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import sqlite3
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from ..errors import NoDatabase, SchemaVersionError, StoreError
from ..expiry import DISTILLED_SQL, EXPIRED_SQL
from ..lineage import Erasure, Pin, Range
from . import chains, shred
from .base import (
    GUARD_KINDS_SQL,
    ROW_COLUMNS,
    SELECT_TAIL,
    Change,
    ChangeKind,
    CheckReport,
    DeleteChannel,
    DeleteExpired,
    FeedPage,
    ForgetMessages,
    ForgetServer,
    LoadChannelKeys,
    LoadDepartures,
    LoadRecent,
    LoadRows,
    MarkDeparture,
    Op,
    Overtaken,
    PreviewPurge,
    PurgePreview,
    PurgeUser,
    Saved,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    Scrub,
    ServerChannels,
    StoredRow,
    StoreStats,
    SweepPurge,
    Touch,
    UserHoldings,
    deleted_since,
    overtaking,
    row_from_columns,
)
from .chains import live_of, upgrades

__all__ = [
    "MIGRATIONS",
    "SQLiteStore",
    "apply",
    "migrate",
    "prune_changes",
    "read_changes",
    "run_batch",
    "statements",
]

_T = TypeVar("_T")
# How often wait_for_change looks at data_version.
POLL_SECONDS = 0.05

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
    # The change feed other processes follow, and a version per row that it names.
    """
    ALTER TABLE short_term_memories ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE stm_changes (
        position INTEGER PRIMARY KEY AUTOINCREMENT,
        kind TEXT NOT NULL,
        key TEXT,
        version INTEGER,
        channel_id INTEGER,
        user_id INTEGER,
        server_id INTEGER,
        origin TEXT NOT NULL,
        at REAL NOT NULL
    );
    CREATE TABLE stm_feed (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        pruned_through INTEGER NOT NULL
    );
    INSERT INTO stm_feed (id, pruned_through) VALUES (1, 0);
    """,
    # Provenance as chains of versions (see lineage.py and store/chains.py) instead of a
    # set of contributors per row. Each row that holds distilled content becomes the
    # first version of a chain of its own whose members are its contributors: a purge
    # clears what it cleared before.
    f"""
    CREATE TABLE stm_chains (
        id INTEGER PRIMARY KEY,
        live_key TEXT NOT NULL,
        server_id INTEGER,
        head INTEGER NOT NULL,
        ended INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_chains_ended ON stm_chains (id) WHERE ended = 1;
    CREATE TABLE stm_chain_members (
        member INTEGER NOT NULL,
        chain_id INTEGER NOT NULL,
        first INTEGER NOT NULL,
        PRIMARY KEY (member, chain_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_members_by_chain ON stm_chain_members (chain_id);
    CREATE TABLE stm_chain_edges (
        parent INTEGER NOT NULL,
        child INTEGER NOT NULL,
        own INTEGER NOT NULL,
        parent_version INTEGER NOT NULL,
        child_version INTEGER NOT NULL,
        PRIMARY KEY (parent, child, own, parent_version)
    ) WITHOUT ROWID;
    CREATE INDEX stm_edges_by_child ON stm_chain_edges (child);
    CREATE TABLE stm_purge_ranges (
        position INTEGER NOT NULL,
        chain_id INTEGER NOT NULL,
        from_version INTEGER NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (position, chain_id)
    ) WITHOUT ROWID;
    CREATE INDEX stm_ranges_pending ON stm_purge_ranges (chain_id) WHERE done = 0;
    ALTER TABLE short_term_memories ADD COLUMN chain_id INTEGER;
    ALTER TABLE short_term_memories ADD COLUMN chain_version INTEGER;
    CREATE INDEX stm_by_chain ON short_term_memories (chain_id, chain_version);
    INSERT INTO stm_chains (id, live_key, server_id, head)
        SELECT id, key, server_id, 1 FROM short_term_memories WHERE {DISTILLED_SQL};
    UPDATE short_term_memories SET chain_id = id, chain_version = 1 WHERE {DISTILLED_SQL};
    INSERT INTO stm_chain_members (member, chain_id, first)
        SELECT c.user_id, c.memory_id, 1 FROM short_term_memory_contributors c
        JOIN short_term_memories m ON m.id = c.memory_id WHERE m.chain_id IS NOT NULL;
    DROP TABLE short_term_memory_contributors;
    """,
    # Purges plan their ranges in the store, round after round of edges followed.
    """
    ALTER TABLE stm_purge_ranges ADD COLUMN expanded INTEGER NOT NULL DEFAULT 1;
    """,  # A purge is planned in steps, each its own transaction: its plan's state.
    """
    CREATE TABLE stm_purges (
        position INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL,
        server_id INTEGER,
        erasure TEXT NOT NULL,
        planned INTEGER NOT NULL,
        cursor INTEGER NOT NULL
    );
    CREATE INDEX stm_purges_unplanned ON stm_purges (position) WHERE planned = 0;
    """,  # Servers that removed the bot, cleared once their grace period is over.
    """
    CREATE TABLE stm_departures (
        server_id INTEGER PRIMARY KEY,
        left_at REAL NOT NULL
    );
    """,  # How many distilled rows a server holds, counted from an index (a purge's share).
    """
    CREATE INDEX stm_distilled_by_server ON short_term_memories (server_id)
        WHERE chain_id IS NOT NULL;
    """,
)

_COLUMNS = ROW_COLUMNS
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
_SAVE_INTO = (
    f"INSERT INTO short_term_memories ({_COLUMNS}, key_slot, chain_id, chain_version, version) "
)
_SAVE_ON_CONFLICT = (
    "ON CONFLICT (key) DO UPDATE SET "
    "parent_channel_id = excluded.parent_channel_id, "
    "channel_name = coalesce(excluded.channel_name, channel_name), "
    "server_name = coalesce(excluded.server_name, server_name), "
    "channel_private = excluded.channel_private, "
    "summary = excluded.summary, categories = excluded.categories, "
    "turns_since_refresh = excluded.turns_since_refresh, "
    "last_refreshed_turn = excluded.last_refreshed_turn, key_slot = excluded.key_slot, "
    "chain_id = excluded.chain_id, chain_version = excluded.chain_version, "
    "updated_at = max(updated_at, excluded.updated_at), version = version + 1 "
    "RETURNING id, version"
)
# The upsert of a row, by which of its values are NULL: written into the statement, not
# bound (binding None makes the sqlite3 module look for an adapter, which costs more
# than the rest of the value). A few shapes in all: the statement cache holds them.
_SAVES: dict[tuple[bool, ...], str] = {}


def _save_statement(params: tuple[Any, ...]) -> tuple[str, list[Any]]:
    """The upsert of the row of ``params`` (in ``_COLUMNS`` order, then ``key_slot``,
    ``chain_id`` and ``chain_version``), and the values it binds."""
    nulls = tuple([value is None for value in params])
    sql = _SAVES.get(nulls)
    if sql is None:
        values = ",".join("NULL" if null else "?" for null in nulls)
        sql = _SAVES[nulls] = f"{_SAVE_INTO}VALUES ({values},1) {_SAVE_ON_CONFLICT}"
    return sql, [value for value in params if value is not None]


_FEED = (
    "INSERT INTO stm_changes (kind, key, version, channel_id, user_id, server_id, origin, at) "
    "VALUES (?,?,?,?,?,?,?,?)"
)
# An upgrade's change, without the NULLs of the columns it leaves empty (see _write_feed).
_FEED_UPGRADE = (
    "INSERT INTO stm_changes (kind, key, version, origin, at) VALUES ('upgrade',?,?,?,?)"
)
_FEED_COLUMNS = "position, kind, origin, at, key, version, channel_id, user_id, server_id"
# A change as the feed stores it, before it has a position.
_Pending = tuple[ChangeKind, str | None, int | None, int | None, int | None, int | None]
# Rows past their TTL, by the rule the cache applies (stm/expiry.py): a row exactly at
# its TTL goes in the same janitor pass as its cache entry.
_EXPIRED = EXPIRED_SQL
_LIVE = f"NOT ({_EXPIRED})"


class SQLiteStore:
    """A store in one SQLite file (or ``:memory:``).

    The connection lives on aiosqlite's thread, and a whole batch runs there
    in one hop: a transaction of many statements costs the event loop one
    wake-up, not one per statement.
    """

    def __init__(self, connection: aiosqlite.Connection, path: str):
        self._connection = connection
        # The sqlite3 connection under it, for the functions that run on its thread.
        self._db: sqlite3.Connection = connection._conn
        self.path = path
        self.closed = False
        self.origin = secrets.token_hex(8)
        # See Store.empty_at_open: this open created the schema, or the file is private.
        self.empty_at_open = False
        self._data_version = 0
        # Touched on the connection's thread only.
        self._known = KnownKeys()
        # The read connection of previews, opened by the first.
        self._reader: aiosqlite.Connection | None = None
        self._reader_lock = asyncio.Lock()

    @classmethod
    async def open(cls, path: str, *, busy_timeout_ms: int = 5000) -> SQLiteStore:
        """Open (creating if needed) and migrate the database at ``path``."""
        if path != ":memory:":
            try:
                await asyncio.to_thread(_make_folder, path)
            except OSError as exc:
                raise StoreError(f"cannot create the folder of {path!r}: {exc}") from exc
        connection = aiosqlite.connect(path, isolation_level=None, timeout=busy_timeout_ms / 1000)
        store = await cls._connected(
            connection, path, lambda exc: f"cannot open short-term memory database {path!r}: {exc}"
        )
        db = store._db
        try:
            created = await store._call(_prepare, db, path, busy_timeout_ms)
            store.empty_at_open = created or path == ":memory:"
            store._data_version = int(await store._call(_scalar, db, "PRAGMA data_version"))
        except BaseException:
            await store.close()
            raise
        return store

    @classmethod
    async def _connected(
        cls,
        connection: aiosqlite.Connection,
        path: str,
        describe: Callable[[sqlite3.Error], str],
    ) -> SQLiteStore:
        """Start ``connection``; if it fails, close it and raise StoreError as ``describe`` says."""
        try:
            await connection
        except sqlite3.Error as exc:
            await connection.close()
            raise StoreError(describe(exc)) from exc
        except BaseException:
            await connection.close()
            raise
        return cls(connection, path)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the connection's thread."""
        if self.closed:
            raise StoreError(f"short-term memory database {self.path!r} is closed")
        on_thread = cast(Callable[..., Awaitable[_T]], self._connection._execute)
        return await on_thread(fn, *args)

    async def schema_version(self) -> int:
        """The ``PRAGMA user_version`` of the file."""
        return int(await self._call(_scalar, self._db, "PRAGMA user_version"))

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction; one result per op."""
        return await self._call(
            run_batch, self._db, ops, self.path != ":memory:", self.origin, self._known
        )

    @property
    def held_keys(self) -> int:
        """The row keys remembered for upgrades (``KnownKeys``)."""
        return len(self._known.keys)

    async def forget_keys(self) -> None:
        """Drop the remembered row keys now, on the connection's thread (a batch may be
        using them there)."""
        await self._call(self._known.clear)

    async def current_position(self) -> int:
        """The position of the newest committed change (0 when there was none)."""
        return await self._call(_current_position, self._db)

    async def read_changes(self, after: int, limit: int = 1000) -> FeedPage:
        """The committed changes after position ``after``, oldest first, at most ``limit``."""
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return await self._call(read_changes, self._db, after, limit)

    async def prune_changes(self, *, older_than: float, keep_last: int = 0) -> int:
        """Delete changes committed before ``older_than``, except the newest ``keep_last``."""
        return await self._call(prune_changes, self._db, older_than, max(0, keep_last))

    async def poll_changed(self) -> bool:
        """True when another connection committed since the previous call (``data_version``)."""
        version = int(await self._call(_scalar, self._db, "PRAGMA data_version"))
        changed, self._data_version = version != self._data_version, version
        return changed

    async def wait_for_change(self, seconds: float) -> bool:
        """Poll ``data_version`` until another connection commits, at most ``seconds``.

        SQLite has no notifications; a poll is one cheap pragma on the store's thread.
        """
        deadline = time.monotonic() + max(0.0, seconds)
        while True:
            if await self.poll_changed():
                return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            await asyncio.sleep(min(POLL_SECONDS, left))

    async def purge_ranges(self, position: int) -> tuple[Range, ...] | None:
        """The ranges the purge at feed ``position`` cleared; None while it is planned."""
        return await self._call(_run, self._db, chains.planned_ranges(position))

    async def pending_sweeps(self) -> list[int]:
        """Positions of purges whose ranges still hold rows to clear."""
        return await self._call(_run, self._db, chains.pending_sweeps())

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
        return await self._call(_fetch_anything, self._db, self._known, sql, params)

    async def preview_aside(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now, planned off the write path:
        on a read connection of its own, in temporary tables, so that no other work waits
        for it (a ``:memory:`` database has one connection: there, between batches)."""
        if self.path == ":memory:":
            return await self._call(_run, self._db, chains.preview(user_id, server_id, erasure))
        if self.closed:
            raise StoreError(f"short-term memory database {self.path!r} is closed")
        async with self._reader_lock:
            try:
                if self._reader is None:
                    uri = _readonly_uri(self.path)
                    self._reader = await aiosqlite.connect(uri, uri=True, isolation_level=None)
                on_thread = cast(Callable[..., Awaitable[PurgePreview]], self._reader._execute)
                db = self._reader._conn
                return await on_thread(_preview_aside, db, user_id, server_id, erasure)
            except sqlite3.Error as exc:
                raise StoreError(_explain(self.path, exc)) from exc

    async def close(self) -> None:
        """Close the connection."""
        if not self.closed:
            self.closed = True
            if self._reader is not None:
                await self._reader.close()
            await self._connection.close()

    # -- the operator's read-only view (``inspect.Inspector``) ------------------------
    @classmethod
    async def open_existing(
        cls, path: str, *, busy_timeout_ms: int = 5000, require_current: bool = True
    ) -> SQLiteStore:
        """Open a database that must already exist, read-only; never create or migrate it.

        Raises StoreError saying why a file cannot serve: missing, locked, corrupt, not a
        short-term memory database, or (with ``require_current``) of an older schema;
        SchemaVersionError when a newer version of the library wrote it.
        """
        if path == ":memory:":
            raise StoreError("':memory:' is private to the process that opens it: name a file")
        if not await asyncio.to_thread(os.path.isfile, path):
            raise NoDatabase(f"no short-term memory database at {path!r} (nothing was created)")
        connection = aiosqlite.connect(
            _readonly_uri(path), uri=True, isolation_level=None, timeout=busy_timeout_ms / 1000
        )
        store = await cls._connected(connection, path, lambda exc: _explain(path, exc))
        db = store._db
        try:
            await store._call(_check_existing, db, path, busy_timeout_ms, require_current)
        except BaseException:
            await store.close()
            raise
        return store

    async def stats(self, thresholds: tuple[float, float], soon: tuple[float, float]) -> StoreStats:
        """Counts; ``thresholds`` and ``soon`` are (crude_before, summary_before) for now and
        for the end of the "near expiry" window."""
        return await self._inspect(_stats, self.path, thresholds, soon)

    async def row(self, key: str) -> StoredRow | None:
        """The row under ``key``, expired or not."""
        rows = await self._inspect(_select, f"{_SELECT} WHERE key = :key", {"key": key})
        return rows[0] if rows else None

    async def rows_of_channel(self, channel_id: int) -> list[StoredRow]:
        """Every row of a channel, any scope or persona, newest first."""
        sql = f"{_SELECT} WHERE channel_id = :channel ORDER BY updated_at DESC, key"
        return await self._inspect(_select, sql, {"channel": channel_id})

    async def holdings_of_user(self, user_id: int, erasure: Erasure = "complete") -> UserHoldings:
        """The user's own rows, the other rows a purge of the user would clear, and the
        opt-out."""
        return await self._inspect(_holdings, user_id, erasure)

    async def members(self, pin: Pin) -> list[int]:
        """Everyone whose words a prompt of ``pin``'s chain showed directly, to its version."""
        return await self._inspect(_run, chains.members(pin))

    async def preview_purge(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now, by server."""
        return await self._inspect(_run, chains.inspect_preview(user_id, server_id, erasure))

    async def count_expired(self, thresholds: tuple[float, float]) -> int:
        """Rows the janitor would delete now."""
        params = {"crude": thresholds[0], "summary": thresholds[1]}
        sql = f"SELECT count(*) FROM short_term_memories WHERE {_EXPIRED}"
        return await self._inspect(_count, sql, params)

    async def check(self) -> CheckReport:
        """``PRAGMA integrity_check`` and ``foreign_key_check``, and the schema version."""
        return await self._inspect(_check)

    async def _inspect(self, fn: Callable[..., _T], *args: Any) -> _T:
        try:
            return await self._call(fn, self._db, *args)
        except sqlite3.DatabaseError as exc:
            raise StoreError(_explain(self.path, exc)) from exc


# -- on the connection's thread ------------------------------------------------------
def _preview_aside(
    db: sqlite3.Connection, user_id: int, server_id: int | None, erasure: Erasure
) -> PurgePreview:
    """``chains.preview`` in one read transaction, its plan in temporary tables that the
    rollback takes away."""
    db.execute("BEGIN")
    try:
        for table in chains.PREVIEW_TABLES:
            db.execute(table.format(end=""))
        return _run(db, chains.preview(user_id, server_id, erasure))
    finally:
        db.execute("ROLLBACK")


def _scalar(db: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    row = db.execute(sql, params).fetchone()
    return None if row is None else row[0]


def _fetch_anything(
    db: sqlite3.Connection, known: KnownKeys, sql: str, params: Sequence[Any]
) -> list[tuple[Any, ...]]:
    known.clear()  # the statement may change keys
    return _fetch(db, sql, params)


def _fetch(db: sqlite3.Connection, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in db.execute(sql, params).fetchall()]


def _prepare(db: sqlite3.Connection, path: str, busy_timeout_ms: int) -> bool:
    """Set the connection up and migrate; True when this call created the schema."""
    deadline = time.monotonic() + busy_timeout_ms / 1000
    while True:
        try:
            db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            mode = _scalar(db, "PRAGMA journal_mode = WAL")
            if path != ":memory:" and str(mode).lower() != "wal":
                raise StoreError(f"{path!r}: could not switch to WAL (journal_mode={mode})")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA secure_delete = ON")
            created = migrate(db, path) == 0
            _check_writable(db, path)
            return created
        except sqlite3.OperationalError as exc:
            # A file another process is creating or switching to WAL can answer "locked"
            # without waiting for the busy timeout: each step above is idempotent, so wait
            # and start again, within the same timeout.
            if _busy(exc) and time.monotonic() < deadline:
                time.sleep(0.01)
                continue
            raise StoreError(f"short-term memory database {path!r} cannot be used: {exc}") from exc
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"short-term memory database {path!r} cannot be used: {exc}") from exc


def _busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    return code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


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


def migrate(db: sqlite3.Connection, path: str = "") -> int:
    """Bring the schema to the newest version; return the version found.

    Every pending migration runs in one ``BEGIN IMMEDIATE`` transaction, and
    ``user_version`` is read again inside it, under the write lock: a process that
    waited for another's migration finds it done, never half done. A file already
    at the newest version needs no lock (the version only ever grows), so opening
    it works while another process writes.
    """
    version = _checked_version(db, path)
    if version == len(MIGRATIONS):
        return version
    db.execute("BEGIN IMMEDIATE")
    try:
        version = _checked_version(db, path)
        sealed = 0
        for number in range(version, len(MIGRATIONS)):
            _run_script(db, MIGRATIONS[number])
            if MIGRATIONS[number] is shred.MIGRATION:
                sealed = shred.seal_legacy(db)
        if version < len(MIGRATIONS):
            db.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    if sealed and _on_disk(db):
        # Once: the plain text written by earlier versions may survive in page gaps.
        db.execute("VACUUM")
    return version


def _checked_version(db: sqlite3.Connection, path: str) -> int:
    version = int(_scalar(db, "PRAGMA user_version"))
    if version > len(MIGRATIONS):
        raise SchemaVersionError(
            f"{path!r} has schema version {version}, newer than this version of the library "
            f"understands ({len(MIGRATIONS)}); upgrade the library or use another file"
        )
    return version


def run_batch(
    db: sqlite3.Connection,
    ops: Sequence[Op],
    checkpoint: bool = True,
    origin: str = "",
    known: KnownKeys | None = None,
) -> list[object]:
    """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction; one result per op.

    The changes they make go to the feed in the same transaction, in op order. A batch of
    only ``Scrub`` erases instead, outside any transaction. ``known``, kept from batch to
    batch on ``db``, saves upgrades reading the keys of rows they upgraded before."""
    if ops and all(isinstance(op, Scrub) for op in ops):
        if checkpoint and _on_disk(db):
            _erase(db)
        return [None] * len(ops)
    results: list[object] = []
    feed = _Feed(db, origin, time.time())
    db.execute("BEGIN IMMEDIATE")
    try:
        memo = known.usable(db, ops) if known is not None else None
        index = 0
        while index < len(ops):
            if isinstance(ops[index], SaveDistilled):
                # A run of upgrades (an upgrade storm's whole batch) shares its reads.
                end = index + 1
                while end < len(ops) and isinstance(ops[end], SaveDistilled):
                    end += 1
                saves = cast(Sequence[SaveDistilled], ops[index:end])
                results.extend(_save_many(db, saves, feed, memo))
                index = end
                continue
            results.append(apply(db, ops[index], feed, memo))
            index += 1
        feed.flush()
        db.execute("COMMIT")
    except BaseException:
        if known is not None:
            known.clear()  # it may describe what the rollback undid
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return results


class _Feed:
    """The changes of one batch, written in op order: together at the end, except where
    an operation needs its own change's position now (a purge records its ranges by it)."""

    def __init__(self, db: sqlite3.Connection, origin: str, at: float) -> None:
        self.db, self.origin, self.at = db, origin, at
        self.pending: list[_Pending] = []

    def append(self, change: _Pending) -> None:
        self.pending.append(change)

    def extend(self, changes: Iterable[_Pending]) -> None:
        self.pending.extend(changes)

    def now(self, change: _Pending) -> int:
        """Write what is pending and ``change``; return ``change``'s position."""
        self.flush()
        row = self.db.execute(f"{_FEED} RETURNING position", (*change, self.origin, self.at))
        return int(row.fetchone()[0])

    def flush(self) -> None:
        if self.pending:
            _write_feed(self.db, self.pending, self.origin, self.at)
            self.pending = []


# Operations that change no row's key (upgrades keep ``known`` exact themselves). Any
# other, a delete above all, makes ``known`` start over.
_KEEPS_KEYS = (
    SaveDistilled,
    Touch,
    LoadRecent,
    LoadChannelKeys,
    SaveServerSettings,
    SaveOptOut,
    PreviewPurge,
)


class KnownKeys:
    """The live keys of recently upgraded rows (by row key), with their ciphers, as this
    connection last wrote or read them: an upgrade of the same row then neither reads its
    key nor sets up a cipher for it again.

    Exact, or empty: it is dropped when another connection committed since this one's
    last batch (``PRAGMA data_version``), when a batch holds an operation that may change
    keys otherwise (a delete, a read that deletes expired rows), when a batch fails, and
    when anything else runs SQL on the connection (``SQLiteStore.execute``).
    """

    LIMIT = 20_000  # rows remembered; the oldest go first

    def __init__(self) -> None:
        self.keys: dict[str, shred.LiveKey] = {}
        self._data_version = -1

    def clear(self) -> None:
        self.keys.clear()

    def usable(self, db: sqlite3.Connection, ops: Sequence[Op]) -> KnownKeys | None:
        """Self, made exact for a batch of ``ops`` that has begun; None when the batch must
        not use it (it is then empty, and stays so)."""
        version = int(_scalar(db, "PRAGMA data_version"))
        if version != self._data_version:
            self._data_version = version
            self.clear()
        if not all(isinstance(op, _KEEPS_KEYS) for op in ops):
            self.clear()
            return None
        keys = self.keys
        while len(keys) > self.LIMIT:
            del keys[next(iter(keys))]
        return self


def _run(db: sqlite3.Connection, procedure: chains.Procedure[_T]) -> _T:
    """Run one of ``chains``' procedures on this connection."""
    result: Any = None
    try:
        while True:
            step = procedure.send(result)
            if step.mode == "many":
                params = cast(Sequence[Mapping[str, Any]], step.params)
                result = db.executemany(step.sql, params) if params else None
                continue
            cursor = db.execute(step.sql, cast(Mapping[str, Any], step.params))
            if step.mode == "one":
                result = cursor.fetchone()
            elif step.mode == "all":
                result = cursor.fetchall()
            elif step.mode == "count":
                result = cursor.rowcount
            else:
                result = None
    except StopIteration as done:
        return cast(_T, done.value)


def apply(
    db: sqlite3.Connection,
    op: Op,
    changes: _Feed | list[_Pending] | None = None,
    known: KnownKeys | None = None,
) -> object:
    """Run one operation inside the caller's transaction; add the changes it makes to the
    feed (``changes``: the batch's feed, or a list of pending changes when run alone)."""
    feed: _Feed | list[_Pending] = [] if changes is None else changes
    match op:
        case Scrub():
            return None  # done after the commit: VACUUM cannot run inside a transaction
        case Touch():
            return _touch(db, op, feed, known)
        case SaveDistilled():
            own = feed if isinstance(feed, _Feed) else _Feed(db, "", time.time())
            results = _save_many(db, [op], own)
            if not isinstance(feed, _Feed):
                feed.extend(own.pending)
            return results[0]
        case ForgetMessages(channel_id):
            kind: ChangeKind = "edit_messages" if op.edited else "delete_messages"
            feed.append((kind, op.feed_key(), None, channel_id, None, None))
            return len(op.message_ids)
        case MarkDeparture(server_id, left_at):
            if left_at is None:
                db.execute("DELETE FROM stm_departures WHERE server_id = ?", (server_id,))
            else:
                db.execute(
                    "INSERT INTO stm_departures (server_id, left_at) VALUES (?, ?) "
                    "ON CONFLICT (server_id) DO NOTHING",
                    (server_id, left_at),
                )
            return None
        case LoadDepartures():
            rows = db.execute("SELECT server_id, left_at FROM stm_departures").fetchall()
            return {int(server): float(at) for server, at in rows}
        case ServerChannels(server_id):
            rows = db.execute(
                "SELECT DISTINCT channel_id FROM short_term_memories WHERE server_id = ?",
                (server_id,),
            ).fetchall()
            return sorted(int(row[0]) for row in rows)
        case ForgetServer(server_id):
            db.execute("DELETE FROM stm_server_settings WHERE server_id = ?", (server_id,))
            db.execute("DELETE FROM stm_departures WHERE server_id = ?", (server_id,))
            feed.append(("settings", None, None, None, None, server_id))
            return None
        case DeleteChannel(channel_id):
            gone = db.execute(
                "DELETE FROM short_term_memories WHERE channel_id = ? RETURNING key, chain_id",
                (channel_id,),
            ).fetchall()
            _run(db, chains.left(gone))
            feed.append(("clear_channel", None, None, channel_id, None, None))
            return len(gone)
        case PurgeUser(user_id, server_id, erasure):
            change: _Pending = ("purge_user", None, None, None, user_id, server_id)
            if isinstance(feed, _Feed):
                position = feed.now(change)
            else:
                feed.append(change)
                position = 0
            return _run(db, chains.purge(user_id, server_id, erasure, position))
        case SweepPurge(position):
            return _run(db, chains.sweep(position))
        case PreviewPurge(user_id, server_id, erasure):
            return _run(db, chains.preview(user_id, server_id, erasure))
        case DeleteExpired(crude_before, summary_before):
            gone = db.execute(
                f"DELETE FROM short_term_memories WHERE {_EXPIRED} RETURNING key, chain_id",
                {"crude": crude_before, "summary": summary_before},
            ).fetchall()
            _run(db, chains.left(gone))
            feed.extend(("expire", key, None, None, None, None) for key, _ in gone)
            _run(db, chains.collect())
            return len(gone)
        case LoadRows(keys, crude_before, summary_before):
            return _load_rows(db, keys, crude_before, summary_before, feed)
        case LoadRecent():
            return _load_recent(db, op)
        case LoadChannelKeys(channel_id, crude_before, summary_before):
            return [
                key
                for (key,) in db.execute(
                    f"SELECT key FROM short_term_memories WHERE channel_id = :channel "
                    f"AND {_LIVE} ORDER BY key",
                    {"channel": channel_id, "crude": crude_before, "summary": summary_before},
                )
            ]
        case SaveServerSettings(server_id, settings_json):
            db.execute(
                "INSERT INTO stm_server_settings (server_id, settings) VALUES (?, ?) "
                "ON CONFLICT (server_id) DO UPDATE SET settings = excluded.settings",
                (server_id, settings_json),
            )
            feed.append(("settings", None, None, None, None, server_id))
            return None
        case SaveOptOut(user_id, opted_out, at):
            if opted_out:
                db.execute(
                    "INSERT OR IGNORE INTO stm_user_opt_outs (user_id, since) VALUES (?, ?)",
                    (user_id, at),
                )
            else:
                db.execute("DELETE FROM stm_user_opt_outs WHERE user_id = ?", (user_id,))
            feed.append(("opt_out", None, None, None, user_id, None))
            return None
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


def _touch(
    db: sqlite3.Connection, op: Touch, feed: _Feed | list[_Pending], known: KnownKeys | None
) -> int:
    """Write behind identity rows and counters, never over what others deleted or what
    expired (see ``Touch``)."""
    rows = op.rows
    if op.crude_before is not None and op.summary_before is not None and rows:
        # An expired row is absent: activity starts a new one, it does not revive the old.
        named = {f"k{i}": row.key for i, row in enumerate(rows)}
        where = "key IN (" + ",".join(f":k{i}" for i in range(len(rows))) + ")"
        gone = db.execute(
            f"DELETE FROM short_term_memories WHERE {where} AND {_EXPIRED} RETURNING key, chain_id",
            {"crude": op.crude_before, "summary": op.summary_before, **named},
        ).fetchall()
        _run(db, chains.left(gone))
        feed.extend(("expire", key, None, None, None, None) for key, _ in gone)
        if known is not None:
            for key, _ in gone:
                known.keys.pop(key, None)
    if op.after is not None and rows:
        origin = feed.origin if isinstance(feed, _Feed) else ""
        deletes = [
            Change(*row)
            for row in db.execute(
                f"SELECT {_FEED_COLUMNS} FROM stm_changes WHERE position > ? "
                "AND kind IN ('clear_channel', 'purge_user') AND origin != ? ORDER BY position",
                (op.after, origin),
            )
        ]
        if deletes:
            rows = tuple(row for row in rows if not deleted_since(row, deletes))
    known_rows = [_identity_params(r) for r in rows if r.counters_known]
    unknown = [_identity_params(r) for r in rows if not r.counters_known]
    if known_rows:
        db.executemany(_TOUCH, known_rows)
    if unknown:
        db.executemany(_IDENTITY, unknown)
    return len(rows)


def _save_many(
    db: sqlite3.Connection,
    saves: Sequence[SaveDistilled],
    feed: _Feed,
    known: KnownKeys | None = None,
) -> list[object]:
    """A run of upgrades, in order; one result per save (``Saved``, or ``Overtaken``).

    The guards share one read of the feed's deletes; the saves of one upgrade (one
    lineage) are one version of their chain."""
    results: list[object] = [None] * len(saves)
    guards = [save.guard for save in saves if save.guard is not None]
    deletes: list[Change] = []
    ranges: dict[int, dict[int, int] | None] = {}
    pruned_through = 0
    if guards:
        after = min(guard.after for guard in guards)
        pruned_through = int(_scalar(db, "SELECT pruned_through FROM stm_feed"))
        rows = db.execute(
            f"SELECT {_FEED_COLUMNS} FROM stm_changes WHERE position > ? "
            f"AND kind IN {GUARD_KINDS_SQL} ORDER BY position",
            (after,),
        )
        deletes = [Change(*row) for row in rows]
        ranges = _run(db, chains.guard_ranges(guards, deletes))
    # Distilled text is stored encrypted under the row's own key (see shred.py).
    sealer = shred.Sealer(
        db, [save.row.key for save in saves], known.keys if known is not None else None
    )
    for group in upgrades(saves):
        refusal = _refusal(group, saves, pruned_through, deletes, ranges)
        pin: Pin | int | None = None
        if refusal is None:
            live = saves[live_of(group, saves)].row
            pin = _run(db, chains.extend(live.key, live.server_id))
            if isinstance(pin, int):
                refusal = Overtaken(pin)  # a purge is clearing what it would extend
        if refusal is not None or not isinstance(pin, Pin):
            for index in group:
                results[index] = refusal
            continue
        lineage = saves[group[0]].lineage
        if lineage is not None:
            _run(db, chains.record(pin, lineage))
        for index in group:
            row = saves[index].row
            categories = json.dumps(row.categories, ensure_ascii=False) if row.categories else "{}"
            summary, sealed, slot = sealer.seal(row.key, row.summary, categories)
            distilled = summary is not None or sealed != "{}"
            memory_id, version = db.execute(
                *_save_statement((
                    row.key, row.scope, row.server_id, row.user_id, row.channel_id,
                    row.persona_id, row.parent_channel_id, row.channel_name, row.server_name,
                    int(row.channel_private), summary, sealed, row.turns_since_refresh,
                    row.last_refreshed_turn, row.updated_at, slot,
                    pin.chain if distilled else None, pin.version if distilled else None,
                ))
            ).fetchone()  # fmt: skip
            feed.append(("upgrade", row.key, version, None, None, None))
            results[index] = Saved(int(memory_id), pin)
    return results


def _refusal(
    group: list[int],
    saves: Sequence[SaveDistilled],
    pruned_through: int,
    deletes: list[Change],
    ranges: dict[int, dict[int, int] | None],
) -> Overtaken | None:
    """Why one upgrade's guard refuses it, or None."""
    for index in group:
        guard = saves[index].guard
        if guard is None:
            continue
        if guard.after < pruned_through:
            return Overtaken(pruned_through)  # what came after it is no longer known
        overtaken = overtaking(guard, deletes, ranges) if deletes else None
        if overtaken is not None:
            return overtaken
    return None


def _load_rows(
    db: sqlite3.Connection,
    keys: Sequence[str],
    crude_before: float,
    summary_before: float,
    feed: _Feed | list[_Pending],
) -> list[StoredRow]:
    if not keys:
        return []
    params = {"crude": crude_before, "summary": summary_before}
    named = {f"k{i}": key for i, key in enumerate(keys)}
    where = "key IN (" + ",".join(f":k{i}" for i in range(len(keys))) + ")"
    gone = db.execute(
        f"DELETE FROM short_term_memories WHERE {where} AND {_EXPIRED} RETURNING key, chain_id",
        {**params, **named},
    ).fetchall()
    _run(db, chains.left(gone))
    feed.extend(("expire", key, None, None, None, None) for key, _ in gone)
    return _select(db, f"{_SELECT} WHERE {where}", named)


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
        f"{_SELECT} WHERE {where} AND {_LIVE} ORDER BY updated_at DESC LIMIT :limit",
        params,
    )


def _select(db: sqlite3.Connection, sql: str, params: dict[str, Any]) -> list[StoredRow]:
    rows = db.execute(sql, params).fetchall()
    if not rows:
        return []
    keys = shred.keys_of(db, [row[0] for row in rows])
    return [_row_from(row, keys.get(row[0])) for row in rows]


def _write_feed(db: sqlite3.Connection, changes: list[_Pending], origin: str, at: float) -> None:
    """Append ``changes`` to the feed, in order. Upgrades, most of it, bind no NULLs: the
    sqlite3 module looks for an adapter for each None (or bytes) it binds, at a cost
    greater than the rest of the row's."""
    start = 0
    while start < len(changes):
        upgrade = changes[start][0] == "upgrade"
        end = start + 1
        while end < len(changes) and (changes[end][0] == "upgrade") == upgrade:
            end += 1
        if upgrade:
            db.executemany(_FEED_UPGRADE, [(c[1], c[2], origin, at) for c in changes[start:end]])
        else:
            db.executemany(_FEED, [(*change, origin, at) for change in changes[start:end]])
        start = end


# How long erasing may wait for another connection's read transaction to end before it
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


def _current_position(db: sqlite3.Connection) -> int:
    # AUTOINCREMENT keeps the highest position ever given in sqlite_sequence, even
    # once pruning has emptied the table.
    seq = _scalar(db, "SELECT seq FROM sqlite_sequence WHERE name = 'stm_changes'")
    return 0 if seq is None else int(seq)


def read_changes(db: sqlite3.Connection, after: int, limit: int) -> FeedPage:
    """The feed after ``after`` (see ``FeedPage``), read in one snapshot."""
    db.execute("BEGIN")
    try:
        pruned_through = int(_scalar(db, "SELECT pruned_through FROM stm_feed"))
        if after < pruned_through:
            return FeedPage((), _current_position(db), fell_behind=True)
        rows = db.execute(
            f"SELECT {_FEED_COLUMNS} FROM stm_changes WHERE position > ? ORDER BY position LIMIT ?",
            (after, limit),
        ).fetchall()
    finally:
        db.execute("COMMIT")
    changes = tuple(Change(*row) for row in rows)
    return FeedPage(changes, changes[-1].position if changes else after, more=len(changes) == limit)


def prune_changes(db: sqlite3.Connection, older_than: float, keep_last: int) -> int:
    """Delete old changes, remembering the newest position deleted.

    What goes is always a prefix of the feed (every position up to the newest change
    older than ``older_than``): clocks of several processes disagree, positions do not.
    The newest old change is found walking back from the newest position, through the
    retained changes only, so ``at`` needs no index.
    """
    db.execute("BEGIN IMMEDIATE")
    try:
        through = _scalar(db, "SELECT max(position) FROM stm_changes WHERE at < ?", (older_than,))
        through = min(int(through or 0), _current_position(db) - keep_last)
        gone = db.execute(
            "DELETE FROM stm_changes WHERE position <= ? RETURNING position", (through,)
        ).fetchall()
        if gone:
            pruned = max(p for (p,) in gone)
            db.execute("UPDATE stm_feed SET pruned_through = max(pruned_through, ?)", (pruned,))
            _run(db, chains.forget_purges(pruned))
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return len(gone)


def _on_disk(db: sqlite3.Connection) -> bool:
    return any(row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main")


def _make_folder(path: str) -> None:
    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _identity_params(row: StoredRow) -> tuple[Any, ...]:
    return (
        row.key, row.scope, row.server_id, row.user_id, row.channel_id, row.persona_id,
        row.parent_channel_id, row.channel_name, row.server_name, int(row.channel_private),
        row.turns_since_refresh, row.last_refreshed_turn, row.updated_at,
    )  # fmt: skip


def _row_from(row: Any, secret: bytes | None = None) -> StoredRow:
    key = row[1]
    return row_from_columns(
        row, shred.open_text(secret, key, row[11]), shred.open_text(secret, key, row[12])
    )


# -- the operator's read-only view, on the connection's thread -------------------------
_SELECT = f"SELECT m.id, {_COLUMNS}, {SELECT_TAIL} FROM short_term_memories m"


def _readonly_uri(path: str) -> str:
    return "file:" + urllib.parse.quote(os.path.abspath(path)) + "?mode=ro"


def _check_existing(
    db: sqlite3.Connection, path: str, busy_timeout_ms: int, require_current: bool
) -> None:
    try:
        db.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        version = int(_scalar(db, "PRAGMA user_version"))
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as exc:
        raise StoreError(_explain(path, exc)) from exc
    if version > len(MIGRATIONS):
        raise SchemaVersionError(
            f"{path!r} has schema version {version}, newer than this version of the "
            f"library understands ({len(MIGRATIONS)}); upgrade the library or use another file"
        )
    if version == 0 and tables:
        raise StoreError(f"{path!r} is not a short-term memory database (it holds other tables)")
    if require_current and version < len(MIGRATIONS):
        raise StoreError(
            f"{path!r} has schema version {version}, older than this library's "
            f"({len(MIGRATIONS)}); run 'python -m stm migrate' first"
        )


def _explain(path: str, exc: sqlite3.Error) -> str:
    """One line saying why the file cannot serve, in an operator's words."""
    code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        why = "is locked by another process"
    elif code in (sqlite3.SQLITE_NOTADB, sqlite3.SQLITE_CORRUPT):
        why = "is corrupt or not a database"
    elif code == sqlite3.SQLITE_CANTOPEN:
        why = "cannot be opened"
    elif code == sqlite3.SQLITE_READONLY:
        why = "is read-only"
    else:
        why = "cannot be read"
    return f"short-term memory database {path!r} {why}: {exc}"


def _stats(
    db: sqlite3.Connection,
    path: str,
    thresholds: tuple[float, float],
    soon: tuple[float, float],
) -> StoreStats:
    now = {"crude": thresholds[0], "summary": thresholds[1]}
    # Near expiry: expired by the end of the window, not yet now.
    window = {"crude": soon[0], "summary": soon[1], "crude_now": now["crude"]}
    window["summary_now"] = now["summary"]
    count = "SELECT count(*) FROM short_term_memories"
    db.execute("BEGIN")  # one snapshot for every count
    try:
        rows = db.execute("SELECT scope, count(*) FROM short_term_memories GROUP BY scope")
        by_scope = {"server": 0, "user": 0} | {str(s): int(n) for s, n in rows}
        distilled = f"{count} WHERE {DISTILLED_SQL}"
        users = (
            "SELECT count(*) FROM (SELECT user_id FROM short_term_memories "
            "WHERE user_id IS NOT NULL UNION SELECT member FROM stm_chain_members)"
        )
        return StoreStats(
            entries=sum(by_scope.values()),
            entries_by_scope=by_scope,
            distilled=int(_scalar(db, distilled)),
            servers=int(_scalar(db, "SELECT count(DISTINCT server_id) FROM short_term_memories")),
            users=int(_scalar(db, users)),
            expired=_count(db, f"{count} WHERE {_EXPIRED}", now),
            near_expiry=_count(db, f"{count} WHERE {_EXPIRED} AND NOT ({_EXPIRED_NOW})", window),
            opt_outs=int(_scalar(db, "SELECT count(*) FROM stm_user_opt_outs")),
            server_settings=int(_scalar(db, "SELECT count(*) FROM stm_server_settings")),
            schema_version=int(_scalar(db, "PRAGMA user_version")),
            database_bytes=_file_bytes(path),
            feed_position=_current_position(db),
        )
    finally:
        db.execute("COMMIT")


def _count(db: sqlite3.Connection, sql: str, params: Mapping[str, Any]) -> int:
    return int(db.execute(sql, params).fetchone()[0])


_EXPIRED_NOW = _EXPIRED.replace(":crude", ":crude_now").replace(":summary", ":summary_now")


def _file_bytes(path: str) -> int:
    """The database file and its WAL, as they are on disk."""
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _holdings(db: sqlite3.Connection, user_id: int, erasure: Erasure) -> UserHoldings:
    params = {"user": user_id}
    db.execute("BEGIN")
    try:
        own = _select(
            db,
            f"{_SELECT} WHERE +scope = 'user' AND user_id = :user ORDER BY updated_at DESC",
            params,
        )
        ids = _run(db, chains.reached(user_id, None, erasure))
        contributed = [
            row
            for start in range(0, len(ids), 500)
            for row in _select(
                db,
                f"{_SELECT} WHERE m.id IN (SELECT value FROM json_each(:ids)) "
                "AND NOT (scope = 'user' AND user_id = :user)",
                {"ids": json.dumps(ids[start : start + 500]), "user": user_id},
            )
        ]
        contributed.sort(key=lambda row: (-row.updated_at, row.key))
        row = db.execute("SELECT since FROM stm_user_opt_outs WHERE user_id = ?", (user_id,))
        since = row.fetchone()
    finally:
        db.execute("COMMIT")
    return UserHoldings(user_id, own, contributed, None if since is None else float(since[0]))


def _check(db: sqlite3.Connection) -> CheckReport:
    integrity = [str(row[0]) for row in db.execute("PRAGMA integrity_check")]
    foreign = [
        f"{table} row {rowid} refers to a missing {parent} row"
        for table, rowid, parent, _ in db.execute("PRAGMA foreign_key_check")
    ]
    foreign += _run(db, chains.orphans())
    version = int(_scalar(db, "PRAGMA user_version"))
    return CheckReport(version, len(MIGRATIONS), integrity, foreign)
