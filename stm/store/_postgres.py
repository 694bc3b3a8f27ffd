"""The PostgreSQL store on asyncpg: migrations, a pool, group commit, the change feed.

This is the only module that runs SQL on PostgreSQL: its migrations
(``schema``), and the procedures both stores share (``ops``, ``feed``,
``operator``, ``chains``), which it runs with ``_Session`` (their ``:name``
parameters numbered, see ``chains.positional``). So every operation of
``_base.py`` means the same here as on SQLite; the tests of store behaviour run
against both.

Ordering of the change feed. PostgreSQL sequences hand out numbers that can
commit out of order (a transaction that took 7 can commit after one that took
8), and a follower that read 8 would then never see 7. So positions come from
one counter row (``stm_feed``), and a batch that writes the feed locks that row
first, before any other statement: such batches run one at a time across every
process, as SQLite's writers do, and each commits before the next can take a
position. Every snapshot therefore sees a prefix of the feed, and a follower
that read position ``n`` can never be handed a smaller one later. The lock also
makes the checks inside a batch exact: a purge sees every upgrade committed
before it, and a guarded upgrade (``base.Guard``) sees every delete. The cost is
that writes of different processes do not overlap; each process still groups
its own concurrent writes into one commit. Batches that write anything at all
(identity rows and counters too) take the lock, so two of them never wait for
each other's rows (no deadlock); batches that only read do not (they run in a
read-only transaction, and a read that finds expired rows to delete is rolled back
and run again as a write).

Wake-ups. Each batch that writes the feed sends ``NOTIFY stm_changes`` with its
last position, delivered at commit. A follower listens on one dedicated
connection outside the pool (a pooled connection would be handed to other work
and lose its LISTEN); when that connection drops, ``wait_for_change`` wakes
the follower (so it reads) and connects again on the next call.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from .._errors import NoDatabase, StoreError
from .._lineage import Erasure
from .._redact import redact_text, redact_url
from . import _chains as chains
from . import _operator as operator
from . import _ops as operations
from . import _schema as schema
from . import _shred as shred
from ._base import (
    PROVENANCE_TABLES,
    ROW_COLUMNS,
    SELECT_TAIL,
    CheckReport,
    LoadChannelKeys,
    LoadRecent,
    Op,
    PurgePreview,
    SaveDistilled,
    Scrub,
    StoredRow,
    reads_only,
    row_from_columns,
)
from ._chains import Step
from ._dialect import POSTGRES
from ._feed import Changes, Pending
from ._pgconnect import Limits, pooled, transaction, unwritable_tables
from ._runner import ProcedureStore
from ._schema import POSTGRES_MIGRATIONS as MIGRATIONS
from ._schema import POSTGRES_SEALING

__all__ = ["CHANNEL", "MIGRATIONS", "PostgresStore"]

# The NOTIFY channel followers listen on.
CHANNEL = "stm_changes"
# pg_advisory_xact_lock key of migrations: any fixed number no one else uses.
_MIGRATION_LOCK = 0x5354_4D00_0001
# The upsert of an upgraded row (``ops.save_values``, numbered).
_SAVE = operations.save_sql(POSTGRES.values(18), POSTGRES)
_T = TypeVar("_T")


class PostgresStore(ProcedureStore):
    """A store in a PostgreSQL database, on an asyncpg pool."""

    def __init__(self, pool: Any, dsn: str, limits: Limits | None = None) -> None:
        self._pool = pool
        self._dsn = dsn
        self.limits = limits or Limits()
        self.path = redact_url(dsn)
        self.dialect = POSTGRES
        self.closed = False
        self.origin = secrets.token_hex(8)
        # What stamps the feed's changes (Store.clock): a memory sets its own.
        self.clock: Callable[[], float] = time.time
        # A shared server: another process may always hold rows this one does not know.
        self.empty_at_open = False
        self._seen_position = 0
        self._listener: Any = None
        self._notified = asyncio.Event()

    @classmethod
    async def open(
        cls,
        dsn: str,
        *,
        busy_timeout_ms: int = 5000,
        statement_timeout_ms: int = 10_000,
        min_size: int = 1,
        max_size: int = 4,
    ) -> PostgresStore:
        """Connect a pool to ``dsn`` and migrate the database.

        Every wait is bounded (see ``pgconnect``): a lock another session holds, past
        ``busy_timeout_ms``; a statement, a connection or an answer, past
        ``statement_timeout_ms``. Raises StoreError when the database cannot be reached,
        migrated or written (a read-only session, a role without write grants)."""
        asyncpg = _asyncpg()
        limits = Limits(busy_timeout_ms, statement_timeout_ms)
        name = redact_url(dsn)
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=min_size, max_size=max_size, **limits.connect_kwargs()
            )
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise StoreError(
                redact_text(f"cannot open short-term memory database {name}: {exc}", dsn)
            ) from exc
        store = cls(pool, dsn, limits)
        try:
            async with store._acquire() as conn:
                await migrate(conn, store.path)
                unwritable = await unwritable_tables(conn)
            if unwritable:
                raise StoreError(
                    f"short-term memory database {name} is read-only for this connection: "
                    + "; ".join(unwritable)
                )
            store._seen_position = await store.current_position()
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            await pool.close()
            raise StoreError(
                redact_text(f"short-term memory database {name} cannot be used: {exc}", dsn)
            ) from exc
        except BaseException:
            await pool.close()
            raise
        return store

    def _acquire(self) -> contextlib.AbstractAsyncContextManager[Any]:
        """A pooled connection, waited for at most ``limits.acquire_seconds``; a command
        that got no answer in time is a StoreError saying so (see ``pgconnect``)."""
        return pooled(self._pool, self.path, self.limits)

    def _check_open(self) -> None:
        if self.closed:
            raise StoreError(f"short-term memory database {self.path} is closed")

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one transaction; one result per op. A batch of only
        ``Scrub`` vacuums the key table instead, outside any transaction; a batch of reads
        alone (``base.reads_only``) runs in a read-only transaction, without the feed's
        lock."""
        self._check_open()
        if ops and all(isinstance(op, Scrub) for op in ops):
            async with self._acquire() as conn:
                # Destroyed keys are dead tuples until vacuumed; VACUUM (not FULL) takes no
                # lock that writers wait for, but for giving the table's empty end pages
                # back: that needs the table alone, and VACUUM waits up to 5 s for it while
                # another transaction has written keys (this writer's loop with it). Those
                # pages stay, to be reused (PostgreSQL 12 on). What it leaves is in
                # docs/guarantees.md.
                truncate = conn.get_server_version().major < 12
                await conn.execute("VACUUM stm_keys" if truncate else _VACUUM_KEYS)
            return [None] * len(ops)
        at = self.clock()
        async with self._acquire() as conn:
            if reads_only(ops):
                # A read takes no lock, so it waits for no other process's writes; one that
                # finds expired rows to delete is rolled back and run again as a write.
                try:
                    async with transaction(conn, readonly=True):
                        feed = _Feed(conn, self.origin, at)
                        procedure = operations.batch(ops, feed, POSTGRES)
                        return await _Session(conn, feed, reading=True).run(procedure)
                except _Writes:
                    pass
            async with transaction(conn):
                if any(_writes(op) for op in ops):
                    # Before anything else: see the module's docstring.
                    await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
                feed = _Feed(conn, self.origin, at)
                results = await _Session(conn, feed).run(operations.batch(ops, feed, POSTGRES))
                await feed.flush()
        return results

    @property
    def held_keys(self) -> int:
        """Always 0: rows' encryption keys are read inside the transaction that uses them
        (``_Keys``)."""
        return 0

    async def forget_keys(self) -> None:
        """Nothing to drop: no row's encryption key outlives its transaction here."""

    async def poll_changed(self) -> bool:
        """True when the feed moved since the previous call (this process's own changes
        included: a spurious True is allowed)."""
        position = await self.current_position()
        changed, self._seen_position = position != self._seen_position, position
        return changed

    async def wait_for_change(self, seconds: float) -> bool:
        """Wait for a NOTIFY from a committing batch, at most ``seconds``.

        The first call connects the listening connection. A lost connection wakes the
        waiter (True) so that it reads the feed; the next call connects again, and when
        that fails the call waits out ``seconds`` and returns True, for the same reason.
        """
        self._check_open()
        if self._listener is None or self._listener.is_closed():
            try:
                await self._listen()
            except (OSError, _asyncpg().PostgresError, _asyncpg().InterfaceError):
                await asyncio.sleep(max(0.0, seconds))
                return True
        try:
            async with asyncio.timeout(max(0.0, seconds)):
                await self._notified.wait()
        except TimeoutError:
            return False
        # Cleared before the caller reads: a change committed from now on sets it again.
        self._notified.clear()
        return True

    async def _listen(self) -> None:
        asyncpg = _asyncpg()
        listener = await asyncpg.connect(self._dsn, **self.limits.connect_kwargs())
        try:
            await listener.add_listener(CHANNEL, self._on_notify)
            listener.add_termination_listener(self._on_lost)
        except BaseException:
            listener.terminate()  # cancelled (the store closing) or lost: not left open
            raise
        if self.closed:
            listener.terminate()  # closed while this connected
            return
        self._listener = listener
        # Whatever committed while nobody listened is only found by reading.
        self._notified.set()

    def _on_notify(self, *_: object) -> None:
        self._notified.set()

    def _on_lost(self, *_: object) -> None:
        self._listener = None
        self._notified.set()

    async def drop_listener(self) -> None:
        """Close the listening connection abruptly, as a network failure would (tests)."""
        if self._listener is not None:
            self._listener.terminate()

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement outside the batch path (inspection, tests); return its rows."""
        self._check_open()
        async with self._acquire() as conn:
            return [tuple(row) for row in await conn.fetch(sql, *params)]

    async def close(self) -> None:
        """Close the listening connection and the pool."""
        if self.closed:
            return
        self.closed = True
        listener, self._listener = self._listener, None
        try:
            if listener is not None:
                with contextlib.suppress(Exception):
                    await listener.close()
        finally:
            try:
                # Gracefully, unless a connection is stuck past its own limits.
                async with asyncio.timeout(self.limits.acquire_seconds):
                    await self._pool.close()
            except TimeoutError:
                self._pool.terminate()

    # -- the operator's read-only view (``inspect.Inspector``) ------------------------
    @classmethod
    async def open_existing(
        cls,
        dsn: str,
        *,
        lock_timeout_ms: int = 5000,
        statement_timeout_ms: int = 10_000,
        require_current: bool = True,
    ) -> PostgresStore:
        """Connect read-only to a database that must already hold the short-term memory
        tables; never create or migrate them.

        Raises StoreError saying why it cannot serve: unreachable, missing, locked (past
        ``lock_timeout_ms``), too slow (past ``statement_timeout_ms``), not a short-term
        memory schema, or (with ``require_current``) an older schema; SchemaVersionError
        when a newer version of the library wrote it.
        """
        asyncpg = _asyncpg()
        limits = Limits(lock_timeout_ms, statement_timeout_ms)
        name = redact_url(dsn)
        try:
            pool = await asyncpg.create_pool(
                dsn, min_size=1, max_size=1, **limits.connect_kwargs(read_only=True)
            )
        except asyncpg.InvalidCatalogNameError as exc:
            raise NoDatabase(redact_text(_explain(name, exc), dsn)) from exc
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, ValueError) as exc:
            raise StoreError(redact_text(_explain(name, exc), dsn)) from exc
        store = cls(pool, dsn, limits)
        try:
            await _check_existing(store, require_current)
        except BaseException:
            await pool.close()
            raise
        return store

    async def check(self) -> CheckReport:
        """Every table read through, orphaned contributor rows, and the schema version."""
        return await self._inspect(operator.check(_own_checks(), len(MIGRATIONS), POSTGRES))

    async def preview_aside(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now, planned off the write path:
        on a pooled connection, in temporary tables dropped with its transaction, so that
        no other work waits for it."""
        self._check_open()
        asyncpg = _asyncpg()
        try:
            async with self._acquire() as conn, transaction(conn, isolation="repeatable_read"):
                for table in chains.PREVIEW_TABLES:
                    await conn.execute(table.format(end=" ON COMMIT DROP"))
                return await _run(conn, chains.preview(user_id, server_id, erasure))
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(redact_text(_explain(self.path, exc), self._dsn)) from exc

    # -- how the shared procedures run here (``ProcedureStore``) ------------------------
    async def _once(self, procedure: operations.Procedure[_T]) -> _T:
        self._check_open()
        async with self._acquire() as conn:
            return await _run(conn, procedure)

    async def _snapshot(self, procedure: operations.Procedure[_T]) -> _T:
        self._check_open()
        async with (
            self._acquire() as conn,
            transaction(conn, isolation="repeatable_read", readonly=True),
        ):
            return await _run(conn, procedure)

    async def _exclusive(self, procedure: operations.Procedure[_T]) -> _T:
        self._check_open()
        async with self._acquire() as conn, transaction(conn):
            return await _run(conn, procedure)

    async def _inspect(self, procedure: operations.Procedure[_T]) -> _T:
        asyncpg = _asyncpg()
        try:
            return await self._snapshot(procedure)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(redact_text(_explain(self.path, exc), self._dsn)) from exc

    async def _load(self, procedure: operations.Procedure[_T]) -> _T:
        return await self._once(procedure)

    async def _database_size(self) -> str:
        return _SIZE


def _asyncpg() -> Any:
    try:
        import asyncpg
    except ImportError as exc:  # pragma: no cover - depends on the installation
        raise StoreError(
            "STM_DATABASE names PostgreSQL, which needs asyncpg: "
            "python -m pip install 'discord-stm[postgres]'"
        ) from exc
    return asyncpg


def _count(status: str) -> int:
    """The row count of a command status such as ``DELETE 3``."""
    return int(status.rsplit(" ", 1)[-1])


def _writes(op: Op) -> bool:
    return not isinstance(op, LoadRecent | LoadChannelKeys | Scrub)


async def migrate(conn: Any, name: str = "") -> int:
    """Bring the schema to the newest version; return the version found.

    Under a transaction-level advisory lock, so processes opening one new database
    at once take turns, and the later ones find the work done.
    """
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock($1)", _MIGRATION_LOCK)
        if await conn.fetchval("SELECT to_regclass('stm_schema')") is None:
            # Only when missing: a role that may write the tables but not create any in the
            # schema (least privilege) still opens a database made for it.
            await conn.execute("CREATE TABLE stm_schema (version INTEGER NOT NULL)")
        version = await conn.fetchval("SELECT version FROM stm_schema")
        if version is None:
            version = 0
            await conn.execute("INSERT INTO stm_schema (version) VALUES (0)")
        if version > len(MIGRATIONS):
            raise schema.newer(name, version, len(MIGRATIONS), "database")
        for number in range(version, len(MIGRATIONS)):
            await conn.execute(MIGRATIONS[number])
            if number == POSTGRES_SEALING:
                await _seal_legacy(conn)
        if version < len(MIGRATIONS):
            await conn.execute("UPDATE stm_schema SET version = $1", len(MIGRATIONS))
    return int(version)


async def _seal_legacy(conn: Any) -> int:
    """Encrypt distilled text an earlier version stored in the clear; returns how many rows.
    (Its old row versions remain as dead tuples until PostgreSQL vacuums them: see
    docs/guarantees.md.)"""
    rows = await conn.fetch(
        "SELECT id, key, summary, categories FROM short_term_memories "
        "WHERE summary IS NOT NULL OR categories <> '{}'"
    )
    sealer = shred.TextSealer()
    for memory_id, scope_key, summary, categories in rows:
        secret = shred.new_key()
        slot = await conn.fetchval("INSERT INTO stm_keys (key) VALUES ($1) RETURNING slot", secret)
        cipher = ChaCha20Poly1305(secret)
        await conn.execute(
            "UPDATE short_term_memories SET summary = $1, categories = $2, key_slot = $3 "
            "WHERE id = $4",
            None if summary is None else sealer.seal(cipher, scope_key, summary),
            categories if categories == "{}" else sealer.seal(cipher, scope_key, categories),
            slot,
            memory_id,
        )
    return len(rows)


class _Keys:
    """The live keys of the rows one run of upgrades writes: read in one statement, made
    for rows that have none, each with its cipher (see _shred.py)."""

    def __init__(self) -> None:
        self.sealer = shred.TextSealer()
        self._live: dict[str, tuple[int, ChaCha20Poly1305]] = {}

    async def load(self, conn: Any, scope_keys: list[str]) -> None:
        for scope_key, slot, secret in await conn.fetch(
            "SELECT m.key, k.slot, k.key FROM short_term_memories m "
            "JOIN stm_keys k ON k.slot = m.key_slot WHERE m.key = ANY($1::text[])",
            scope_keys,
        ):
            self._live[scope_key] = (int(slot), ChaCha20Poly1305(bytes(secret)))

    async def seal(self, conn: Any, row: StoredRow) -> tuple[str | None, str, int | None]:
        """The row's summary, categories and key slot as stored."""
        categories = operations.categories_json(row)
        if row.summary is None and categories == "{}":
            self._live.pop(row.key, None)  # the trigger deletes its key
            return None, "{}", None
        found = self._live.get(row.key)
        if found is None:
            key = shred.new_key()
            slot = await conn.fetchval("INSERT INTO stm_keys (key) VALUES ($1) RETURNING slot", key)
            found = self._live[row.key] = (int(slot), ChaCha20Poly1305(key))
        slot, cipher = found
        summary = None if row.summary is None else self.sealer.seal(cipher, row.key, row.summary)
        sealed = categories if categories == "{}" else self.sealer.seal(cipher, row.key, categories)
        return summary, sealed, slot


class _Feed(Changes):
    """The changes of one batch, written in op order: together at the end, except where an
    operation needs its own change's position now (a purge records its ranges by it)."""

    def __init__(self, conn: Any, origin: str, at: float) -> None:
        super().__init__(origin)
        self.conn, self.at = conn, at

    async def now(self, change: Pending) -> int:
        """Write what is pending and ``change``; return ``change``'s position."""
        self.pending.append(change)
        return await self.flush()

    async def flush(self) -> int:
        """Write what is pending; the last position written (0: nothing)."""
        if not self.pending:
            return 0
        pending, self.pending = self.pending, []
        return await _write_feed(self.conn, pending, self.origin, self.at)


# The scrub's vacuum of the key table, which never waits for the table alone (see run).
_VACUUM_KEYS = "VACUUM (TRUNCATE false) stm_keys"


class _Writes(Exception):
    """A batch run as a read is about to write (``ops.Writing``)."""


class _Session:
    """Runs the shared procedures (``chains``, ``ops``, ``feed``, ``operator``) on this
    connection, answering what only the store can: rows decrypted, rows sealed and
    written, a change's position."""

    def __init__(self, conn: Any, feed: _Feed | None = None, *, reading: bool = False) -> None:
        self.conn, self.feed = conn, feed
        self.keys = _Keys()
        # A batch run as a read: a procedure about to write stops it (``_Writes``).
        self.reading = reading

    async def run(self, procedure: operations.Procedure[_T]) -> _T:
        conn = self.conn
        result: Any = None
        try:
            while True:
                request = procedure.send(result)
                if isinstance(request, Step):
                    result = await _step(conn, request)
                elif isinstance(request, operations.Writes):
                    values = [
                        operations.save_values(row, pin, await self.keys.seal(conn, row), POSTGRES)
                        for row, pin in request.rows
                    ]
                    # One round trip for the run, each row's statement in order.
                    written = await conn.fetchmany(_SAVE, values)
                    result = [(int(memory_id), int(version)) for memory_id, version in written]
                elif isinstance(request, operations.Many):
                    if request.rows:
                        await conn.executemany(request.sql, request.rows)
                    result = None
                elif isinstance(request, operations.Rows):
                    sql, names = _statement(f"{_INSPECT} {request.where}")
                    rows = await conn.fetch(sql, *[request.params[n] for n in names])
                    result = [_row_from(row) for row in rows]
                elif isinstance(request, operations.Sealing):
                    self.keys = _Keys()
                    await self.keys.load(conn, sorted(set(request.keys)))
                    result = None
                elif isinstance(request, operations.Dropped):
                    result = None  # no key outlives its transaction here
                elif isinstance(request, operations.Reading):
                    result = self.reading
                elif isinstance(request, operations.Writing):
                    if self.reading:
                        raise _Writes
                    result = None
                else:
                    assert self.feed is not None, "a change's position is asked outside a batch"
                    result = await self.feed.now(request.change)
        except StopIteration as done:
            return cast(_T, done.value)


async def _step(conn: Any, step: Step) -> Any:
    sql, names = _statement(step.sql)
    if step.mode == "many":
        rows = cast(Sequence[Mapping[str, Any]], step.params)
        if rows:
            await conn.executemany(sql, [[row[n] for n in names] for row in rows])
        return None
    params = cast(Mapping[str, Any], step.params)
    values = [params[n] for n in names]
    if step.mode == "one":
        return await conn.fetchrow(sql, *values)
    if step.mode == "all":
        return await conn.fetch(sql, *values)
    if step.mode == "count":
        return _count(await conn.execute(sql, *values))
    await conn.execute(sql, *values)
    return None


async def _run(conn: Any, procedure: operations.Procedure[_T]) -> _T:
    """Run one of the shared procedures on this connection."""
    return await _Session(conn).run(procedure)


@functools.lru_cache(maxsize=256)
def _statement(sql: str) -> tuple[str, tuple[str, ...]]:
    text, names = chains.positional(sql)
    return text, tuple(names)


async def _write_feed(conn: Any, changes: list[Pending], origin: str, at: float) -> int:
    last = int(
        await conn.fetchval(
            "UPDATE stm_feed SET position = position + $1 WHERE id = 1 RETURNING position",
            len(changes),
        )
    )
    first = last - len(changes) + 1
    await conn.executemany(
        "INSERT INTO stm_changes (position, kind, key, version, channel_id, user_id, "
        "server_id, origin, at) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9)",
        [(first + i, *change, origin, at) for i, change in enumerate(changes)],
    )
    await conn.execute("SELECT pg_notify($1, $2)", CHANNEL, str(last))
    return last


async def _save_many(conn: Any, saves: list[SaveDistilled], feed: _Feed) -> list[object]:
    """A run of upgrades in the caller's transaction (``ops.save_many``)."""
    return await _Session(conn, feed).run(operations.save_many(saves, feed, POSTGRES))


def _row_from(row: Any) -> StoredRow:
    # The row's live key is selected last (see _INSPECT), after the columns of SELECT_TAIL.
    key, secret = row[1], row[-1]
    secret = None if secret is None else bytes(secret)
    return row_from_columns(
        row[:-1],
        shred.open_sealed_text(secret, key, row[11]),
        shred.open_sealed_text(secret, key, row[12]),
    )


# -- the operator's read-only view ------------------------------------------------------
_INSPECT = (
    f"SELECT m.id, {ROW_COLUMNS}, {SELECT_TAIL}, "
    "(SELECT k.key FROM stm_keys k WHERE k.slot = m.key_slot) AS secret "
    "FROM short_term_memories m"
)
_TABLES = (
    "short_term_memories",
    *PROVENANCE_TABLES,
    "stm_keys",
    "stm_server_settings",
    "stm_user_opt_outs",
)


async def _check_existing(store: PostgresStore, require_current: bool) -> None:
    asyncpg = _asyncpg()
    name = store.path
    try:
        async with store._acquire() as conn:
            made = await conn.fetchval("SELECT to_regclass('stm_schema')")
            tables = await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            )
            version = 0 if made is None else await conn.fetchval("SELECT version FROM stm_schema")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StoreError(redact_text(_explain(name, exc), store._dsn)) from exc
    schema.check_version(
        name,
        version or 0,
        len(MIGRATIONS),
        kind="database",
        made=made is not None,
        other_tables=bool(tables),
        require_current=require_current,
        absent=NoDatabase(f"no short-term memory database at {name} (nothing was created)"),
    )


def _explain(name: str, exc: BaseException) -> str:
    """One line saying why the database cannot serve, in an operator's words."""
    asyncpg = _asyncpg()
    if isinstance(exc, asyncpg.InvalidCatalogNameError):
        return f"no short-term memory database at {name} (nothing was created): {exc}"
    if isinstance(exc, asyncpg.LockNotAvailableError):
        return f"short-term memory database {name} is locked by another process: {exc}"
    if isinstance(exc, asyncpg.QueryCanceledError | TimeoutError):
        return (
            f"short-term memory database {name} did not answer in time "
            f"(STM_STATEMENT_TIMEOUT_MS): {exc or type(exc).__name__}"
        )
    if isinstance(exc, asyncpg.DataCorruptedError | asyncpg.IndexCorruptedError):
        return f"short-term memory database {name} is corrupt: {exc}"
    if isinstance(exc, OSError):
        return f"cannot reach short-term memory database {name}: {exc}"
    return f"short-term memory database {name} cannot be read: {exc}"


# What the database's tables take on disk, indexes and TOAST included.
_SIZE = "SELECT " + " + ".join(
    f"coalesce(pg_total_relation_size(to_regclass('{table}')), 0)" for table in _TABLES
)


def _own_checks() -> operations.Procedure[tuple[list[str], list[str]]]:
    # PostgreSQL checks its own pages as it reads them (and its checksums, when enabled):
    # reading every row of every table is the check available without extensions.
    for table in _TABLES:
        yield Step(f"SELECT count(*) FROM (SELECT * FROM {table}) t", {}, "one")
    return ["ok"], []
