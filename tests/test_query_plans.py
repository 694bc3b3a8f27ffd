"""Query plans: purges, clears, the janitor and hydration reach rows through indexes.

Each operation runs through the store's own code on a traced connection; every
statement it issued is then explained, and none may scan a memory table. With
a million rows a scan turns a millisecond purge into a second.
"""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import stored_row

from stm._keys import server_key, user_key
from stm._lineage import Lineage, Pin
from stm.store import _chains as chains
from stm.store import _sqlite as sqlite_store
from stm.store._base import (
    PROVENANCE_TABLES,
    DeleteChannel,
    DeleteExpired,
    Guard,
    LoadChannelKeys,
    LoadRecent,
    LoadRows,
    Op,
    PreviewPurge,
    PurgeUser,
    SaveDistilled,
    StoredRow,
    SweepPurge,
    Touch,
)
from stm.store._chains import Step
from stm.store._sqlite import _run, migrate, prune_changes, read_changes, run_batch
from stm.store._sqlite import _step as run_step

TABLES = ("short_term_memories", *PROVENANCE_TABLES, "stm_changes")
NOW = time.time()


def row(key: str, server: int | None, user: int | None, channel: int) -> StoredRow:
    return stored_row(key, server, user, channel, updated_at=NOW)


@pytest.fixture
def db(tmp_path: Path) -> Iterator[sqlite3.Connection]:
    connection = sqlite3.connect(tmp_path / "plans.sqlite3", isolation_level=None)
    connection.execute("PRAGMA foreign_keys = ON")
    migrate(connection)
    saves = []
    for c in range(20):
        # One upgrade per channel: both rows one version, written from a prompt that showed
        # users 7 and 8 directly and the previous channel's notes.
        shown = Lineage(frozenset({7, 8}), other=(server_key(1, c - 1),) if c else ())
        saves += [
            SaveDistilled(row(user_key(7, c), 1, 7, c), lineage=shown),
            SaveDistilled(row(server_key(1, c), 1, None, c), lineage=shown),
        ]
    run_batch(connection, [*saves, Touch(tuple(s.row for s in saves))])
    # A feed long enough that a scan of it would show.
    run_batch(connection, [DeleteChannel(1000 + n) for n in range(50)])
    # A purge of someone else, still clearing: its ranges are on record.
    run_batch(connection, [PurgeUser(8, 1)])
    yield connection
    connection.close()


def statements_of(db: sqlite3.Connection, op: Op) -> list[str]:
    """The statements the store issues for ``op`` that read or write a memory table."""
    issued: list[str] = []
    db.set_trace_callback(issued.append)
    try:
        run_batch(db, [op])
    finally:
        db.set_trace_callback(None)
    return [
        sql
        for sql in issued
        if any(table in sql for table in TABLES) and not sql.lstrip().upper().startswith("PRAGMA")
    ]


# Columns too coarse to search by alone: "scope = 'user'" is half the table.
COARSE = {"scope"}
# Scans that read only what is there to find: the janitor's candidates for garbage
# collection are the ended chains, listed by a partial index of exactly them; a purge's
# window, and whether it has more than a chunk of ranges, are the rows of a subquery of
# their own, at most its LIMIT; a list of keys or ids is bound as one JSON array
# (``Dialect.in_list``), read whole to search the table by each of its values.
BOUNDED = {
    "SCAN c USING INDEX stm_chains_ended",
    "SCAN window_",
    "SCAN few",
    "SCAN json_each VIRTUAL TABLE INDEX 1:",
}


def scans(db: sqlite3.Connection, sql: str) -> list[str]:
    """The steps of ``sql``'s plan that read a whole table, or search an index by a
    coarse column alone (a scan of half the table by another name)."""
    plan = db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()
    found = []
    for *_, detail in plan:
        if detail.startswith("SCAN ") and detail not in BOUNDED:
            found.append(detail)
        elif detail.startswith("SEARCH ") and "(" in detail:
            terms = detail[detail.index("(") + 1 : detail.rindex(")")].split(" AND ")
            if {re.split(r"[=<>]", term)[0].strip() for term in terms} <= COARSE:
                found.append(detail)
    return found


OPERATIONS: dict[str, Op] = {
    "purge a user everywhere": PurgeUser(7, None),
    "purge a user in one server": PurgeUser(7, 1),
    "clear a channel": DeleteChannel(3),
    "janitor: delete expired rows": DeleteExpired(NOW - 12 * 3600, NOW - 24 * 3600),
    "hydrate keys": LoadRows((server_key(1, 2), user_key(7, 2)), NOW - 1e5, NOW - 1e5),
    "warm a server's recall group": LoadRecent("server", 1, None, None, 4, NOW - 1e5, NOW - 1e5),
    "warm a user's recall group": LoadRecent("user", 7, 1, None, 4, NOW - 1e5, NOW - 1e5),
    "list a channel's keys": LoadChannelKeys(3, NOW - 1e5, NOW - 1e5),
    "guarded upgrade": SaveDistilled(
        row(server_key(1, 2), 1, None, 2),
        Guard(
            after=45,
            channels=frozenset({2}),
            users=frozenset({7, 8}),
            server_id=1,
            pins=frozenset({Pin(1, 1)}),
        ),
        Lineage(frozenset({7}), other=(Pin(2, 1),)),
    ),
    "sweep a purge's next rows": SweepPurge(71),
    "preview a purge": PreviewPurge(7, None),
    "write behind with its guards": Touch(
        (row(user_key(7, 3), 1, 7, 3),), after=10, crude_before=NOW - 1e5, summary_before=NOW - 1e5
    ),
}


@pytest.mark.parametrize("name", list(OPERATIONS))
def test_operation_uses_indexes(db: sqlite3.Connection, name: str) -> None:
    """Every statement of the operation searches an index; none scans a memory table."""
    issued = statements_of(db, OPERATIONS[name])
    assert issued, "the operation issued no statement on a memory table"
    for sql in issued:
        assert scans(db, sql) == [], sql


def test_a_purge_of_many_versions_finds_them_through_indexes(db: sqlite3.Connection) -> None:
    """The purge reaches versions of every chain by the member index, the edges and the
    chain index, and the sweep its rows by the chain index: no statement scans."""
    issued = statements_of(db, PurgeUser(7, None, "complete"))
    assert any("stm_chain_edges" in sql for sql in issued)
    for sql in issued:
        assert scans(db, sql) == [], sql


def test_a_purge_in_one_server_finds_the_users_rows_by_the_user(db: sqlite3.Connection) -> None:
    """A statement of a purge in one server that looks for the user's own rows searches
    the user's index: the server's index of distilled rows would read all of the
    server's (a server of millions)."""
    issued = statements_of(db, PurgeUser(7, 1))
    mine = [sql for sql in issued if "user_id = " in sql and "short_term_memories" in sql]
    assert mine
    for sql in mine:
        plan = " ".join(d for *_, d in db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall())
        assert "stm_distilled_by_server" not in plan, sql


def test_a_search_by_scope_alone_is_caught(db: sqlite3.Connection) -> None:
    """The check fails on a search that only narrows by scope (half the table)."""
    assert scans(db, "DELETE FROM short_term_memories WHERE scope = 'user' AND user_id = 7")


def test_a_missing_index_is_caught(db: sqlite3.Connection) -> None:
    """The check fails when an index is gone: the channel clear then scans the table."""
    db.execute("DROP INDEX stm_by_channel")
    issued = statements_of(db, DeleteChannel(3))
    assert any(scans(db, sql) for sql in issued)


def traced(db: sqlite3.Connection, call: object) -> list[str]:
    """The statements ``call`` issued on the change feed."""
    return [sql for sql in traced_all(db, call) if "stm_changes" in sql]


@pytest.mark.parametrize(
    "name",
    ["read the feed", "prune the feed"],
)
def test_feed_statements_use_indexes(db: sqlite3.Connection, name: str) -> None:
    """A follower's read and the pruning find their rows through the position key or
    the time index, never a scan of the feed."""
    if name == "read the feed":
        issued = traced(db, lambda: read_changes(db, 40, 5))
    else:
        issued = traced(db, lambda: prune_changes(db, time.time() - 60, 0))
    assert issued
    for sql in issued:
        # sqlite_sequence holds one row per AUTOINCREMENT table (here one): nothing to find.
        assert [s for s in scans(db, sql) if s != "SCAN sqlite_sequence"] == [], sql


def test_the_look_for_unfinished_purges_reads_only_theirs(db: sqlite3.Connection) -> None:
    """Every process looks for purges left unfinished every ``ABANDONED_PURGE_SECONDS``:
    the look reads the ranges of unfinished purges and the unplanned purges, each through
    a partial index of exactly those, never the ranges finished purges leave until the
    feed is pruned past them."""
    issued = traced_all(db, lambda: _run(db, chains.pending_sweeps()))
    issued += traced_all(db, lambda: _run(db, chains.unplanned_purges()))
    assert issued
    partial = {"stm_ranges_unfinished", "stm_purges_unplanned"}
    for sql in issued:
        for *_, detail in db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall():
            if detail.startswith(("SCAN ", "SEARCH ")):
                assert detail.split(" USING INDEX ")[-1].split(" ")[0] in partial, (sql, detail)


def traced_all(db: sqlite3.Connection, call: object) -> list[str]:
    issued: list[str] = []
    db.set_trace_callback(issued.append)
    try:
        call()  # type: ignore[operator]
    finally:
        db.set_trace_callback(None)
    return issued


@pytest.mark.parametrize("name", ["guarded upgrade", "write behind with its guards"])
def test_a_guards_read_of_the_feed_reads_only_its_deletes(
    db: sqlite3.Connection, name: str
) -> None:
    """An upgrade's guard and a write-behind batch read the feed's deletes after their
    position through the index of deletes alone, never through the upgrades between (a
    busy server writes thousands)."""
    reads = [sql for sql in statements_of(db, OPERATIONS[name]) if "kind IN" in sql]
    assert reads
    for sql in reads:
        plan = [d for *_, d in db.execute(f"EXPLAIN QUERY PLAN {sql}").fetchall()]
        assert any("USING INDEX stm_changes_deletes" in d for d in plan), (sql, plan)


def test_a_run_of_upgrades_issues_as_many_statements_however_many_it_holds(
    db: sqlite3.Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain work of a run of upgrades (each extending its chain, from a prompt that
    showed people and other channels' notes) is a fixed number of statements, not a few
    per upgrade: on PostgreSQL each statement is a round trip, and a run holds up to a
    hundred upgrades."""

    def run_of(size: int, first: int) -> list[SaveDistilled]:
        saves = []
        for n in range(size):
            c = n % 20  # every channel's chain, extended again
            shown = Lineage(
                frozenset({7, 8, first + n}),
                own=(server_key(1, c),),
                other=(server_key(1, (c + 1) % 20), Pin(1, 1)),
            )
            saves.append(SaveDistilled(row(server_key(1, c), 1, None, c), lineage=shown))
        return saves

    def chain_statements(saves: list[SaveDistilled]) -> int:
        # Each step a procedure asks of the store (one statement, or one statement for
        # many rows) is what PostgreSQL sends as one round trip.
        steps: list[Step] = []

        def counted(connection: sqlite3.Connection, step: Step) -> object:
            steps.append(step)
            return run_step(connection, step)

        monkeypatch.setattr(sqlite_store, "_step", counted)
        run_batch(db, saves)
        return sum("stm_chain" in step.sql for step in steps)

    chain_statements(run_of(20, 50))  # a chain of every channel's own (the purge cleared theirs)
    few, many = chain_statements(run_of(4, 100)), chain_statements(run_of(20, 200))
    assert few == many, (few, many)
