"""The SQLite store: WAL, forward-only migrations, secure delete, crypto-shredding.

This is the only module that runs SQL on SQLite: its migrations (``schema``), and
the procedures both stores share (``ops``, ``feed``, ``operator``, ``chains``),
which it runs with ``_Session``, answering what only it can (rows decrypted,
rows sealed under their keys, a change's position). One aiosqlite connection,
on the thread aiosqlite gives it, serves the whole process; the facade's
writer hands it one batch at a time, so no two tasks ever share a transaction.
The functions below the class run on that thread (and take a plain
``sqlite3`` connection, so tests can inspect the very statements they issue).

A whole batch runs there as one function: one hop between the event loop and
the thread per transaction, whatever its number of statements (one await per
statement costs several times more under an upgrade storm). A batch of reads
alone (an evicted entry read back) runs in a read transaction: it neither takes
the write lock nor syncs the WAL at its end. aiosqlite's
public methods each run one statement; they are all built on
``Connection._execute(fn, *args)``, which runs any function on the
connection's thread in queue order, and this store uses it the same way
(``tests/test_store.py`` fails if a release of aiosqlite drops it).

The WAL is copied into the file by a connection of its own, in the background, once
it holds ``CHECKPOINT_BYTES``; never by a commit. SQLite's own auto-checkpoint runs
inside the commit that crosses its threshold, so that commit, and all the work queued
behind it, waits for the copy and the file's fsync (a step of a wide purge on a 285 MiB
file waited about half a second for it; with no checkpoint during the purge, none did).
A passive checkpoint waits for no connection, and none waits for it. But alone it cannot
make the WAL start again from its beginning: SQLite does that only when a write
transaction begins with every frame of the WAL copied and no reader on an older
snapshot, and a writer that commits back to back always adds frames while the copy
runs, so the WAL would grow without end (to 53 MiB in 10,000 of W6's turns). So once it
holds ``RESET_FACTOR`` times ``CHECKPOINT_BYTES``, the writer's own connection empties
it between two batches (``TRUNCATE``, after the passive copy running then: what is left
to copy is what was committed during it), waiting at most ``EMPTY_WAIT_MS`` for other
connections' readers; if one holds on, the next try is once the WAL has grown by
another ``CHECKPOINT_BYTES``. ``_wal_checkpoint`` is that rule. The file itself keeps its
largest size when SQLite starts the WAL again from its beginning, unless told otherwise:
``journal_size_limit`` cuts it back to ``CHECKPOINT_BYTES`` then, so that its size is
what the rule reads and a burst of writes leaves no large file behind.

Several processes may open the same file at once. Opening migrates inside
one ``BEGIN IMMEDIATE`` transaction that reads ``user_version`` only once it
holds the write lock, so of many processes opening a new file exactly one
creates the schema and the others find it made. SQLite lets one writer
commit at a time, so the change feed's positions (an ``AUTOINCREMENT`` key,
never reused, even after pruning) commit in order.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import sqlite3
import time
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import aiosqlite

from .._errors import NoDatabase, StoreError
from .._lineage import Erasure, Pin
from . import _chains as chains
from . import _feed as change_feed
from . import _operator as operator
from . import _ops as operations
from . import _schema as schema
from . import _shred as shred
from ._base import (
    ROW_COLUMNS,
    SELECT_TAIL,
    CheckReport,
    FeedPage,
    Op,
    PurgePreview,
    Scrub,
    StoredRow,
    reads_only,
    row_from_columns,
)
from ._chains import Step
from ._dialect import SQLITE
from ._feed import Changes, Pending
from ._runner import ProcedureStore
from ._schema import SQLITE_MIGRATIONS as MIGRATIONS
from ._schema import statements
from ._shred import KnownKeys

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
log = logging.getLogger("stm.store")
# How often wait_for_change looks at data_version.
POLL_SECONDS = 0.05
# The WAL size at which a background checkpoint copies it into the file (SQLite's own
# auto-checkpoint threshold, 1000 pages of 4 KiB).
CHECKPOINT_BYTES = 4 * 1024 * 1024
# How many times CHECKPOINT_BYTES the WAL may reach before the writer's connection
# empties it (see _wal_checkpoint).
RESET_FACTOR = 2
# How long emptying the WAL may wait for another connection's read transaction (or write
# lock) before it gives up for now.
EMPTY_WAIT_MS = 20


# The upsert of an upgraded row, by which of its values are NULL: written into the
# statement, not bound (binding None makes the sqlite3 module look for an adapter, which
# costs more than the rest of the value). A few shapes in all: the statement cache holds
# them.
_SAVES: dict[tuple[bool, ...], str] = {}


def _save_statement(params: tuple[Any, ...]) -> tuple[str, list[Any]]:
    """The upsert of the row of ``params`` (``ops.save_values``), and the values it binds."""
    nulls = tuple([value is None for value in params])
    sql = _SAVES.get(nulls)
    if sql is None:
        values = ",".join("NULL" if null else "?" for null in nulls)
        sql = _SAVES[nulls] = operations.save_sql(values, SQLITE)
    return sql, [value for value in params if value is not None]


_FEED = (
    "INSERT INTO stm_changes (kind, key, version, channel_id, user_id, server_id, origin, at) "
    "VALUES (?,?,?,?,?,?,?,?)"
)
# An upgrade's change, without the NULLs of the columns it leaves empty (see _write_feed).
_FEED_UPGRADE = (
    "INSERT INTO stm_changes (kind, key, version, origin, at) VALUES ('upgrade',?,?,?,?)"
)


class SQLiteStore(ProcedureStore):
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
        self.dialect = SQLITE
        self.closed = False
        self.origin = secrets.token_hex(8)
        # What stamps the feed's changes (Store.clock): a memory sets its own.
        self.clock: Callable[[], float] = time.time
        # See Store.empty_at_open: this open created the schema, or the file is private.
        self.empty_at_open = False
        self._data_version = 0
        # Touched on the connection's thread only.
        self._known = KnownKeys()
        # The read connection of previews, opened by the first.
        self._reader: aiosqlite.Connection | None = None
        self._reader_lock = asyncio.Lock()
        # The connection that checkpoints the WAL, opened by the first checkpoint, and
        # the checkpoint running (a passive copy on it, or the WAL emptied on this one).
        self._checkpointer: aiosqlite.Connection | None = None
        self._checkpoint: asyncio.Task[None] | None = None
        self._emptying = False  # the checkpoint running empties the WAL
        # The WAL's size when emptying it last failed (0: it did not).
        self._empty_failed_at = 0

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
            await _started(connection)
        except sqlite3.Error as exc:
            raise StoreError(describe(exc)) from exc
        return cls(connection, path)

    async def _call(self, fn: Callable[..., _T], *args: Any) -> _T:
        """Run ``fn(*args)`` on the connection's thread."""
        if self.closed:
            raise StoreError(f"short-term memory database {self.path!r} is closed")
        on_thread = cast(Callable[..., Awaitable[_T]], self._connection._execute)
        return await on_thread(fn, *args)

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction (a batch of reads
        alone in a read transaction, see ``run_batch``); one result per op. Then start the
        checkpoint the WAL needs, if any (``_wal_checkpoint``), without waiting for it."""
        if ops and all(isinstance(op, Scrub) for op in ops):
            await self.checkpointed()  # a scrub would find the WAL busy with it
        results = await self._call(
            run_batch,
            self._db,
            ops,
            self.origin,
            self._known,
            self.clock(),
        )
        self._checkpoint_if_due()
        return results

    def _checkpoint_if_due(self) -> None:
        """Start the checkpoint that ``_wal_checkpoint`` says the WAL needs, if it is not
        running already."""
        if self.path == ":memory:" or self.closed:
            return
        running = self._checkpoint if self._checkpoint and not self._checkpoint.done() else None
        if running is not None and self._emptying:
            return
        try:
            size = os.path.getsize(f"{self.path}-wal")
        except OSError:
            return
        if size < self._empty_failed_at:
            self._empty_failed_at = 0  # emptied since (a scrub, another process)
        due = _wal_checkpoint(size, self._empty_failed_at)
        if due == "TRUNCATE":
            self._checkpoint = asyncio.create_task(self._empty_wal(running, size))
        elif due == "PASSIVE" and running is None:
            self._checkpoint = asyncio.create_task(self._checkpoint_wal())
        self._emptying = due == "TRUNCATE"

    async def _empty_wal(self, running: asyncio.Task[None] | None, size: int) -> None:
        """Once ``running`` (a passive copy) is done, empty the WAL (of ``size`` bytes when
        this was decided) on the writer's own connection, queued between two of its
        batches: copy what is left, wait at most ``EMPTY_WAIT_MS`` for other connections'
        readers, and truncate it."""
        if running is not None:
            await asyncio.wait({running})
        if self.closed:
            return
        try:
            emptied = await self._call(_empty, self._db)
        except (sqlite3.Error, StoreError) as exc:
            log.warning("short-term memory could not checkpoint %r: %s", self.path, exc)
            return
        if emptied:
            self._empty_failed_at = 0
            return
        self._empty_failed_at = size
        log.info(
            "the WAL of %r holds %.1f MiB: another connection's read transaction keeps it "
            "from being emptied (tried again once it grows by %.1f MiB)",
            self.path,
            size / 2**20,
            CHECKPOINT_BYTES / 2**20,
        )

    async def _checkpoint_wal(self) -> None:
        """Copy what it can of the WAL into the file, passively: frames a reader still
        needs stay, and the next checkpoint copies them."""
        try:
            if self._checkpointer is None:
                self._checkpointer = await _started(
                    aiosqlite.connect(self.path, isolation_level=None)
                )
            # Read to its end: a statement left open would hold a read transaction, and
            # a scrub's TRUNCATE would wait for it.
            async with self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)") as done:
                await done.fetchall()
        except sqlite3.Error as exc:
            log.warning("short-term memory could not checkpoint %r: %s", self.path, exc)

    async def checkpointed(self) -> None:
        """Return once no background checkpoint is running (whatever became of it)."""
        if self._checkpoint is not None and not self._checkpoint.done():
            await asyncio.wait({self._checkpoint})

    @property
    def held_keys(self) -> int:
        """The rows' encryption keys remembered for upgrades (``KnownKeys``)."""
        return len(self._known.keys)

    async def forget_keys(self) -> None:
        """Drop the remembered encryption keys now, on the connection's thread (a batch may be
        using them there)."""
        await self._call(self._known.clear)

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

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement outside the batch path (inspection, tests); return its rows."""
        return await self._call(_fetch_anything, self._db, self._known, sql, params)

    async def preview_aside(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now, planned off the write path:
        on a read connection of its own, in temporary tables, so that no other work waits
        for it (a ``:memory:`` database has one connection: on it, between batches)."""
        preview = chains.preview(user_id, server_id, erasure)
        if self.path == ":memory:":
            return await self._call(_aside, self._db, preview)
        if self.closed:
            raise StoreError(f"short-term memory database {self.path!r} is closed")
        async with self._reader_lock:
            try:
                if self._reader is None:
                    uri = _readonly_uri(self.path)
                    self._reader = await _started(
                        aiosqlite.connect(uri, uri=True, isolation_level=None)
                    )
                on_thread = cast(Callable[..., Awaitable[PurgePreview]], self._reader._execute)
                return await on_thread(_aside, self._reader._conn, preview)
            except sqlite3.Error as exc:
                raise StoreError(_explain(self.path, exc)) from exc

    async def close(self) -> None:
        """Close the connection."""
        if not self.closed:
            self.closed = True
            await self.checkpointed()
            if self._checkpointer is not None:
                await self._checkpointer.close()
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

    async def check(self) -> CheckReport:
        """``PRAGMA integrity_check`` and ``foreign_key_check``, and the schema version."""
        return await self._inspect(operator.check(_own_checks(), len(MIGRATIONS), SQLITE))

    # -- how the shared procedures run here (``ProcedureStore``) ------------------------
    async def _once(self, procedure: operations.Procedure[_T]) -> _T:
        return await self._call(_run, self._db, procedure)

    async def _snapshot(self, procedure: operations.Procedure[_T]) -> _T:
        return await self._call(_read, self._db, procedure)

    async def _exclusive(self, procedure: operations.Procedure[_T]) -> _T:
        return await self._call(_exclusively, self._db, procedure)

    async def _inspect(self, procedure: operations.Procedure[_T]) -> _T:
        try:
            return await self._call(_read, self._db, procedure)
        except sqlite3.DatabaseError as exc:
            raise StoreError(_explain(self.path, exc)) from exc

    async def _load(self, procedure: operations.Procedure[_T]) -> _T:
        try:
            return await self._call(_run, self._db, procedure)
        except sqlite3.DatabaseError as exc:
            raise StoreError(
                f"short-term memory database {self.path!r} cannot be read: {exc}"
            ) from exc

    async def _database_size(self) -> int:
        return await asyncio.to_thread(_file_bytes, self.path)


# -- on the connection's thread ------------------------------------------------------
def _aside(db: sqlite3.Connection, preview: operations.Procedure[PurgePreview]) -> PurgePreview:
    """A preview's procedure in one read transaction, its plan in temporary tables that
    the rollback takes away."""
    db.execute("BEGIN")
    try:
        for table in chains.PREVIEW_TABLES:
            db.execute(table.format(end=""))
        return _run(db, preview)
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


async def _started(connection: aiosqlite.Connection) -> aiosqlite.Connection:
    """``connection``, opened; if opening fails, its worker thread is gone before the error
    is raised. (aiosqlite then queues the thread's stop without waiting for it: a thread
    still running when the event loop closes fails on it, as an unhandled error.)"""
    try:
        return await connection
    except BaseException:
        await connection.close()
        thread = getattr(connection, "_thread", None)
        if thread is not None and thread.is_alive():
            await asyncio.to_thread(thread.join, 5.0)
        raise


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
            if path != ":memory:":
                db.execute("PRAGMA wal_autocheckpoint = 0")  # see CHECKPOINT_BYTES
                # A WAL that SQLite starts again from its beginning is cut back to this.
                db.execute(f"PRAGMA journal_size_limit = {CHECKPOINT_BYTES}")
            _check_json(db, path)
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


def _check_json(db: sqlite3.Connection, path: str) -> None:
    """Fail at open, not at the first list of keys, on a build of SQLite without its JSON
    functions: lists of values are bound as JSON arrays (``Dialect.in_list``)."""
    try:
        db.execute("SELECT value FROM json_each('[]')").fetchall()
    except sqlite3.OperationalError as exc:
        raise StoreError(
            f"short-term memory database {path!r} cannot be used: this build of SQLite "
            f"({sqlite3.sqlite_version}) has no JSON functions ({exc})"
        ) from exc


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
        raise schema.newer(repr(path), version, len(MIGRATIONS), "file")
    return version


def run_batch(
    db: sqlite3.Connection,
    ops: Sequence[Op],
    origin: str = "",
    known: KnownKeys | None = None,
    at: float | None = None,
) -> list[object]:
    """Run ``ops`` in order in one ``BEGIN IMMEDIATE`` transaction; one result per op.

    The changes they make go to the feed in the same transaction, in op order, stamped
    ``at`` (the store's clock, read by the caller; default ``time.time()``). A batch of
    only ``Scrub`` scrubs instead, outside any transaction. A batch of reads alone
    (``base.reads_only``) runs in a read transaction, which neither waits for the write
    lock nor syncs anything at its end; should one of its reads find expired rows to
    delete, it is rolled back, having written nothing, and run again as a write.
    ``known``, kept from batch to batch on ``db``, saves upgrades reading the keys of
    rows they upgraded before (a read leaves it as it is: it changes no key)."""
    if ops and all(isinstance(op, Scrub) for op in ops):
        if _on_disk(db):
            _scrub(db)
        return [None] * len(ops)
    at = time.time() if at is None else at
    if reads_only(ops):
        try:
            return _read_batch(db, ops, origin, at)
        except _Writes:
            pass  # a read found expired rows to delete: run it as a write
    feed = _Feed(db, origin, at)
    db.execute("BEGIN IMMEDIATE")
    try:
        keeps_keys = all(isinstance(op, operations.KEEPS_KEYS) for op in ops)
        memo = known.usable(db, keeps_keys) if known is not None else None
        results = _Session(db, feed, memo).run(operations.batch(ops, feed, SQLITE))
        feed.flush()
        db.execute("COMMIT")
    except BaseException:
        if known is not None:
            known.clear()  # it may describe what the rollback undid
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return results


class _Writes(Exception):
    """A batch run as a read is about to write (``ops.Writing``)."""


def _read_batch(db: sqlite3.Connection, ops: Sequence[Op], origin: str, at: float) -> list[object]:
    """Run a batch of reads alone in one read transaction: it neither waits for nor holds
    the write lock, and its commit writes nothing (no fsync). Raises ``_Writes``, having
    written nothing, when an operation is about to write."""
    feed = _Feed(db, origin, at)
    db.execute("BEGIN")  # deferred: a read transaction, one snapshot for every statement
    try:
        results = _Session(db, feed, reading=True).run(operations.batch(ops, feed, SQLITE))
        assert not feed.pending, "a read added a change to the feed"
    finally:
        if db.in_transaction:
            db.execute("ROLLBACK")  # nothing to keep: it wrote nothing
    return results


class _Feed(Changes):
    """The changes of one batch, written in op order: together at the end, except where
    an operation needs its own change's position now (a purge records its ranges by it).
    Without ``db`` (an operation run alone, see ``apply``) nothing is written and such a
    change has no position yet (0)."""

    def __init__(self, db: sqlite3.Connection | None, origin: str, at: float) -> None:
        super().__init__(origin)
        self.db, self.at = db, at

    def now(self, change: Pending) -> int:
        """Write what is pending and ``change``; return ``change``'s position."""
        if self.db is None:
            self.append(change)
            return 0
        self.flush()
        row = self.db.execute(f"{_FEED} RETURNING position", (*change, self.origin, self.at))
        return int(row.fetchone()[0])

    def flush(self) -> None:
        if self.pending and self.db is not None:
            _write_feed(self.db, self.pending, self.origin, self.at)
            self.pending = []


class _Session:
    """Runs the shared procedures (``chains``, ``ops``, ``feed``, ``operator``) on this
    connection, answering what only the store can: rows decrypted, rows sealed and
    written, remembered keys forgotten, a change's position."""

    def __init__(
        self,
        db: sqlite3.Connection,
        feed: _Feed | None = None,
        known: KnownKeys | None = None,
        *,
        reading: bool = False,
    ) -> None:
        self.db, self.feed, self.known = db, feed, known
        self.sealer: shred.Sealer | None = None
        # A batch run as a read: a procedure about to write stops it (``_Writes``).
        self.reading = reading

    def run(self, procedure: operations.Procedure[_T]) -> _T:
        db = self.db
        result: Any = None
        try:
            while True:
                request = procedure.send(result)
                if isinstance(request, Step):
                    result = _step(db, request)
                elif isinstance(request, operations.Writes):
                    result = [self._write(row, pin) for row, pin in request.rows]
                elif isinstance(request, operations.Many):
                    result = db.executemany(request.sql, request.rows) if request.rows else None
                elif isinstance(request, operations.Rows):
                    result = _select(db, f"{_SELECT} {request.where}", request.params)
                elif isinstance(request, operations.Sealing):
                    live = self.known.keys if self.known is not None else None
                    self.sealer, result = shred.Sealer(db, request.keys, live), None
                elif isinstance(request, operations.Dropped):
                    if self.known is not None:
                        for key in request.keys:
                            self.known.keys.pop(key, None)
                    result = None
                elif isinstance(request, operations.Reading):
                    result = self.reading
                elif isinstance(request, operations.Writing):
                    if self.reading:
                        raise _Writes
                    result = None
                else:
                    assert self.feed is not None, "a change's position is asked outside a batch"
                    result = self.feed.now(request.change)
        except StopIteration as done:
            return cast(_T, done.value)

    def _write(self, row: StoredRow, pin: Pin) -> tuple[int, int]:
        assert self.sealer is not None, "rows are written before their keys are read"
        sealed = self.sealer.seal(row.key, row.summary, operations.categories_json(row))
        values = operations.save_values(row, pin, sealed, SQLITE)
        memory_id, version = self.db.execute(*_save_statement(values)).fetchone()
        return int(memory_id), int(version)


def _step(db: sqlite3.Connection, step: Step) -> Any:
    if step.mode == "many":
        params = cast(Sequence[Mapping[str, Any]], step.params)
        return db.executemany(step.sql, params) if params else None
    cursor = db.execute(step.sql, cast(Mapping[str, Any], step.params))
    if step.mode == "one":
        return cursor.fetchone()
    if step.mode == "all":
        return cursor.fetchall()
    if step.mode == "count":
        return cursor.rowcount
    return None


def _run(db: sqlite3.Connection, procedure: operations.Procedure[_T]) -> _T:
    """Run one of the shared procedures on this connection, outside a batch."""
    return _Session(db).run(procedure)


def apply(
    db: sqlite3.Connection,
    op: Op,
    changes: _Feed | list[Pending] | None = None,
    known: KnownKeys | None = None,
) -> object:
    """Run one operation inside the caller's transaction; add the changes it makes to the
    feed (``changes``: the batch's feed, or a list of pending changes when run alone)."""
    feed = changes if isinstance(changes, _Feed) else _Feed(None, "", 0.0)
    result = _Session(db, feed, known).run(operations.apply(op, feed, SQLITE))
    if isinstance(changes, list):
        changes.extend(feed.pending)
    return result


def _select(db: sqlite3.Connection, sql: str, params: Mapping[str, Any]) -> list[StoredRow]:
    rows = db.execute(sql, params).fetchall()
    if not rows:
        return []
    keys = shred.keys_of(db, [row[0] for row in rows])
    return [_row_from(row, keys.get(row[0])) for row in rows]


def _write_feed(db: sqlite3.Connection, changes: list[Pending], origin: str, at: float) -> None:
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


def _wal_checkpoint(wal_bytes: int, failed_at: int = 0) -> str | None:
    """The checkpoint a WAL of ``wal_bytes`` needs after a batch: none below
    ``CHECKPOINT_BYTES``; a passive copy on the checkpoint's own connection, which waits
    for nothing; from ``RESET_FACTOR`` times that (passive copies did not let SQLite
    start it again from its beginning) ``TRUNCATE`` on the writer's connection, or, when
    that failed at ``failed_at`` bytes, once the WAL has grown by ``CHECKPOINT_BYTES``
    more. A scrub (``Scrub``) empties it as well, whatever its size."""
    if wal_bytes >= max(RESET_FACTOR * CHECKPOINT_BYTES, failed_at + CHECKPOINT_BYTES):
        return "TRUNCATE"
    if wal_bytes >= CHECKPOINT_BYTES:
        return "PASSIVE"
    return None


def _empty(db: sqlite3.Connection) -> bool:
    """Copy the whole WAL into the file and truncate it; False when another connection's
    read transaction (or write lock) held on for ``EMPTY_WAIT_MS``.

    The cost is that of the pages written since the last checkpoint, whatever the size of
    the file."""
    timeout = int(_scalar(db, "PRAGMA busy_timeout"))
    db.execute(f"PRAGMA busy_timeout = {EMPTY_WAIT_MS}")
    try:
        busy, _, _ = db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        db.execute(f"PRAGMA busy_timeout = {timeout}")
    return not busy


def _scrub(db: sqlite3.Connection) -> None:
    """Empty the WAL, whose old page images still hold destroyed keys, into the file."""
    if not _empty(db):
        # Another connection reads an old snapshot: the WAL cannot be emptied yet.
        raise StoreError(
            "the WAL could not be emptied: another connection holds a read transaction"
        )


def _run_script(db: sqlite3.Connection, script: str) -> None:
    """Run each statement of ``script``."""
    for statement in statements(script):
        db.execute(statement)


def read_changes(db: sqlite3.Connection, after: int, limit: int) -> FeedPage:
    """The feed after ``after`` (see ``FeedPage``), read in one snapshot."""
    return _read(db, change_feed.read(after, limit, SQLITE))


def prune_changes(
    db: sqlite3.Connection, older_than: float, keep_last: int, keep_after: int | None = None
) -> int:
    """Delete old changes, remembering the newest position deleted (``feed.prune``)."""
    return _exclusively(db, change_feed.prune(older_than, keep_last, SQLITE, keep_after))


def _exclusively(db: sqlite3.Connection, procedure: operations.Procedure[_T]) -> _T:
    db.execute("BEGIN IMMEDIATE")
    try:
        result = _run(db, procedure)
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise
    return result


def _on_disk(db: sqlite3.Connection) -> bool:
    return any(row[2] for row in db.execute("PRAGMA database_list") if row[1] == "main")


def _make_folder(path: str) -> None:
    Path(path).expanduser().parent.mkdir(parents=True, exist_ok=True)


def _row_from(row: Any, secret: bytes | None = None) -> StoredRow:
    key = row[1]
    return row_from_columns(
        row, shred.open_text(secret, key, row[11]), shred.open_text(secret, key, row[12])
    )


# -- the operator's read-only view, on the connection's thread -------------------------
_SELECT = f"SELECT m.id, {ROW_COLUMNS}, {SELECT_TAIL} FROM short_term_memories m"


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
    schema.check_version(
        repr(path),
        version,
        len(MIGRATIONS),
        kind="file",
        made=version != 0,
        other_tables=bool(tables),
        require_current=require_current,
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


def _read(db: sqlite3.Connection, procedure: operations.Procedure[_T]) -> _T:
    db.execute("BEGIN")  # one snapshot for every statement
    try:
        return _run(db, procedure)
    finally:
        db.execute("COMMIT")


def _file_bytes(path: str) -> int:
    """The database file and its WAL, as they are on disk."""
    return sum(os.path.getsize(p) for p in (path, path + "-wal") if os.path.exists(p))


def _own_checks() -> operations.Procedure[tuple[list[str], list[str]]]:
    integrity = yield Step("PRAGMA integrity_check", {}, "all")
    foreign = yield Step("PRAGMA foreign_key_check", {}, "all")
    missing = [
        f"{table} row {rowid} refers to a missing {parent} row"
        for table, rowid, parent, _ in foreign
    ]
    return [str(row[0]) for row in integrity], missing
