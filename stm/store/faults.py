"""Which store failures are permanent (the operation can never succeed) and which pass.

The single writer retries what may pass (a lock, a full disk, an I/O error) and
rejects what never will (an integer out of range, text the driver cannot
encode, a constraint that will never hold), so that one poison operation
cannot hold up the queue behind it.
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


def is_permanent(exc: BaseException) -> bool:
    """True when running the same operation again can never succeed."""
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF not in _TRANSIENT_CODES
        # Errors raised before SQLite ran anything (a value it cannot bind).
        return isinstance(exc, sqlite3.InterfaceError | sqlite3.ProgrammingError)
    # Raised while binding a value: an int beyond 64 bits, a lone surrogate, a bad type.
    return isinstance(exc, OverflowError | UnicodeError | TypeError | ValueError)
