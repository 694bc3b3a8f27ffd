"""The operator's reads (``base.Inspector``), written once for both stores as procedures.

Counts, one row, a channel's rows, what the database holds about one user, the
rows past their TTL and the checks every database answers the same way; each store
runs them on its read-only connection in one snapshot (see ``ops`` for the requests
beyond ``chains.Step``). What only one database can say comes in as a parameter:
the size of the database, its own integrity checks.
"""

from __future__ import annotations

from typing import Any

from .._expiry import DISTILLED_SQL
from .._lineage import Erasure
from . import _chains as chains
from ._base import CheckReport, StoredRow, StoreStats, UserHoldings
from ._chains import Step
from ._dialect import Dialect
from ._feed import current_position
from ._ops import Procedure, Rows, note_history

__all__ = [
    "check",
    "count_expired",
    "holdings",
    "opt_outs",
    "row",
    "rows_of_channel",
    "schema_version",
    "server_settings",
    "stats",
]

_COUNT = "SELECT count(*) FROM short_term_memories"
_USERS = (
    "SELECT count(*) FROM (SELECT user_id FROM short_term_memories "
    "WHERE user_id IS NOT NULL UNION SELECT member FROM stm_chain_members) u"
)


def _value(sql: str, params: dict[str, Any] | None = None) -> Procedure[Any]:
    row = yield Step(sql, params or {}, "one")
    return None if row is None else row[0]


def stats(
    thresholds: tuple[float, float],
    soon: tuple[float, float],
    dialect: Dialect,
    size: int | str,
) -> Procedure[StoreStats]:
    """Counts; ``thresholds`` and ``soon`` are (crude_before, summary_before) now and at
    the end of the "near expiry" window; ``size`` is the database's bytes, or the SQL that
    counts them."""
    now = {"crude": thresholds[0], "summary": thresholds[1]}
    # Near expiry: expired by the end of the window, not yet now.
    window = {**now, "crude_soon": soon[0], "summary_soon": soon[1]}
    later = dialect.expired("crude_soon", "summary_soon")
    rows = yield Step("SELECT scope, count(*) FROM short_term_memories GROUP BY scope", {}, "all")
    by_scope = {"server": 0, "user": 0} | {str(s): int(n) for s, n in rows}
    servers = "SELECT count(DISTINCT server_id) FROM short_term_memories"
    return StoreStats(
        entries=sum(by_scope.values()),
        entries_by_scope=by_scope,
        distilled=int((yield from _value(f"{_COUNT} WHERE {DISTILLED_SQL}"))),
        servers=int((yield from _value(servers))),
        users=int((yield from _value(_USERS))),
        expired=int((yield from _value(f"{_COUNT} WHERE {dialect.expired()}", now))),
        near_expiry=int(
            (yield from _value(f"{_COUNT} WHERE {later} AND NOT ({dialect.expired()})", window))
        ),
        opt_outs=int((yield from _value("SELECT count(*) FROM stm_user_opt_outs"))),
        server_settings=int((yield from _value("SELECT count(*) FROM stm_server_settings"))),
        schema_version=int((yield from _value(dialect.schema_version))),
        database_bytes=size if isinstance(size, int) else int((yield from _value(size))),
        feed_position=(yield from current_position(dialect)),
    )


def row(key: str) -> Procedure[StoredRow | None]:
    """The row under ``key``, expired or not."""
    rows = yield Rows("WHERE key = :key", {"key": key})
    return rows[0] if rows else None


def rows_of_channel(channel_id: int) -> Procedure[list[StoredRow]]:
    """Every row of a channel, any scope or persona, newest first."""
    where = "WHERE channel_id = :channel ORDER BY updated_at DESC, key"
    rows: list[StoredRow] = yield Rows(where, {"channel": channel_id})
    return rows


def holdings(user_id: int, erasure: Erasure, dialect: Dialect) -> Procedure[UserHoldings]:
    """The user's own rows, the other rows a purge of the user under ``erasure`` would
    clear (they may hold the user's words), newest first, and the opt-out."""
    params = {"user": user_id}
    # "+scope": SQLite's planner then keeps to the user's index (see chains._OWN_ROWS).
    own = yield Rows("WHERE +scope = 'user' AND user_id = :user ORDER BY updated_at DESC", params)
    ids = yield from chains.reached(user_id, None, erasure)
    contributed: list[StoredRow] = []
    for chunk in dialect.chunks(ids):
        where, named = dialect.in_list("m.id", "ids", chunk, "bigint[]")
        contributed += yield Rows(
            f"WHERE {where} AND NOT (scope = 'user' AND user_id = :user)", {**named, **params}
        )
    contributed.sort(key=lambda found: (-found.updated_at, found.key))
    since = yield from _value("SELECT since FROM stm_user_opt_outs WHERE user_id = :user", params)
    history = {}
    for row in own:  # the user's own entries: a handful, one per channel and persona
        history[row.key] = yield from note_history(row.key)
    opted = None if since is None else float(since)
    return UserHoldings(user_id, own, contributed, opted, history)


def count_expired(thresholds: tuple[float, float], dialect: Dialect) -> Procedure[int]:
    """Rows the janitor would delete now."""
    params = {"crude": thresholds[0], "summary": thresholds[1]}
    return int((yield from _value(f"{_COUNT} WHERE {dialect.expired()}", params)))


def check(
    own_checks: Procedure[tuple[list[str], list[str]]], code_version: int, dialect: Dialect
) -> Procedure[CheckReport]:
    """The report of the database's own checks (``own_checks``: its integrity, and the rows
    that refer to missing rows), with the rows that pin a chain the database does not
    hold, and the schema version."""
    integrity, foreign_keys = yield from own_checks
    orphans = yield from chains.orphans()
    version = yield from schema_version(dialect)
    return CheckReport(version, code_version, integrity, [*foreign_keys, *orphans])


def schema_version(dialect: Dialect) -> Procedure[int]:
    """The schema version the database records."""
    return int((yield from _value(dialect.schema_version)))


def server_settings() -> Procedure[dict[int, str]]:
    """Every stored server's settings JSON."""
    rows = yield Step("SELECT server_id, settings FROM stm_server_settings", {}, "all")
    return {int(server): str(settings) for server, settings in rows}


def opt_outs() -> Procedure[set[int]]:
    """Every user who opted out."""
    rows = yield Step("SELECT user_id FROM stm_user_opt_outs", {}, "all")
    return {int(row[0]) for row in rows}
