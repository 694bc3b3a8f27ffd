"""How the PostgreSQL store connects: the time limits every connection of it works under.

SQLite waits ``STM_BUSY_TIMEOUT_MS`` for a lock and then answers; a PostgreSQL
session, left to its defaults, waits for a row lock without limit, and a
session of a process that froze mid-transaction (or whose machine vanished)
keeps its locks until TCP notices, hours later. So every connection, pooled
or listening, is opened with:

- ``lock_timeout`` = ``STM_BUSY_TIMEOUT_MS``: the same wait for another
  process's lock as on SQLite (0 there means "do not wait"; here it would mean
  "no limit", so it becomes 1 ms);
- ``statement_timeout`` = ``STM_STATEMENT_TIMEOUT_MS``: a statement that runs
  longer is cancelled by the server;
- ``idle_in_transaction_session_timeout`` = ``STM_STATEMENT_TIMEOUT_MS``: a
  session of ours that sits inside a transaction that long is frozen or gone,
  and the server ends it, releasing every lock it held, for the other processes;
- TCP keepalives on the server's side (``tcp_keepalives_*``), so a session
  whose client machine vanished is noticed in about a minute;
- on the client's side, a connect timeout and a command timeout (the statement
  timeout and a little more: a server or network that stopped answering never
  sends the cancellation), and a bound on waiting for a pooled connection.

Every wait of the store is therefore bounded, and a bounded wait ends in an
error the writer treats as passing: the upgrade's caller hears "not saved",
deletes are retried until they land. Pure: no I/O but the one check below.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from .._errors import StoreError

__all__ = ["KEEPALIVES", "Limits", "pooled", "transaction", "unwritable_tables"]

# Seconds of silence before the server probes a client, between probes, and probes lost
# before it drops the session (ignored on Unix-domain sockets).
KEEPALIVES = {
    "tcp_keepalives_idle": "30",
    "tcp_keepalives_interval": "10",
    "tcp_keepalives_count": "3",
}
# How long past the server's statement timeout the client waits for its answer.
_CLIENT_SLACK_SECONDS = 1.0


@dataclass(frozen=True, slots=True)
class Limits:
    """The time limits of a PostgreSQL store's connections, in milliseconds."""

    lock_ms: int = 5000
    statement_ms: int = 10_000

    def server_settings(self, *, read_only: bool = False) -> dict[str, str]:
        """The session settings every connection starts with."""
        settings = {
            "lock_timeout": str(max(1, int(self.lock_ms))),
            "statement_timeout": str(max(1, int(self.statement_ms))),
            "idle_in_transaction_session_timeout": str(max(1, int(self.statement_ms))),
            **KEEPALIVES,
        }
        if read_only:
            settings["default_transaction_read_only"] = "on"
        return settings

    @property
    def command_seconds(self) -> float:
        """How long the client waits for the answer to one command."""
        return self.statement_ms / 1000 + _CLIENT_SLACK_SECONDS

    @property
    def connect_seconds(self) -> float:
        """How long the client waits for a new connection (TCP, TLS, authentication)."""
        return max(1.0, self.statement_ms / 1000)

    @property
    def acquire_seconds(self) -> float:
        """How long a caller waits for a pooled connection (connecting one included)."""
        return self.connect_seconds + self.command_seconds

    def connect_kwargs(self, *, read_only: bool = False) -> dict[str, Any]:
        """Keyword arguments of ``asyncpg.connect`` and ``asyncpg.create_pool``."""
        return {
            "timeout": self.connect_seconds,
            "command_timeout": self.command_seconds,
            "server_settings": self.server_settings(read_only=read_only),
        }


# Every table of the store, now and after later migrations (they share these prefixes).
_OWN_TABLES = r"relname LIKE 'stm\_%' OR relname LIKE 'short\_term\_%'"
UNWRITABLE_SQL = (
    "SELECT c.relname || ' (no ' || string_agg(p.privilege, ', ' ORDER BY p.n) || ')' "
    "FROM pg_class c CROSS JOIN unnest(ARRAY['SELECT', 'INSERT', 'UPDATE', 'DELETE']) "
    "WITH ORDINALITY AS p (privilege, n) "
    "WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' "
    f"AND ({_OWN_TABLES}) AND NOT has_table_privilege(c.oid, p.privilege) "
    "GROUP BY c.relname ORDER BY c.relname"
)


async def unwritable_tables(conn: Any) -> list[str]:
    """Why this session cannot write the store's tables: a read-only session (a standby,
    ``default_transaction_read_only``), or each table and privilege its role lacks."""
    if await conn.fetchval("SELECT current_setting('transaction_read_only')") == "on":
        return ["the session is read-only (transaction_read_only is on)"]
    return [str(row[0]) for row in await conn.fetch(UNWRITABLE_SQL)]


def _drop(conn: Any) -> None:
    """Close ``conn`` at once, without a word to the server (which rolls back what it had
    open); one already closed or handed back, as a timed-out command leaves it, stays so."""
    with contextlib.suppress(Exception):
        conn.terminate()


@contextlib.asynccontextmanager
async def pooled(pool: Any, name: str, limits: Limits) -> AsyncIterator[Any]:
    """A connection of ``pool``, waited for at most ``limits.acquire_seconds``. A command
    the server did not answer in time (the client's timeout, a TimeoutError with no
    message) becomes a StoreError that says so; the connection is dropped, since its
    answer may still come."""
    try:
        conn = await pool.acquire(timeout=limits.acquire_seconds)
    except TimeoutError as exc:
        raise _no_answer(name, limits, "for a connection") from exc
    try:
        yield conn
    except TimeoutError as exc:
        _drop(conn)
        raise _no_answer(name, limits, "") from exc
    finally:
        await pool.release(conn, timeout=limits.command_seconds)


@contextlib.asynccontextmanager
async def transaction(conn: Any, **options: Any) -> AsyncIterator[None]:
    """``conn.transaction(**options)``, but after a command that got no answer the
    connection is dropped at once instead of sending a ROLLBACK that would wait as long
    again (the server rolls back a transaction whose connection is gone)."""
    started = conn.transaction(**options)
    # Whatever stops BEGIN, COMMIT or ROLLBACK half-way (a task cancelled as the memory
    # closes, above all) leaves the connection in a state nobody knows: it is dropped,
    # not handed back to the pool, which would reset it and log an error.
    try:
        await started.start()
    except BaseException:
        _drop(conn)
        raise
    try:
        yield
    except TimeoutError:
        _drop(conn)
        raise
    except BaseException:
        # A connection the server dropped cannot roll back (the server did): the error
        # that broke the transaction is the one to report.
        try:
            await started.rollback()
        except asyncio.CancelledError:
            _drop(conn)
            raise  # cancelled again while rolling back: the cancel wins
        except Exception:
            _drop(conn)
        raise
    try:
        await started.commit()
    except BaseException:
        _drop(conn)
        raise


def _no_answer(name: str, limits: Limits, waiting: str) -> StoreError:
    return StoreError(
        f"short-term memory database {name} did not answer {waiting} within "
        f"{limits.acquire_seconds if waiting else limits.command_seconds:g} s "
        "(STM_STATEMENT_TIMEOUT_MS)".replace("  ", " ")
    )
