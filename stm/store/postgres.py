"""The PostgreSQL store on asyncpg: migrations, a pool, group commit, the change feed.

This is the only module that runs SQL on PostgreSQL: its schema and
migrations, and the procedures both stores share (``ops``, ``feed``,
``operator``, ``chains``), which it runs with ``_Session`` (their ``:name``
parameters numbered, see ``chains.positional``). So every operation of
``base.py`` means the same here as on SQLite; the tests of store behaviour run
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
each other's rows (no deadlock); batches that only read do not.

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
import json
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypeVar, cast

from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ..errors import NoDatabase, SchemaVersionError, StoreError
from ..expiry import DISTILLED_SQL
from ..redact import redact_text, redact_url
from . import chains, operator, shred
from . import ops as operations
from .base import (
    PROVENANCE_TABLES,
    ROW_COLUMNS,
    SELECT_TAIL,
    CheckReport,
    LoadChannelKeys,
    LoadRecent,
    Op,
    SaveDistilled,
    Scrub,
    StoredRow,
    row_from_columns,
)
from .chains import Step
from .dialect import POSTGRES
from .feed import Changes, Pending
from .pgconnect import Limits, pooled, transaction, unwritable_tables
from .runner import ProcedureStore

__all__ = ["CHANNEL", "MIGRATIONS", "PostgresStore"]

# The NOTIFY channel followers listen on.
CHANNEL = "stm_changes"
# pg_advisory_xact_lock key of migrations: any fixed number no one else uses.
_MIGRATION_LOCK = 0x5354_4D00_0001

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE short_term_memories (
        id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        key TEXT NOT NULL UNIQUE,
        scope TEXT NOT NULL CHECK (scope IN ('server', 'user')),
        server_id BIGINT,
        user_id BIGINT,
        channel_id BIGINT NOT NULL,
        persona_id BIGINT,
        parent_channel_id BIGINT,
        channel_name TEXT,
        server_name TEXT,
        channel_private BOOLEAN NOT NULL DEFAULT FALSE,
        categories TEXT NOT NULL DEFAULT '{}',
        summary TEXT,
        turns_since_refresh INTEGER NOT NULL DEFAULT 0,
        last_refreshed_turn INTEGER NOT NULL DEFAULT 0,
        updated_at DOUBLE PRECISION NOT NULL,
        version BIGINT NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_by_channel ON short_term_memories (channel_id);
    CREATE INDEX stm_by_user ON short_term_memories (user_id, server_id);
    CREATE INDEX stm_by_group
        ON short_term_memories (scope, server_id, user_id, persona_id, updated_at);
    CREATE INDEX stm_by_updated ON short_term_memories (updated_at);
    CREATE TABLE short_term_memory_contributors (
        user_id BIGINT NOT NULL,
        memory_id BIGINT NOT NULL REFERENCES short_term_memories (id) ON DELETE CASCADE,
        PRIMARY KEY (user_id, memory_id)
    );
    CREATE INDEX stm_contributors_by_memory ON short_term_memory_contributors (memory_id);
    CREATE TABLE stm_server_settings (
        server_id BIGINT PRIMARY KEY,
        settings TEXT NOT NULL
    );
    CREATE TABLE stm_user_opt_outs (
        user_id BIGINT PRIMARY KEY,
        since DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE stm_changes (
        position BIGINT PRIMARY KEY,
        kind TEXT NOT NULL,
        key TEXT,
        version BIGINT,
        channel_id BIGINT,
        user_id BIGINT,
        server_id BIGINT,
        origin TEXT NOT NULL,
        at DOUBLE PRECISION NOT NULL
    );
    CREATE TABLE stm_feed (
        id INTEGER PRIMARY KEY CHECK (id = 1),
        position BIGINT NOT NULL,
        pruned_through BIGINT NOT NULL
    );
    INSERT INTO stm_feed (id, position, pruned_through) VALUES (1, 0, 0);
    """,
    # Provenance as chains of versions (see lineage.py and store/chains.py), as on SQLite:
    # each row with distilled content becomes the first version of a chain of its own
    # whose members are its contributors.
    f"""
    CREATE TABLE stm_chains (
        id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        live_key TEXT NOT NULL,
        server_id BIGINT,
        head BIGINT NOT NULL,
        ended INTEGER NOT NULL DEFAULT 0
    );
    CREATE INDEX stm_chains_ended ON stm_chains (id) WHERE ended = 1;
    CREATE TABLE stm_chain_members (
        member BIGINT NOT NULL,
        chain_id BIGINT NOT NULL,
        first BIGINT NOT NULL,
        PRIMARY KEY (member, chain_id)
    );
    CREATE INDEX stm_members_by_chain ON stm_chain_members (chain_id);
    CREATE TABLE stm_chain_edges (
        parent BIGINT NOT NULL,
        child BIGINT NOT NULL,
        own INTEGER NOT NULL,
        parent_version BIGINT NOT NULL,
        child_version BIGINT NOT NULL,
        PRIMARY KEY (parent, child, own, parent_version)
    );
    CREATE INDEX stm_edges_by_child ON stm_chain_edges (child);
    CREATE TABLE stm_purge_ranges (
        position BIGINT NOT NULL,
        chain_id BIGINT NOT NULL,
        from_version BIGINT NOT NULL,
        done INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (position, chain_id)
    );
    CREATE INDEX stm_ranges_pending ON stm_purge_ranges (chain_id) WHERE done = 0;
    ALTER TABLE short_term_memories ADD COLUMN chain_id BIGINT;
    ALTER TABLE short_term_memories ADD COLUMN chain_version BIGINT;
    CREATE INDEX stm_by_chain ON short_term_memories (chain_id, chain_version);
    INSERT INTO stm_chains (id, live_key, server_id, head)
        SELECT id, key, server_id, 1 FROM short_term_memories WHERE {DISTILLED_SQL};
    SELECT setval(pg_get_serial_sequence('stm_chains', 'id'),
        (SELECT coalesce(max(id), 0) + 1 FROM stm_chains), false);
    UPDATE short_term_memories SET chain_id = id, chain_version = 1 WHERE {DISTILLED_SQL};
    INSERT INTO stm_chain_members (member, chain_id, first)
        SELECT c.user_id, c.memory_id, 1 FROM short_term_memory_contributors c
        JOIN short_term_memories m ON m.id = c.memory_id WHERE m.chain_id IS NOT NULL;
    DROP TABLE short_term_memory_contributors;
    """,
    # Crypto-shredding, as on SQLite (see shred.py): distilled text is stored encrypted
    # under a key of its row's own, in stm_keys; deleting or clearing a row deletes its key
    # in the same transaction. Rows stored in the clear by an earlier version are sealed by
    # migrate() right after this script.
    """
    CREATE TABLE stm_keys (
        slot BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
        key BYTEA NOT NULL CHECK (length(key) = 32)
    );
    ALTER TABLE short_term_memories ADD COLUMN key_slot BIGINT;
    CREATE FUNCTION stm_shred_on_delete() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.key_slot IS NOT NULL THEN
            DELETE FROM stm_keys WHERE slot = OLD.key_slot;
        END IF;
        RETURN OLD;
    END $$;
    CREATE TRIGGER stm_shred_on_delete AFTER DELETE ON short_term_memories
        FOR EACH ROW EXECUTE FUNCTION stm_shred_on_delete();
    CREATE FUNCTION stm_shred_on_clear() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.key_slot IS NOT NULL AND (NEW.key_slot IS DISTINCT FROM OLD.key_slot
                OR (NEW.summary IS NULL AND NEW.categories = '{}')) THEN
            DELETE FROM stm_keys WHERE slot = OLD.key_slot;
            IF NEW.key_slot IS NOT DISTINCT FROM OLD.key_slot THEN
                NEW.key_slot := NULL;
            END IF;
        END IF;
        RETURN NEW;
    END $$;
    CREATE TRIGGER stm_shred_on_clear BEFORE UPDATE OF summary, categories, key_slot
        ON short_term_memories FOR EACH ROW EXECUTE FUNCTION stm_shred_on_clear();
    """,
    # Purges plan their ranges in the store, round after round of edges followed.
    """
    ALTER TABLE stm_purge_ranges ADD COLUMN expanded INTEGER NOT NULL DEFAULT 1;
    """,  # A purge is planned in steps, each its own transaction: its plan's state.
    """
    CREATE TABLE stm_purges (
        position BIGINT PRIMARY KEY,
        user_id BIGINT NOT NULL,
        server_id BIGINT,
        erasure TEXT NOT NULL,
        planned INTEGER NOT NULL,
        cursor BIGINT NOT NULL
    );
    CREATE INDEX stm_purges_unplanned ON stm_purges (position) WHERE planned = 0;
    """,
    # Servers that removed the bot, cleared once their grace period is over.
    """
    CREATE TABLE stm_departures (
        server_id BIGINT PRIMARY KEY,
        left_at DOUBLE PRECISION NOT NULL
    );
    """,
)
# The migration after which rows stored in the clear are sealed.
_SEALING = 2

# The upsert of an upgraded row (``ops.save_values``, numbered).
_SAVE = operations.save_sql(",".join(f"${n}" for n in range(1, 19)), POSTGRES)
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

    async def schema_version(self) -> int:
        """The version recorded by the migrations."""
        self._check_open()
        return int(await self._value("SELECT version FROM stm_schema"))

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one transaction; one result per op. A batch of only
        ``Scrub`` vacuums the key table instead, outside any transaction."""
        self._check_open()
        if ops and all(isinstance(op, Scrub) for op in ops):
            async with self._acquire() as conn:
                # Destroyed keys are dead tuples until vacuumed; VACUUM (not FULL) takes no
                # lock that writers wait for. What it leaves is in docs/guarantees.md.
                await conn.execute("VACUUM stm_keys")
            return [None] * len(ops)
        async with self._acquire() as conn, transaction(conn):
            if any(_writes(op) for op in ops):
                # Before anything else: see the module's docstring.
                await conn.execute("SELECT 1 FROM stm_feed WHERE id = 1 FOR UPDATE")
            feed = _Feed(conn, self.origin)
            results = await _Session(conn, feed).run(operations.batch(ops, feed, POSTGRES))
            await feed.flush()
        return results

    @property
    def held_keys(self) -> int:
        """Always 0: row keys are read inside the transaction that uses them (``_Keys``)."""
        return 0

    async def forget_keys(self) -> None:
        """Nothing to drop: no row key outlives its transaction here."""

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

    async def load_server_settings(self) -> dict[int, str]:
        """Every stored server's settings JSON."""
        rows = await self.execute("SELECT server_id, settings FROM stm_server_settings")
        return {int(server): str(settings) for server, settings in rows}

    async def load_opt_outs(self) -> set[int]:
        """Every user who opted out."""
        return {int(row[0]) for row in await self.execute("SELECT user_id FROM stm_user_opt_outs")}

    async def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement outside the batch path (inspection, tests); return its rows."""
        self._check_open()
        async with self._acquire() as conn:
            return [tuple(row) for row in await conn.fetch(sql, *params)]

    async def _value(self, sql: str) -> Any:
        async with self._acquire() as conn:
            return await conn.fetchval(sql)

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
        return await self._reading(_check)

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
        return await self._reading(_run, procedure)

    async def _database_size(self) -> str:
        return _SIZE

    async def _reading(self, fn: Callable[..., Awaitable[_T]], *args: Any) -> _T:
        """``fn(conn, *args)`` in a read-only snapshot, its failures explained."""
        self._check_open()
        asyncpg = _asyncpg()
        try:
            async with (
                self._acquire() as conn,
                transaction(conn, isolation="repeatable_read", readonly=True),
            ):
                return await fn(conn, *args)
        except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
            raise StoreError(redact_text(_explain(self.path, exc), self._dsn)) from exc


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
            raise SchemaVersionError(
                f"{name} has schema version {version}, newer than this version of the library "
                f"understands ({len(MIGRATIONS)}); upgrade the library or use another database"
            )
        for number in range(version, len(MIGRATIONS)):
            await conn.execute(MIGRATIONS[number])
            if number == _SEALING:
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
    for memory_id, row_key, summary, categories in rows:
        key = shred.new_key()
        slot = await conn.fetchval("INSERT INTO stm_keys (key) VALUES ($1) RETURNING slot", key)
        cipher = ChaCha20Poly1305(key)
        await conn.execute(
            "UPDATE short_term_memories SET summary = $1, categories = $2, key_slot = $3 "
            "WHERE id = $4",
            None if summary is None else sealer.seal(cipher, row_key, summary),
            categories if categories == "{}" else sealer.seal(cipher, row_key, categories),
            slot,
            memory_id,
        )
    return len(rows)


class _Keys:
    """The live keys of the rows one run of upgrades writes: read in one statement, made
    for rows that have none, each with its cipher (see shred.py)."""

    def __init__(self) -> None:
        self.sealer = shred.TextSealer()
        self._live: dict[str, tuple[int, ChaCha20Poly1305]] = {}

    async def load(self, conn: Any, row_keys: list[str]) -> None:
        for row_key, slot, key in await conn.fetch(
            "SELECT m.key, k.slot, k.key FROM short_term_memories m "
            "JOIN stm_keys k ON k.slot = m.key_slot WHERE m.key = ANY($1::text[])",
            row_keys,
        ):
            self._live[row_key] = (int(slot), ChaCha20Poly1305(bytes(key)))

    async def seal(self, conn: Any, row: StoredRow) -> tuple[str | None, str, int | None]:
        """The row's summary, categories and key slot as stored."""
        categories = json.dumps(row.categories, ensure_ascii=False) if row.categories else "{}"
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

    def __init__(self, conn: Any, origin: str) -> None:
        super().__init__(origin)
        self.conn = conn

    async def now(self, change: Pending) -> int:
        """Write what is pending and ``change``; return ``change``'s position."""
        self.pending.append(change)
        return await self.flush()

    async def flush(self) -> int:
        """Write what is pending; the last position written (0: nothing)."""
        if not self.pending:
            return 0
        pending, self.pending = self.pending, []
        return await _write_feed(self.conn, pending, self.origin)


class _Session:
    """Runs the shared procedures (``chains``, ``ops``, ``feed``, ``operator``) on this
    connection, answering what only the store can: rows decrypted, rows sealed and
    written, a change's position."""

    def __init__(self, conn: Any, feed: _Feed | None = None) -> None:
        self.conn, self.feed = conn, feed
        self.keys = _Keys()

    async def run(self, procedure: operations.Procedure[_T]) -> _T:
        conn = self.conn
        result: Any = None
        try:
            while True:
                request = procedure.send(result)
                if isinstance(request, Step):
                    result = await _step(conn, request)
                elif isinstance(request, operations.Write):
                    sealed = await self.keys.seal(conn, request.row)
                    values = operations.save_values(request.row, request.pin, sealed, POSTGRES)
                    memory_id, version = await conn.fetchrow(_SAVE, *values)
                    result = int(memory_id), int(version)
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


async def _write_feed(conn: Any, changes: list[Pending], origin: str) -> int:
    last = int(
        await conn.fetchval(
            "UPDATE stm_feed SET position = position + $1 WHERE id = 1 RETURNING position",
            len(changes),
        )
    )
    first = last - len(changes) + 1
    at = time.time()
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
            schema = await conn.fetchval("SELECT to_regclass('stm_schema')")
            tables = await conn.fetchval(
                "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
            )
            version = 0 if schema is None else await conn.fetchval("SELECT version FROM stm_schema")
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        raise StoreError(redact_text(_explain(name, exc), store._dsn)) from exc
    if version is not None and version > len(MIGRATIONS):
        raise SchemaVersionError(
            f"{name} has schema version {version}, newer than this version of the library "
            f"understands ({len(MIGRATIONS)}); upgrade the library or use another database"
        )
    if schema is None:
        if tables:
            raise StoreError(f"{name} is not a short-term memory database (it holds other tables)")
        raise NoDatabase(f"no short-term memory database at {name} (nothing was created)")
    if require_current and (version or 0) < len(MIGRATIONS):
        raise StoreError(
            f"{name} has schema version {version or 0}, older than this library's "
            f"({len(MIGRATIONS)}); run 'python -m stm migrate' first"
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


async def _check(conn: Any) -> CheckReport:
    # PostgreSQL checks its own pages as it reads them (and its checksums, when enabled):
    # reading every row of every table is the check available without extensions.
    for table in _TABLES:
        await conn.fetchval(f"SELECT count(*) FROM (SELECT * FROM {table}) t")
    return await _run(conn, operator.check(["ok"], [], len(MIGRATIONS), POSTGRES))
