"""Which store failures are permanent (the operation can never succeed) and which pass.

The single writer retries what may pass (a lock, a full disk, an I/O error, a
lost connection) and rejects what never will (an integer out of range, text the
driver cannot encode, a constraint that will never hold), so that one poison
operation cannot hold up the queue behind it. SQLite tells by result code,
PostgreSQL by SQLSTATE class.
"""

from __future__ import annotations

import sqlite3

__all__ = ["is_permanent"]

# Result codes (low byte) of a condition that belongs to the moment, not to the operation.
# A generic SQLITE_ERROR ("no such table", a schema another process is changing) is
# counted here too: dropping a purge for it would be worse than retrying it.
_TRANSIENT_CODES = frozenset(
    {
        sqlite3.SQLITE_ERROR,
        sqlite3.SQLITE_BUSY,
        sqlite3.SQLITE_LOCKED,
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_PROTOCOL,
        sqlite3.SQLITE_NOMEM,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
        sqlite3.SQLITE_INTERRUPT,
        sqlite3.SQLITE_ABORT,
        sqlite3.SQLITE_SCHEMA,
    }
)


# PostgreSQL error classes (the first two characters of SQLSTATE) of an operation that
# can never succeed: a value the column cannot hold (22), a constraint it breaks (23), a
# limit of the server it exceeds (54). Every other class belongs to the moment: a lock
# or statement timeout (55P03, 57014), a terminated or lost connection (57P01, 08),
# read-only or without grants (25006, 42501), a full disk (53100), a server starting
# or shutting down (57P03).
_PERMANENT_SQLSTATE_CLASSES = frozenset({"22", "23", "54"})


def is_permanent(exc: BaseException) -> bool:
    """True when running the same operation again can never succeed."""
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str):  # asyncpg's server errors, without importing asyncpg
        return sqlstate[:2] in _PERMANENT_SQLSTATE_CLASSES
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF not in _TRANSIENT_CODES
        # Errors raised before SQLite ran anything (a value it cannot bind).
        return isinstance(exc, sqlite3.InterfaceError | sqlite3.ProgrammingError)
    # Raised while binding a value: an int beyond 64 bits, a lone surrogate, a bad type.
    return isinstance(exc, OverflowError | UnicodeError | TypeError | ValueError)
