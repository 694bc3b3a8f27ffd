"""Where SQLite's SQL and PostgreSQL's differ, side by side: everything else is one text.

The shared procedures (``ops``, ``feed``, ``operator``, ``chains``) write each
statement once, with ``:name`` parameters; a store runs them as they are (SQLite)
or numbered (PostgreSQL, ``chains.positional``). What cannot be one text is a
field of :class:`Dialect`: the larger of two values, a threshold's type, a list of
values, a boolean column's value, the feed's newest position, the schema version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .._expiry import expired_sql

__all__ = ["BOUND_VALUES", "POSTGRES", "SQLITE", "Dialect"]

_T = TypeVar("_T")
# Values one statement takes at most where a list is not one array (SQLite): a bounded
# amount of work per statement.
BOUND_VALUES = 500


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one database spells what the other spells differently."""

    name: str
    # The larger of two values (SQLite's two-argument ``max``).
    greatest: str
    # What follows a float parameter that the server cannot type by itself.
    real_cast: str
    # A list parameter bound as one array (PostgreSQL), or as one JSON array (SQLite).
    arrays: bool
    # A boolean column's value as bound.
    flag: Callable[[bool], Any]
    # The newest position the feed gave (one row, its value None or 0 when none).
    position: str
    # The same, locking the feed against other writers until the transaction ends.
    position_locked: str
    # The schema version the database records (one row).
    schema_version: str

    def expired(self, crude: str = "crude", summary: str = "summary") -> str:
        """The expiry rule (``stm/_expiry.py``) with thresholds ``:crude`` and ``:summary``."""
        return expired_sql(f":{crude}{self.real_cast}", f":{summary}{self.real_cast}")

    def values(self, count: int) -> str:
        """``count`` parameters bound by position, in order."""
        if self.arrays:
            return ",".join(f"${n}" for n in range(1, count + 1))
        return ",".join("?" * count)

    def chunks(self, values: Sequence[_T], width: int = 1) -> Iterator[Sequence[_T]]:
        """``values`` (each ``width`` parameters) in runs one statement can bind (for
        ``in_list`` and ``table``): all at once on PostgreSQL, else at most ``BOUND_VALUES``
        values at a time."""
        size = max(1, len(values) if self.arrays else BOUND_VALUES // width)
        for start in range(0, len(values), size):
            yield values[start : start + size]

    def in_list(
        self, column: str, name: str, values: Sequence[Any], array_type: str
    ) -> tuple[str, dict[str, Any]]:
        """``column`` is one of ``values``: the condition and its parameters (``array_type``
        is the PostgreSQL type of the array, ``text[]`` or ``bigint[]``).

        One parameter whatever the number of values, so one statement text: a list spelled
        as one parameter per value makes a statement of every length, each prepared on its
        own and kept in the connection's statement cache (128 of them, some of thousands of
        values: tens of MiB of SQLite's memory that grew with the number of users seen)."""
        if self.arrays:
            return f"{column} = ANY(:{name}::{array_type})", {name: list(values)}
        return f"{column} IN (SELECT value FROM json_each(:{name}))", {name: _json(values)}

    def table(
        self, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[Any]]
    ) -> tuple[str, dict[str, Any]]:
        """``rows`` as a table ``name`` to join, its ``columns`` named with their PostgreSQL
        types (``bigint``): the table's SQL and its parameters, one array a column (one
        statement text whatever the number of rows, as for ``in_list``)."""
        if self.arrays:
            arrays = ", ".join(f":{name}_{column}::{kind}[]" for column, kind in columns)
            names = ", ".join(column for column, _ in columns)
            params = {
                f"{name}_{column}": [row[i] for row in rows]
                for i, (column, _) in enumerate(columns)
            }
            return f"unnest({arrays}) AS {name}({names})", params
        picked = ", ".join(
            f"json_extract(value, '$[{i}]') AS {column}" for i, (column, _) in enumerate(columns)
        )
        return (
            f"(SELECT {picked} FROM json_each(:{name})) AS {name}",
            {name: _json([list(row) for row in rows])},
        )


def _json(values: Sequence[Any]) -> str:
    """``values`` as SQLite's ``json_each`` reads them (ids stay integers, keys text)."""
    return json.dumps(list(values), separators=(",", ":"))


SQLITE = Dialect(
    name="sqlite",
    greatest="max",
    real_cast="",
    arrays=False,
    # Bound as an int: for a bool, the sqlite3 module first looks for an adapter.
    flag=int,
    # AUTOINCREMENT keeps the highest position ever given in sqlite_sequence, even once
    # pruning has emptied the table; a writer holds the lock from BEGIN IMMEDIATE.
    position="SELECT seq FROM sqlite_sequence WHERE name = 'stm_changes'",
    position_locked="SELECT seq FROM sqlite_sequence WHERE name = 'stm_changes'",
    schema_version="PRAGMA user_version",
)

POSTGRES = Dialect(
    name="postgres",
    greatest="greatest",
    real_cast="::float8",
    arrays=True,
    flag=bool,
    # Positions come from one counter row (see _postgres.py).
    position="SELECT position FROM stm_feed WHERE id = 1",
    position_locked="SELECT position FROM stm_feed WHERE id = 1 FOR UPDATE",
    schema_version="SELECT version FROM stm_schema",
)
