"""Chains of versions in SQL: what both stores run to keep provenance, and to purge by it.

The model of ``_lineage.py`` as tables, and its procedures written once: how an
upgrade extends its chain and records what its prompt showed, how a purge plans
its ranges and clears them in bounded chunks, what a preview counts. Each
procedure is a generator that yields the statements it needs, one :class:`Step`
at a time, and receives each one's result; a store runs it with its own
connection (SQLite synchronously on its thread, PostgreSQL on asyncpg) and the
same named parameters (``:name``; :func:`positional` gives PostgreSQL's).

Tables (both stores, same columns; flags are integers so that one statement
serves both):

- ``stm_chains``: one per chain (``live_key``, the key whose notes it is; its
  ``server_id``, None in DMs; ``head``, its newest version; ``ended`` once its
  live row no longer holds it (a purge cleared it, the row was deleted, or a new
  chain took its place): it is never extended again, and it is a candidate for
  garbage collection);
- ``stm_chain_members``: who was shown directly to a chain, from which version
  (``first``), and the chain's server beside it (None in DMs, and in rows an earlier
  version added);
- ``stm_chain_edges``: which versions of a chain were written from which
  versions of another (``own``: the notes' own content, followed by every policy);
- ``stm_purge_ranges``: each purge's ranges by feed position, and whether its
  sweep is ``done``; kept as long as the feed keeps the purge, for the guards of
  turns that began before it.

A row of ``short_term_memories`` with distilled content pins one version
(``chain_id``, ``chain_version``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Literal, TypeVar

from .._lineage import Erasure, Lineage, Pin, PurgePlanner, Range, merge_edges
from ._base import (
    Change,
    Guard,
    PurgePhase,
    PurgePreview,
    PurgeResult,
    PurgeTotals,
    PurgeUser,
    SaveDistilled,
    StoredRow,
    SweepStep,
)
from ._dialect import Dialect

__all__ = [
    "PREVIEW_TABLES",
    "SWEEP_CHUNK",
    "Procedure",
    "Step",
    "Versions",
    "collect",
    "forget_purges",
    "guard_ranges",
    "inspect_preview",
    "left",
    "live_of",
    "members",
    "orphans",
    "pending_sweeps",
    "pinned",
    "planned_ranges",
    "positional",
    "preview",
    "purge",
    "ranges_of",
    "reach",
    "reached",
    "sweep",
    "upgrades",
]

_T = TypeVar("_T")
# Rows cleared per transaction by a purge: each clear also destroys its row's key, so
# this bounds how long a purge holds the write lock (other work runs between chunks).
SWEEP_CHUNK = 60
# Chains a purge's plan takes from the user's memberships per step, chains whose edges it
# follows per step (each marked twice: costlier than a seed), and the steps it takes per
# transaction: steps go on until a chunk's worth of work is spent, seeds and follows
# counted together (half a chunk of seeds and half of follows make one), so a transaction
# does less than two chunks' worth.
SEED_CHUNK = 1000
FOLLOW_CHUNK = 500
PLAN_STEPS = 4
# Ranges a purge of wide reach tells, with what they reach, per transaction (a full page
# of 2,000 held the write lock 32-70 ms at a million rows; one of 500, 36 ms at most).
REACH_PAGE = 500
# Chains a purge finishes per transaction once their rows are cleared (three statements
# each).
FINISH_CHUNK = 75
# Chains garbage-collected per janitor step.
COLLECT_CHUNK = 500
# The share of the chunks above a purge's first transaction takes: a purge of a few
# memberships still plans, clears and finishes in it; one of wide reach says where it
# reaches sooner. Later steps take the share the writer asks for each kind of work
# (``SweepPurge.size_of``).
FIRST_STEP_SIZE = 0.1


def scaled(chunk: int, size: float) -> int:
    """``chunk`` scaled by ``size`` (at most 1): at least one."""
    return max(1, min(chunk, round(chunk * size)))


# The share of its chunk each kind of a step's work takes (see ``SweepPurge.size_of``).
Sizing = Callable[[PurgePhase], float]


def _sizing(size: float | Sizing) -> Sizing:
    """``size`` as a share per kind of work: one share for every kind, when a number."""
    if callable(size):
        return size
    return lambda _phase: size


Mode = Literal["one", "all", "exec", "many", "count"]


@dataclass(frozen=True, slots=True)
class Step:
    """One statement of a procedure: ``one`` row (or None), ``all`` rows, ``exec`` (no
    result), ``many`` (``params`` a sequence of mappings), ``count`` (rows changed)."""

    sql: str
    params: Mapping[str, Any] | Sequence[Mapping[str, Any]]
    mode: Mode


Procedure = Generator[Step, Any, _T]

_NAMED = re.compile(r"(?<![:\w]):([a-z_][a-z0-9_]*)")


def positional(sql: str) -> tuple[str, list[str]]:
    """``sql`` with ``:name`` parameters as PostgreSQL's ``$1``, ``$2``, ..., and the names
    in that order (a name used twice is one parameter)."""
    names: list[str] = []

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in names:
            names.append(name)
        return f"${names.index(name) + 1}"

    # ``+scope`` keeps SQLite's planner on the user index (see _OWN_ROWS); PostgreSQL
    # chooses well without it, and has no unary plus for text.
    return _NAMED.sub(number, sql.replace("+scope", "scope")), names


# -- statements ------------------------------------------------------------------------
_NEW_CHAIN = (
    "INSERT INTO stm_chains (live_key, server_id, head, ended) "
    "VALUES (:key, :server, 1, 0) RETURNING id"
)
_MEMBER = (
    "INSERT INTO stm_chain_members (member, chain_id, first, server_id) "
    "VALUES (:member, :chain, :first, :server) ON CONFLICT DO NOTHING"
)
_DROP_EDGE = (
    "DELETE FROM stm_chain_edges WHERE parent = :parent AND child = :child AND own = :own "
    "AND parent_version = :parent_version"
)
_ADD_EDGE = (
    "INSERT INTO stm_chain_edges (parent, child, own, parent_version, child_version) "
    "VALUES (:parent, :child, :own, :parent_version, :child_version)"
)
# "+scope" keeps SQLite's planner off stm_by_group, whose leading scope column would match
# half the table; the user's own index finds the few rows.
_OWN_ROWS = "DELETE FROM short_term_memories WHERE +scope = 'user' AND user_id = :user"
# (grouped by server once ``_in_server`` has added its condition). "+chain_id" keeps
# SQLite off stm_distilled_by_server, which would read every distilled row of the server
# (its server_id and chain_id match a purge in one server); the user's index finds the few.
_OWN_DISTILLED = (
    "SELECT server_id, count(*) FROM short_term_memories WHERE +scope = 'user' "
    "AND user_id = :user AND +chain_id IS NOT NULL"
)
_SEEDS = (
    "SELECT m.chain_id, m.first FROM stm_chain_members m JOIN stm_chains c ON c.id = m.chain_id "
    "WHERE m.member = :user"
)
# The servers of the chains the user is a member of: where a purge of theirs may reach.
# Each server is the next one after the last in the user's memberships by server (one
# search of stm_members_by_server per server, however many memberships: a join read all
# 10,000 of a user's and hash-joined every chain against them, 46 ms on PostgreSQL);
# memberships without one (DMs, or rows an earlier version added) look up their chain's.
# A membership whose chain is gone gives None, which only adds the DMs.
_SERVERS = (
    "WITH RECURSIVE s(server_id) AS ("
    "SELECT min(server_id) FROM stm_chain_members WHERE member = :user "
    "UNION ALL SELECT (SELECT min(m.server_id) FROM stm_chain_members m "
    "WHERE m.member = :user AND m.server_id > s.server_id) FROM s "
    "WHERE s.server_id IS NOT NULL) "
    "SELECT server_id FROM s WHERE server_id IS NOT NULL UNION "
    "SELECT (SELECT c.server_id FROM stm_chains c WHERE c.id = m.chain_id) "
    "FROM stm_chain_members m WHERE m.member = :user AND m.server_id IS NULL"
)
_CHILDREN = (
    "SELECT child, own, parent_version, child_version FROM stm_chain_edges "
    "WHERE parent = :parent AND parent_version >= :from_version"
)
# A purge's progress, as its rows in ``stm_purges`` and ``stm_purge_ranges`` keep it: the
# stored integers, named once here (the SQL below is written with these names).


class Cursor(IntEnum):
    """``stm_purges.cursor``: how far planning and telling got. A value >= 0 is a chain id
    (the last chain seeded while planning; the last chain told while telling)."""

    NOT_SEEDED = -1  # nothing seeded yet
    SEEDED_ALL = -2  # every membership seeded: planning follows edges
    TOLD_BY_EARLIER = -3  # told whole by an earlier version (told again from the first)
    TOLD_REACH = -4  # every range and what it reaches told: clearing comes next


class Expanded(IntEnum):
    """``stm_purge_ranges.expanded``: where a chain reached stands."""

    TO_FOLLOW = 0  # reached; its edges still to follow
    FOLLOWED = 1  # its edges followed (a range's default)
    FOLLOWING = 2  # in the frontier being followed
    FINISHED = 3  # the purge ended the chain and forgot its user as a member


class Done(IntEnum):
    """``stm_purge_ranges.done``: whether a range's rows are cleared."""

    TO_CLEAR = 0
    PURGE_DONE = 1  # the whole purge is done
    CLEARED = 2  # its rows cleared, its chain not finished yet


# Planning in the store, set by set (a purge may reach thousands of chains: one statement
# each would hold the write lock for as long), with ``Expanded`` marking each chain reached.
# A purge's plan: who, where, by which policy, and how far it has got (``cursor``: the
# last chain seeded from the user's memberships; ``planned`` once every range is known).
_PLAN = (
    "INSERT INTO stm_purges (position, user_id, server_id, erasure, planned, cursor) "
    f"VALUES (:position, :user, :server, :erasure, 0, {Cursor.NOT_SEEDED:d})"
)
_PLAN_STATE = (
    "SELECT user_id, server_id, erasure, planned, cursor FROM stm_purges WHERE position = :position"
)
# The next chunk of the user's memberships, in chain order, straight into the ranges.
_SEED = (
    "INSERT INTO stm_purge_ranges (position, chain_id, from_version, done, expanded) "
    f"SELECT :position, m.chain_id, m.first, {Done.TO_CLEAR:d}, {Expanded.TO_FOLLOW:d} "
    "FROM stm_chain_members m JOIN stm_chains c "
    "ON c.id = m.chain_id WHERE m.member = :user AND m.chain_id > :cursor{server} "
    "ORDER BY m.chain_id LIMIT :limit"
)
_SEEDED = (
    "UPDATE stm_purges SET cursor = (SELECT max(chain_id) FROM stm_purge_ranges "
    "WHERE position = :position) WHERE position = :position"
)
_PLANNED = "UPDATE stm_purges SET planned = 1 WHERE position = :position"
# The cursor once every membership is seeded: what is left of planning is following edges.
_ALL_SEEDED = f"UPDATE stm_purges SET cursor = {Cursor.SEEDED_ALL:d} WHERE position = :position"
# Once planned, what has been told of it (each its own step for a purge of wide reach):
# its ranges and what they reach, a page of ranges at a time (meanwhile the cursor is the
# last chain told), until all is told.
_PAGE = (
    "SELECT chain_id, from_version FROM stm_purge_ranges "
    "WHERE position = :position AND chain_id > :after ORDER BY chain_id LIMIT :limit"
)
# Whether a purge has more than :limit ranges, without reading them all.
_RANGES_PAST = (
    "SELECT count(*) FROM (SELECT 1 FROM stm_purge_ranges WHERE position = :position "
    "LIMIT :limit) AS few"
)
_TOLD = "UPDATE stm_purges SET cursor = :told WHERE position = :position"
# A chunk of the chains reached whose edges are still to follow (a round's frontier).
_FRONTIER = (
    f"UPDATE stm_purge_ranges SET expanded = {Expanded.FOLLOWING:d} WHERE position = :position "
    "AND chain_id IN (SELECT chain_id FROM stm_purge_ranges WHERE position = :position "
    f"AND expanded = {Expanded.TO_FOLLOW:d} "
    "LIMIT :limit)"
)
# The children of the frontier (by the edges the policy follows) not reached yet, or now
# reached from an earlier version.
_REACH = (
    "INSERT INTO stm_purge_ranges (position, chain_id, from_version, done, expanded) "
    f"SELECT :position, e.child, min(e.child_version), {Done.TO_CLEAR:d}, "
    f"{Expanded.TO_FOLLOW:d} FROM stm_chain_edges e "
    "JOIN stm_purge_ranges r ON r.chain_id = e.parent AND e.parent_version >= r.from_version "
    f"WHERE r.position = :position AND r.expanded = {Expanded.FOLLOWING:d}{{own}} "
    "GROUP BY e.child "
    "ON CONFLICT (position, chain_id) DO UPDATE SET from_version = excluded.from_version, "
    f"expanded = {Expanded.TO_FOLLOW:d} "
    "WHERE excluded.from_version < stm_purge_ranges.from_version"
)
_FOLLOWED = (
    f"UPDATE stm_purge_ranges SET expanded = {Expanded.FOLLOWED:d} WHERE position = :position "
    f"AND expanded = {Expanded.FOLLOWING:d}"
)
# Once its rows are cleared, a purge finishes its chains a chunk at a time (``expanded``
# FOLLOWED -> FINISHED): it ends them and forgets the purged user as their member.
_TO_FINISH = (
    "SELECT chain_id FROM stm_purge_ranges WHERE position = :position "
    f"AND expanded = {Expanded.FOLLOWED:d} LIMIT :limit"
)
_END = "UPDATE stm_chains SET ended = 1 WHERE id = :chain"
_FORGET_MEMBER = (
    "DELETE FROM stm_chain_members WHERE chain_id = :chain AND member = "
    "(SELECT user_id FROM stm_changes WHERE position = :position)"
)
_FINISHED = (
    f"UPDATE stm_purge_ranges SET expanded = {Expanded.FINISHED:d}, done = {Done.PURGE_DONE:d} "
    "WHERE position = :position AND chain_id = :chain"
)
_DROP_PLAN = "DELETE FROM stm_purge_ranges WHERE position = :position"
_DROP_PURGE = "DELETE FROM stm_purges WHERE position = :position"
# The rows of one purge still to clear (through the chain index), a chunk at a time.
# A chunk's window: the next ranges still to clear, in chain order (``done`` TO_CLEAR ->
# CLEARED once their rows are cleared, their chains not finished yet; PURGE_DONE once the
# whole purge is), so that each chunk looks only at its own ranges, whatever its reach.
_WINDOW = (
    "SELECT min(chain_id), max(chain_id), count(*) FROM (SELECT chain_id FROM "
    f"stm_purge_ranges WHERE position = :position AND done = {Done.TO_CLEAR:d} ORDER BY chain_id "
    "LIMIT :limit) AS window_"
)
_TO_CLEAR = (
    "SELECT m.id, r.chain_id FROM stm_purge_ranges r JOIN short_term_memories m "
    "ON m.chain_id = r.chain_id AND m.chain_version >= r.from_version "
    f"WHERE r.position = :position AND r.done = {Done.TO_CLEAR:d} "
    "AND r.chain_id BETWEEN :first AND :last "
    "ORDER BY r.chain_id LIMIT :limit"
)
# The ranges of the window from ``first`` up to (but not) ``chain``: their rows are cleared.
_CLEARED = (
    f"UPDATE stm_purge_ranges SET done = {Done.CLEARED:d} WHERE position = :position "
    f"AND done = {Done.TO_CLEAR:d} "
    "AND chain_id >= :first AND chain_id < :chain"
)
_CLEAR = (
    "UPDATE short_term_memories SET summary = NULL, categories = '{}', chain_id = NULL, "
    "chain_version = NULL WHERE id = :id"
)
# Each step that clears counts its rows with the purge, and its last step reads what all
# of them cleared: whoever asked is told the whole purge, whichever processes carried it.
_ADD_CLEARED = "UPDATE stm_purges SET cleared = cleared + :cleared WHERE position = :position"
_TOTALS = "SELECT cleared, counted FROM stm_purges WHERE position = :position"
# The key of the DMs' share in ``counted`` (its other keys are servers' ids).
_DMS = "dms"
# What finishing its chains left (each finished chain's range is done already).
_DONE = (
    f"UPDATE stm_purge_ranges SET done = {Done.PURGE_DONE:d} WHERE position = :position "
    f"AND done <> {Done.PURGE_DONE:d}"
)
_RANGES_OF = (
    "SELECT chain_id, from_version FROM stm_purge_ranges WHERE position = :position "
    "ORDER BY chain_id"
)
_PENDING = (
    f"SELECT position FROM stm_purge_ranges WHERE done <> {Done.PURGE_DONE:d} UNION "
    "SELECT position FROM stm_purges WHERE planned = 0 ORDER BY position"
)
_PURGE_PLANNED = "SELECT planned, servers FROM stm_purges WHERE position = :position"
# While a purge everywhere is planned: the servers it may reach, as a JSON list.
_REACHES = "UPDATE stm_purges SET servers = :servers WHERE position = :position"
_RANGE = (
    "SELECT from_version FROM stm_purge_ranges WHERE position = :position AND chain_id = :chain"
)
_COUNT_PLANNED = (
    "SELECT m.server_id, count(*) FROM short_term_memories m JOIN stm_purge_ranges r "
    "ON r.chain_id = m.chain_id AND m.chain_version >= r.from_version "
    "WHERE r.position = :position AND NOT (m.scope = 'user' AND m.user_id = :user){page} "
    "GROUP BY m.server_id"
)
# The rows _COUNT_PLANNED counts, of one range: for a read-only connection, which cannot
# record a plan (``inspect_preview``).
_COUNT_IN_RANGE = (
    "SELECT server_id, count(*) FROM short_term_memories "
    "WHERE chain_id = :chain AND chain_version >= :from_version AND NOT "
    "(scope = 'user' AND user_id = :user) GROUP BY server_id"
)
_COUNT_OWN = "SELECT count(*) FROM short_term_memories WHERE +scope = 'user' AND user_id = :user"
# How many distilled rows each of a few servers holds, from stm_distilled_by_server alone,
# each counted up to :cap (a statement per page of a purge of wide reach, which reaches
# dozens of servers: a statement each was a round trip each).
_DISTILLED_UP_TO = (
    "WITH s(server_id) AS (VALUES {servers}) SELECT s.server_id, (SELECT count(*) FROM "
    "(SELECT 1 FROM short_term_memories m WHERE m.server_id = s.server_id "
    "AND m.chain_id IS NOT NULL LIMIT :cap) AS few) FROM s"
)
# Servers counted per statement at most, and the shorter lengths a statement's list is
# padded to (its last server repeated): five statement texts, each prepared once by
# PostgreSQL, rather than one per number of servers.
SERVERS_PER_COUNT = 200
_COUNT_LENGTHS = (1, 4, 16, 64)
# A server's distilled rows are counted up to COUNT_BEYOND times what a purge clears
# there and COUNT_FLOOR more (a preview's bound is rounded up to a power of two: few
# statement texts): past that, whoever purges is told the purge clears at most a tenth
# of the server's memory. Counting all of them cost each page of a purge of wide reach a
# scan of the server's whole index, however few rows the page cleared there.
COUNT_BEYOND = 10
COUNT_FLOOR = 1000
# What the pages of a purge have counted so far, by server (JSON, see _counted_by_pages).
_COUNTED = "SELECT counted FROM stm_purges WHERE position = :position"
_SAVE_COUNTED = "UPDATE stm_purges SET counted = :counted WHERE position = :position"
# A server's distilled rows after (chain, id), in stm_distilled_by_server's order: the
# one :skip rows on (where a count of :skip + 1 more stops), and how many are left.
_AFTER = (
    "FROM short_term_memories WHERE server_id = :server AND chain_id IS NOT NULL "
    "AND (chain_id, id) > (:chain, :id)"
)
_COUNT_ON = f"SELECT chain_id, id {_AFTER} ORDER BY chain_id, id LIMIT 1 OFFSET :skip"
_COUNT_REST = f"SELECT count(*) {_AFTER}"
# Ended chains no row pins any more and no chain was written from: nothing can need them.
_UNUSED = (
    "SELECT c.id FROM stm_chains c WHERE c.ended = 1 AND NOT EXISTS "
    "(SELECT 1 FROM short_term_memories m WHERE m.chain_id = c.id) AND NOT EXISTS "
    "(SELECT 1 FROM stm_chain_edges e WHERE e.parent = c.id) LIMIT :limit"
)
# A row that held a chain's notes as its live row is gone, or holds another chain now.
_LEFT = "UPDATE stm_chains SET ended = 1 WHERE id = :chain AND live_key = :key"
_DROP_CHAIN = "DELETE FROM stm_chains WHERE id = :chain"
_DROP_CHAIN_MEMBERS = "DELETE FROM stm_chain_members WHERE chain_id = :chain"
_DROP_CHAIN_EDGES = "DELETE FROM stm_chain_edges WHERE child = :chain"


def _in_server(sql: str, server: int | None, column: str) -> str:
    return sql if server is None else f"{sql} AND {column} = :server"


# -- which saves are one upgrade ----------------------------------------------------------
def upgrades(saves: Sequence[SaveDistilled]) -> list[list[int]]:
    """The indexes of ``saves`` grouped by upgrade: consecutive saves sharing one lineage
    object are one version; a save without a lineage is one of its own."""
    groups: list[list[int]] = []
    for index, save in enumerate(saves):
        if groups and save.lineage is not None and saves[groups[-1][0]].lineage is save.lineage:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def live_of(group: Sequence[int], saves: Sequence[SaveDistilled]) -> int:
    """The save of ``group`` whose row's notes the chain is: the server row in a server,
    else the first."""
    for index in group:
        if saves[index].row.scope == "server":
            return index
    return group[0]


# -- procedures ----------------------------------------------------------------------------
# The rows of a run of upgrades' keys (those they extend the chains of and those their
# prompts showed), with their chains: how far each has got, whether it has ended, the key
# it is the notes of, and the position of a purge clearing the row's version, if any.
_ROWS_OF = (
    "SELECT m.key, m.chain_id, m.chain_version, c.head, c.ended, c.live_key, "
    f"(SELECT min(r.position) FROM stm_purge_ranges r WHERE r.done = {Done.TO_CLEAR:d} "
    "AND r.chain_id = m.chain_id AND r.from_version <= m.chain_version) "
    "FROM short_term_memories m LEFT JOIN stm_chains c ON c.id = m.chain_id WHERE {keys}"
)
# The edges between the chains a run of upgrades extends and those their prompts showed.
_EDGES_OF = (
    "SELECT e.parent, e.child, e.own, e.parent_version, e.child_version FROM {pairs} "
    "JOIN stm_chain_edges e ON e.parent = pairs.parent AND e.child = pairs.child "
    "AND e.own = pairs.own"
)
_PAIR = (("parent", "bigint"), ("child", "bigint"), ("own", "integer"))
_HEAD = "UPDATE stm_chains SET head = :head WHERE id = :chain"


def pinned(row: StoredRow, pin: Pin) -> Pin | None:
    """The version a row written at ``pin`` pins: ``pin``, or none when the row holds no
    notes (no summary, no categories)."""
    return pin if row.summary is not None or row.categories else None


@dataclass(slots=True)
class _Chain:
    head: int
    ended: bool
    live_key: str


class Versions:
    """The chain work of one run of upgrades, in a number of statements that does not grow
    with the upgrades the run holds (on PostgreSQL each statement is a round trip, and an
    upgrade's were a dozen; SQLite binds at most ``dialect.BOUND_VALUES`` values per
    statement): the rows and chains it reads, in one statement (``load``);
    each upgrade's version (``extend``, a statement only for a new chain) and what its
    prompt showed (``record``), from what was read and what the run's earlier upgrades
    wrote (``wrote``); the edges, heads, members and ends, read and written together at
    the end (``finish``). Each upgrade sees what it would see run alone after the ones
    before it."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect
        # Each row read or written: its pin (None: no distilled content, or no row), and
        # the position of a purge clearing its version (rows written here: none).
        self.pins: dict[str, Pin | None] = {}
        self.purging: dict[str, int] = {}
        self.chains: dict[int, _Chain] = {}
        self.heads: dict[int, int] = {}  # chain -> head to write
        self.left: list[dict[str, Any]] = []
        self.members: list[dict[str, Any]] = []
        # (parent chain, child chain, own) -> the newest parent version shown, in order.
        self.shown: list[tuple[tuple[int, int, int], tuple[int, int]]] = []

    def load(self, keys: Iterable[str]) -> Procedure[None]:
        """Read the rows of ``keys`` and their chains (one statement, or one per
        ``Dialect.chunks``)."""
        wanted = sorted(set(keys) - set(self.pins))
        found = []
        for chunk in self.dialect.chunks(wanted):
            condition, params = self.dialect.in_list("m.key", "keys", chunk, "text[]")
            found += yield Step(_ROWS_OF.format(keys=condition), params, "all")
        self.pins.update(dict.fromkeys(wanted))
        for key, chain, version, head, ended, live_key, purging in found:
            if chain is None:
                continue
            self.pins[key] = Pin(int(chain), int(version))
            if purging is not None:
                self.purging[key] = int(purging)
            if head is not None and int(chain) not in self.chains:
                self.chains[int(chain)] = _Chain(int(head), bool(ended), str(live_key))

    def extend(self, live_key: str, server_id: int | None) -> Procedure[Pin | int]:
        """The version an upgrade of ``live_key`` (read by ``load``) writes: the next of
        the chain the live row pins, or the first of a new chain; the position of the
        purge clearing the live row when one is (nothing may extend what a purge
        clears)."""
        pin = self.pins.get(live_key)
        if pin is not None:
            if (purging := self.purging.get(live_key)) is not None:
                return purging
            chain = self.chains.get(pin.chain)
            if chain is not None and not chain.ended and pin.version == chain.head:
                chain.head = self.heads[pin.chain] = pin.version + 1
                return Pin(pin.chain, chain.head)
            # The live row holds notes of a chain it no longer extends: that one has ended.
            self.left.append({"chain": pin.chain, "key": live_key})
            if chain is not None and chain.live_key == live_key:
                chain.ended = True
        made = yield Step(_NEW_CHAIN, {"key": live_key, "server": server_id}, "one")
        self.chains[int(made[0])] = _Chain(1, False, live_key)
        return Pin(int(made[0]), 1)

    def record(self, pin: Pin, lineage: Lineage, server_id: int | None) -> None:
        """What the prompt that wrote ``pin`` (notes of ``server_id``) showed: its direct
        members (kept from their first version) and its edges to other chains' notes (a
        shown key, read by ``load``, as its row is now)."""
        self.members.extend(
            {"member": user, "chain": pin.chain, "first": pin.version, "server": server_id}
            for user in sorted(lineage.direct)
        )
        parents: dict[tuple[int, bool], int] = {}
        for own, shown in ((True, lineage.own), (False, lineage.other)):
            for item in shown:
                parent = self.pins.get(item) if isinstance(item, str) else item
                if parent is None:
                    continue  # the notes were cleared since: nothing of them is kept
                if parent.chain == pin.chain:
                    continue  # the chain's own earlier versions: held by every later one
                slot = (parent.chain, own)
                parents[slot] = max(parents.get(slot, 0), parent.version)
        for (parent_chain, own), parent_version in parents.items():
            self.shown.append(((parent_chain, pin.chain, int(own)), (parent_version, pin.version)))

    def wrote(self, row: StoredRow, pin: Pin) -> None:
        """``row`` was written at ``pin`` (with no chain when it holds no notes)."""
        self.pins[row.key] = pinned(row, pin)
        self.purging.pop(row.key, None)

    def finish(self) -> Procedure[None]:
        """Write what the run's upgrades recorded: the heads of the chains they extended,
        the ends of those they left, their members, and their edges, each pair's merged
        with those it held (read in one statement, or one per ``Dialect.chunks``)."""
        if self.heads:
            heads = [{"head": head, "chain": chain} for chain, head in self.heads.items()]
            yield Step(_HEAD, heads, "many")
        if self.left:
            yield Step(_LEFT, self.left, "many")
        if self.members:
            yield Step(_MEMBER, self.members, "many")
        if not self.shown:
            return
        held: dict[tuple[int, int, int], list[tuple[int, int]]] = {
            pair: [] for pair, _ in self.shown
        }
        found = []
        for chunk in self.dialect.chunks(sorted(held), len(_PAIR)):
            pairs, params = self.dialect.table("pairs", _PAIR, chunk)
            found += yield Step(_EDGES_OF.format(pairs=pairs), params, "all")
        for parent, child, own, parent_version, child_version in found:
            edge = (int(parent_version), int(child_version))
            held[int(parent), int(child), int(own)].append(edge)
        edges = {pair: list(kept) for pair, kept in held.items()}
        for pair, new in self.shown:
            edges[pair] = merge_edges(edges[pair], new)
        # Every edge dropped, then every edge added, each kind in one statement. An edge
        # kept with a new child version is dropped and added again.
        drops: list[dict[str, int]] = []
        adds: list[dict[str, int]] = []
        for pair, kept in edges.items():
            names = {"parent": pair[0], "child": pair[1], "own": pair[2]}
            before, after = set(held[pair]), set(kept)
            drops.extend({**names, "parent_version": pv} for pv, _ in sorted(before - after))
            adds.extend(
                {**names, "parent_version": pv, "child_version": cv}
                for pv, cv in sorted(after - before)
            )
        if drops:
            yield Step(_DROP_EDGE, drops, "many")
        if adds:
            yield Step(_ADD_EDGE, adds, "many")


def left(rows: Iterable[tuple[str, int | None]]) -> Procedure[None]:
    """These ``(key, chain)`` rows were deleted: the chains they were the live rows of have
    ended."""
    gone = [{"key": key, "chain": chain} for key, chain in rows if chain is not None]
    if gone:
        yield Step(_LEFT, gone, "many")


def _plan(user: int, server: int | None, erasure: Erasure) -> Procedure[list[Range]]:
    planner = PurgePlanner(erasure)
    seeds = yield Step(
        _in_server(_SEEDS, server, "c.server_id"), {"user": user, "server": server}, "all"
    )
    for chain, first in seeds:
        planner.seed(int(chain), int(first))
    while (reached := planner.next_parent()) is not None:
        parent, from_version = reached
        edges = yield Step(_CHILDREN, {"parent": parent, "from_version": from_version}, "all")
        planner.children(from_version, [(int(c), bool(o), int(p), int(v)) for c, o, p, v in edges])
    return planner.result()


def _plan_step(
    position: int,
    chunk: int | None = None,
    follow: int | None = None,
    work: list[tuple[PurgePhase, int]] | None = None,
) -> Procedure[bool | None]:
    """The next step of planning the purge at ``position``: seed up to ``chunk`` more
    chains from the user's memberships, or follow the edges of up to ``follow`` chains
    reached. True once every range is known (a purge recorded before plans were staged
    always is); None after a full chunk of seeds (enough for one transaction); False
    otherwise. ``work`` is given how many chains it seeded or followed, by kind."""
    work = [] if work is None else work
    state = yield Step(_PLAN_STATE, {"position": position}, "one")
    if state is None or state[3]:
        return True
    user, server, erasure, _, cursor = state
    chunk = SEED_CHUNK if chunk is None else chunk
    follow = FOLLOW_CHUNK if follow is None else follow
    if int(cursor) != Cursor.SEEDED_ALL:
        sql = _SEED.format(server="" if server is None else " AND c.server_id = :server")
        params = {"position": position, "user": user, "server": server, "cursor": cursor}
        seeded = yield Step(sql, {**params, "limit": chunk}, "count")
        work.append(("seed", int(seeded)))
        if seeded == chunk:
            yield Step(_SEEDED, {"position": position}, "exec")
            return None
        yield Step(_ALL_SEEDED, {"position": position}, "exec")
    # Every seed is in: follow the edges the policy follows, a round per step.
    frontier = yield Step(_FRONTIER, {"position": position, "limit": follow}, "count")
    work.append(("follow", int(frontier)))
    if frontier:
        reach = _REACH.format(own=" AND e.own = 1" if erasure == "direct" else "")
        yield Step(reach, {"position": position}, "exec")
        yield Step(_FOLLOWED, {"position": position}, "exec")
        return False
    yield Step(_PLANNED, {"position": position}, "exec")
    return True


def _plan_steps(
    position: int, size: float | Sizing = 1.0, phases: list[PurgePhase] | None = None
) -> Procedure[bool]:
    """Up to ``PLAN_STEPS`` steps of planning, fewer once they seeded and followed a
    chunk's worth of chains (``SEED_CHUNK`` and ``FOLLOW_CHUNK``, each scaled by its own
    ``size``); True once the purge is planned. ``phases`` is given the kinds it did."""
    size_of = _sizing(size)
    chunk = scaled(SEED_CHUNK, size_of("seed"))
    follow = scaled(FOLLOW_CHUNK, size_of("follow"))
    work: list[tuple[PurgePhase, int]] = []
    try:
        for _ in range(PLAN_STEPS):
            step = yield from _plan_step(position, chunk, follow, work)
            if step is None:
                return False
            if step:
                return True
            spent = sum(n / (chunk if kind == "seed" else follow) for kind, n in work)
            if spent >= 1:
                return False
        return False
    finally:
        if phases is not None:
            phases.extend(dict.fromkeys(kind for kind, _ in work))


def _plan_here(user: int, server: int | None, erasure: Erasure, position: int) -> Procedure[None]:
    """Plan a purge under ``position`` to the end, in this transaction (a preview's)."""
    yield Step(
        _PLAN, {"position": position, "user": user, "server": server, "erasure": erasure}, "exec"
    )
    while not (yield from _plan_step(position, chunk=1 << 30, follow=1 << 30)):
        pass  # a preview plans to the end in its one transaction


def purge(user: int, server: int | None, erasure: Erasure, position: int) -> Procedure[PurgeResult]:
    """A purge's first transaction, at feed ``position``: delete the user's own rows, record
    the purge and take its first planning step; when it is planned, count what it reaches
    (``reach``) and, when that is little, also clear (at most a chunk) and finish. What is
    left, ``sweep`` does in later transactions, so that no transaction of a purge of any
    size holds the write lock for long. A purge everywhere that is still being planned
    says which servers it may reach (``servers``): lineage stays in its server, so those
    of the chains the user is a member of."""
    params = {"user": user, "server": server}
    # Counted before they go, so that a share of a server's memory is of what it held.
    own_sql = _in_server(_OWN_DISTILLED, server, "server_id") + " GROUP BY server_id"
    own = yield Step(own_sql, params, "all")
    own_distilled = {_server(server_id): int(count) for server_id, count in own}
    removed = int((yield Step(_in_server(_OWN_ROWS, server, "server_id"), params, "count")))
    yield Step(
        _PLAN, {"position": position, "user": user, "server": server, "erasure": erasure}, "exec"
    )
    planned = yield from _plan_steps(position, FIRST_STEP_SIZE)
    if planned:
        few = yield Step(_RANGES_PAST, {"position": position, "limit": SWEEP_CHUNK + 1}, "one")
        # Of wide reach: its ranges and what they reach are told by later steps, a page
        # at a time.
        planned = int(few[0]) <= SWEEP_CHUNK
    if not planned:
        servers = None
        if server is None:
            rows = yield Step(_SERVERS, {"user": user}, "all")
            servers = frozenset(_server(row[0]) for row in rows)
            # Other processes' guards judge by it too while the plan goes on.
            where = json.dumps(sorted(servers, key=lambda s: (s is not None, s)))
            yield Step(_REACHES, {"position": position, "servers": where}, "exec")
        return PurgeResult(position, removed, None, 0, True, None, own_distilled, servers)
    ranges = yield from ranges_of(position)
    found = yield from reach(position, user)
    if not ranges:
        yield Step(_DONE, {"position": position}, "exec")
        return PurgeResult(position, removed, ranges, 0, False, found, own_distilled)
    yield Step(_TOLD, {"position": position, "told": int(Cursor.TOLD_REACH)}, "exec")
    step = yield from sweep(position)
    return PurgeResult(position, removed, ranges, step.cleared, step.more, found, own_distilled)


def reach(position: int, user: int) -> Procedure[PurgePreview]:
    """What the planned purge at ``position`` reaches, before it clears anything: the other
    rows its ranges hold (``shared``), by server, and the distilled rows each such server
    holds (``own`` is not counted: 0)."""
    counted = yield Step(
        _COUNT_PLANNED.format(page=""), {"position": position, "user": user}, "all"
    )
    by_server = {_server(server_id): int(count) for server_id, count in counted}
    distilled, at_least = yield from _distilled_in(by_server)
    return PurgePreview(0, sum(by_server.values()), by_server, distilled, at_least)


def _page(position: int, user: int, after: int, size: float = 1.0) -> Procedure[SweepStep]:
    """The next ``REACH_PAGE`` (scaled by ``size``) ranges of the planned purge at
    ``position`` (those of chains after ``after``) and what they reach, as ``reach`` counts
    it: the pages add up to its ranges and its reach. Each page also counts the distilled
    rows of the servers it reaches rows in, as ``reach`` does, against what the pages so
    far reached there: a server is counted again only when the purge's reach there has
    outgrown the bound of its last count (the latest count stands)."""
    page_size = scaled(REACH_PAGE, size)
    params = {"position": position, "after": after, "limit": page_size}
    rows = yield Step(_PAGE, params, "all")
    ranges = tuple(Range(int(chain), int(start)) for chain, start in rows)
    by_server: dict[int | None, int] = {}
    if ranges:
        sql = _COUNT_PLANNED.format(page=" AND r.chain_id > :after AND r.chain_id <= :last")
        page = {"position": position, "user": user, "after": after, "last": ranges[-1].chain}
        counted = yield Step(sql, page, "all")
        by_server = {_server(server_id): int(count) for server_id, count in counted}
    told = ranges[-1].chain if len(ranges) == page_size else int(Cursor.TOLD_REACH)
    yield Step(_TOLD, {"position": position, "told": told}, "exec")
    distilled, at_least = yield from _counted_by_pages(position, by_server)
    reach = PurgePreview(0, sum(by_server.values()), by_server, distilled, at_least)
    return SweepStep(0, True, ranges, reach, told == Cursor.TOLD_REACH, ("page",), after)


def _counted_by_pages(
    position: int, by_server: Mapping[int | None, int]
) -> Procedure[tuple[dict[int | None, int], frozenset[int]]]:
    """What ``_distilled_in`` tells, for a page of the purge at ``position`` that reached
    ``by_server``: the servers the purge reaches for the first time are counted together,
    as ``_distilled_in`` counts them; a server counted before, whose count no longer
    bounds the purge's share there, is counted on from where its last count stopped (in
    index order), as far as the bound of what the pages have reached there so far. No
    page counts more than ``COUNT_BEYOND`` times what it reached itself and
    ``COUNT_FLOOR`` per server it reaches first, however large the servers."""
    row = yield Step(_COUNTED, {"position": position}, "one")
    # server -> [rows its pages reached, distilled rows counted, whether that is all of
    # them, the (chain, id) the count stopped at (None: not known, counted from the start)],
    # and under _DMS the DMs' share, its first item alone used
    counted: dict[str, list[Any]] = json.loads(row[0]) if row and row[0] else {}
    first: dict[int | None, int] = {
        s: n for s, n in by_server.items() if s is not None and str(s) not in counted
    }
    if first:
        fresh, at_least = yield from _distilled_in(first, tight=True)
        for new, shared in first.items():
            exact = int(new not in at_least)
            counted[str(new)] = [shared, fresh[new], exact, None, None]
    if None in by_server:  # the DMs' share, kept for ``_totals``
        dms = counted.setdefault(_DMS, [0, 0, 1, None, None])
        dms[0] += by_server[None]
    for server_id, shared in by_server.items():
        if server_id is None or server_id in first:
            continue
        state = counted[str(server_id)]
        state[0] += shared
        wanted = _need(state[0]) - state[1]
        if state[2] or wanted <= 0:
            continue
        # From where the last count stopped, or from the start, past what it counted.
        start = state[3] is None
        at = {
            "server": server_id,
            "chain": -1 if start else state[3],
            "id": -1 if start else state[4],
        }
        skip = (state[1] if start else 0) + wanted - 1
        last = yield Step(_COUNT_ON, {**at, "skip": skip}, "one")
        if last is not None:
            state[1:] = [state[1] + wanted, 0, int(last[0]), int(last[1])]
        else:  # fewer than wanted are left: the count is whole
            rest = yield Step(_COUNT_REST, at, "one")
            state[1:3] = [(0 if start else state[1]) + int(rest[0]), 1]
    if by_server:
        params = {"position": position, "counted": json.dumps(counted, sort_keys=True)}
        yield Step(_SAVE_COUNTED, params, "exec")
    return _distilled_counted({s: counted[str(s)] for s in by_server if s is not None})


def _distilled_counted(
    states: Mapping[int, list[Any]],
) -> tuple[dict[int | None, int], frozenset[int]]:
    """What the counts of ``states`` (server -> its state in ``counted``, see
    ``_counted_by_pages``) tell, as ``_distilled_in`` tells it: the distilled rows counted
    per server, and the servers whose count is not whole (they hold at least that)."""
    return (
        {server_id: int(state[1]) for server_id, state in states.items()},
        frozenset(server_id for server_id, state in states.items() if not state[2]),
    )


def _server(server_id: Any) -> int | None:
    return None if server_id is None else int(server_id)


def _distilled_in(
    reached: Mapping[int | None, int], *, tight: bool = False
) -> Procedure[tuple[dict[int | None, int], frozenset[int]]]:
    """How many distilled entries each server of ``reached`` (the shared rows a purge
    reaches there) holds, counted up to ``_bound`` of its reach (DMs are no server: left
    out); and the servers whose count stopped at its bound (they hold at least that).
    ``SERVERS_PER_COUNT`` servers of one bound a statement; ``tight``: a statement counts
    only as far as the most its servers need (``_need``), not their bound."""
    by_bound: dict[int, list[int]] = {}
    for server_id, shared in reached.items():
        if server_id is not None:
            by_bound.setdefault(_bound(shared), []).append(server_id)
    distilled: dict[int | None, int] = {}
    at_least: set[int] = set()
    for bound, servers in sorted(by_bound.items()):
        wanted = sorted(set(servers))
        for start in range(0, len(wanted), SERVERS_PER_COUNT):
            part = wanted[start : start + SERVERS_PER_COUNT]
            cap = max(_need(reached[s]) for s in part) if tight else bound
            length = next((n for n in _COUNT_LENGTHS if n >= len(part)), SERVERS_PER_COUNT)
            part += part[-1:] * (length - len(part))  # the same server again: counted once
            names = {f"server{n}": server_id for n, server_id in enumerate(part)}
            values = ", ".join(f"(CAST(:{name} AS BIGINT))" for name in names)
            sql = _DISTILLED_UP_TO.format(servers=values)
            for server_id, count in (yield Step(sql, {**names, "cap": cap}, "all")):
                distilled[int(server_id)] = int(count)
                if int(count) >= cap:
                    at_least.add(int(server_id))
    return distilled, frozenset(at_least)


def _need(shared: int) -> int:
    """How many of a server's distilled rows tell the share of a purge that clears
    ``shared`` of them well enough: ``COUNT_BEYOND`` times that, and ``COUNT_FLOOR``
    more (a server holding fewer is counted whole)."""
    return COUNT_BEYOND * shared + COUNT_FLOOR


def _bound(shared: int) -> int:
    """How far a server's distilled rows are counted for a purge that clears ``shared``
    of them: ``_need`` of that rounded up to a power of two (few distinct statements'
    bounds)."""
    return _need(1 << max(0, shared - 1).bit_length())


def sweep(position: int, size: float | Sizing = 1.0) -> Procedure[SweepStep]:
    """The next step of the purge at ``position``: plan further while it is not planned;
    then tell a page of its ranges and what they reach, until all is told; then clear up
    to ``SWEEP_CHUNK`` of its rows; once none is left, finish up to ``FINISH_CHUNK`` of its
    chains (end them, and forget the purged user as their member: the user is read off the
    purge's change, and if the feed no longer has it, garbage collection drops those rows
    with their chains). Every chunk is scaled by ``size``, the share of its own kind of
    work (``PurgePhase``) when it is a function: each step's work is bounded. The last
    step also reads what the whole purge did (``SweepStep.totals``)."""
    size_of = _sizing(size)
    chunk = scaled(SWEEP_CHUNK, size_of("clear"))
    state = yield Step(_PLAN_STATE, {"position": position}, "one")
    if state is not None and not state[3]:
        phases: list[PurgePhase] = []
        yield from _plan_steps(position, size_of, phases)
        # Once planned, the next steps tell its ranges.
        return SweepStep(0, True, phases=tuple(phases))
    told = Cursor.TOLD_REACH if state is None else int(state[4])
    if told != Cursor.TOLD_REACH:
        # Planned (SEEDED_ALL), told through a chain, or told whole by an earlier
        # version (TOLD_BY_EARLIER: pages from the first are told again; a process
        # resuming the purge ignores them).
        assert state is not None
        after = told if told >= 0 else 0
        return (yield from _page(position, int(state[0]), after, size_of("page")))
    first, last, ranges = yield Step(_WINDOW, {"position": position, "limit": chunk}, "one")
    ids: list[Any] = []
    done: tuple[PurgePhase, ...] = ()
    if ranges:
        done = ("clear",)
        window = {"position": position, "first": first, "last": last}
        ids = yield Step(_TO_CLEAR, {**window, "limit": chunk}, "all")
        if ids:
            yield Step(_CLEAR, [{"id": row[0]} for row in ids], "many")
            yield Step(_ADD_CLEARED, {"position": position, "cleared": len(ids)}, "exec")
        # A full chunk may end inside a chain: the ranges before its chain are cleared.
        through = ids[-1][1] if len(ids) == chunk else int(last) + 1
        yield Step(_CLEARED, {**window, "chain": through}, "exec")
        if len(ids) == chunk or ranges == chunk:
            return SweepStep(len(ids), True, phases=done)
    done += ("finish",)
    finish = scaled(FINISH_CHUNK, size_of("finish"))
    finishing = yield Step(_TO_FINISH, {"position": position, "limit": finish}, "all")
    chains = [{"chain": row[0], "position": position} for row in finishing]
    if chains:
        yield Step(_END, chains, "many")
        # Their words are cleared from every version that held them: the membership rows
        # would only keep the user's id.
        yield Step(_FORGET_MEMBER, chains, "many")
        yield Step(_FINISHED, chains, "many")
    if len(chains) == finish:
        return SweepStep(len(ids), True, phases=done)
    yield Step(_DONE, {"position": position}, "exec")
    totals = yield from _totals(position)
    return SweepStep(len(ids), False, phases=done, totals=totals)


def _totals(position: int) -> Procedure[PurgeTotals | None]:
    """What the purge at ``position`` did in all (None once the feed has forgotten it):
    the rows its steps cleared and, of a purge of wide reach, what its pages reached."""
    row = yield Step(_TOTALS, {"position": position}, "one")
    if row is None:
        return None
    cleared, saved = row
    if not saved:
        return PurgeTotals(int(cleared))
    counted: dict[str, list[Any]] = json.loads(saved)
    shared = {None if key == _DMS else int(key): int(state[0]) for key, state in counted.items()}
    distilled, at_least = _distilled_counted(
        {int(key): state for key, state in counted.items() if key != _DMS}
    )
    reach = PurgePreview(0, sum(shared.values()), shared, distilled, at_least)
    return PurgeTotals(int(cleared), reach)


def ranges_of(position: int) -> Procedure[tuple[Range, ...]]:
    """The ranges of the purge at ``position`` (so far, while it is being planned)."""
    rows = yield Step(_RANGES_OF, {"position": position}, "all")
    return tuple(Range(int(chain), int(start)) for chain, start in rows)


def planned_ranges(position: int) -> Procedure[tuple[Range, ...] | None]:
    """The ranges of the purge at ``position``; None while it is still being planned."""
    state = yield Step(_PLAN_STATE, {"position": position}, "one")
    if state is not None and not state[3]:
        return None
    return (yield from ranges_of(position))


def guard_ranges(
    guards: Sequence[Guard], deletes: Sequence[Change]
) -> Procedure[dict[int, dict[int, int] | None]]:
    """What ``guards`` judge ``deletes``' purges by (``overtaking``'s ``ranges``): for each
    purge that may refuse one of them (after its turn began, of another origin, in its
    scope), the ranges it holds of the chains the guards' pins name, or None while it is
    still being planned and may reach their servers. Read by key, so a guard costs what
    its prompt showed, not what the purges reach."""
    found: dict[int, dict[int, int] | None] = {}
    for change in deletes:
        if change.kind != "purge_user":
            continue
        judged = [
            guard
            for guard in guards
            if change.position > guard.after
            and not (guard.own_origin and change.origin == guard.own_origin)
            and (change.server_id is None or change.server_id == guard.server_id)
        ]
        if not judged:
            continue
        state = yield Step(_PURGE_PLANNED, {"position": change.position}, "one")
        if state is not None and not state[0]:
            reaches = None if state[1] is None else set(json.loads(state[1]))
            if reaches is None or any(guard.server_id in reaches for guard in judged):
                found[change.position] = None  # it may reach anything they showed
                continue
        held: dict[int, int] = {}
        for chain in sorted({pin.chain for guard in judged for pin in guard.pins}):
            row = yield Step(_RANGE, {"position": change.position, "chain": chain}, "one")
            if row is not None:
                held[chain] = int(row[0])
        found[change.position] = held
    return found


def pending_sweeps() -> Procedure[list[int]]:
    """Positions of purges with rows still to clear."""
    rows = yield Step(_PENDING, {}, "all")
    return [int(row[0]) for row in rows]


_UNPLANNED = (
    "SELECT position, user_id, server_id, erasure, servers FROM stm_purges WHERE planned = 0 "
    "ORDER BY position"
)


def unplanned_purges() -> Procedure[list[tuple[int, PurgeUser, frozenset[int | None] | None]]]:
    """The purges not planned yet, by position, with the servers a purge everywhere may
    reach once its first transaction said (None: any in its scope): until they are
    planned, what each may reach reads as it was (only planned ranges read as cleared)."""
    rows = yield Step(_UNPLANNED, {}, "all")
    return [
        (
            int(position),
            PurgeUser(int(user), None if server is None else int(server), erasure),
            None if reaches is None else frozenset(_server(s) for s in json.loads(reaches)),
        )
        for position, user, server, erasure, reaches in rows
    ]


# Where a preview plans: below every feed position, dropped again in the same transaction.
_SCRATCH = -1


def preview(user: int, server: int | None, erasure: Erasure) -> Procedure[PurgePreview]:
    """What ``purge`` would delete and clear now (planned as a purge would, in the same
    transaction, then forgotten)."""
    params = {"user": user, "server": server}
    own = yield Step(_in_server(_COUNT_OWN, server, "server_id"), params, "one")
    for drop in (_DROP_PLAN, _DROP_PURGE):
        yield Step(drop, {"position": _SCRATCH}, "exec")
    yield from _plan_here(user, server, erasure, _SCRATCH)
    counts = yield Step(_COUNT_PLANNED.format(page=""), {"position": _SCRATCH, "user": user}, "all")
    by_server = {_server(s): int(n) for s, n in counts}
    for drop in (_DROP_PLAN, _DROP_PURGE):
        yield Step(drop, {"position": _SCRATCH}, "exec")
    distilled, at_least = yield from _distilled_in(by_server)
    return PurgePreview(
        own=int(own[0]) if own else 0,
        shared=sum(by_server.values()),
        shared_by_server=by_server,
        distilled_by_server=distilled,
        distilled_at_least=at_least,
    )


# A preview's plan, kept apart: these shadow the purge tables of the same names in the
# transaction of a preview run aside (``preview`` unchanged), and go with it.
PREVIEW_TABLES = (
    "CREATE TEMP TABLE stm_purges (position BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, "
    "server_id BIGINT, erasure TEXT NOT NULL, planned INTEGER NOT NULL, cursor BIGINT NOT NULL, "
    "servers TEXT, counted TEXT, cleared BIGINT NOT NULL DEFAULT 0)"
    "{end}",
    "CREATE TEMP TABLE stm_purge_ranges (position BIGINT NOT NULL, chain_id BIGINT NOT NULL, "
    f"from_version BIGINT NOT NULL, done INTEGER NOT NULL DEFAULT {Done.TO_CLEAR:d}, "
    f"expanded INTEGER NOT NULL DEFAULT {Expanded.FOLLOWED:d}, "
    "PRIMARY KEY (position, chain_id)){end}",
)


def inspect_preview(user: int, server: int | None, erasure: Erasure) -> Procedure[PurgePreview]:
    """``preview`` on a read-only connection (the operator's): planned edge by edge, as
    ``reached`` plans, and counted range by range; the same counts, more statements."""
    params = {"user": user, "server": server}
    own = yield Step(_in_server(_COUNT_OWN, server, "server_id"), params, "one")
    by_server: dict[int | None, int] = {}
    for r in (yield from _plan(user, server, erasure)):
        found = {"chain": r.chain, "from_version": r.from_version, "user": user}
        for server_id, count in (yield Step(_COUNT_IN_RANGE, found, "all")):
            key = _server(server_id)
            by_server[key] = by_server.get(key, 0) + int(count)
    distilled, at_least = yield from _distilled_in(by_server)
    own_rows = int(own[0]) if own else 0
    return PurgePreview(own_rows, sum(by_server.values()), by_server, distilled, at_least)


_IN_RANGE = (
    "SELECT m.id FROM short_term_memories m WHERE m.chain_id = :chain "
    "AND m.chain_version >= :from_version"
)
_MEMBERS_OF = (
    "SELECT member FROM stm_chain_members WHERE chain_id = :chain AND first <= :version "
    "ORDER BY member"
)


def reached(user: int, server: int | None, erasure: Erasure) -> Procedure[list[int]]:
    """The ids of the rows whose notes a purge of ``user`` would clear now (the user's own
    rows among them)."""
    ranges = yield from _plan(user, server, erasure)
    ids: list[int] = []
    for r in ranges:
        rows = yield Step(_IN_RANGE, {"chain": r.chain, "from_version": r.from_version}, "all")
        ids.extend(int(row[0]) for row in rows)
    return ids


def members(pin: Pin) -> Procedure[list[int]]:
    """Everyone whose words a prompt of the chain showed directly, up to ``pin``'s version."""
    rows = yield Step(_MEMBERS_OF, {"chain": pin.chain, "version": pin.version}, "all")
    return [int(row[0]) for row in rows]


_ORPHANS = (
    "SELECT m.id, m.chain_id FROM short_term_memories m LEFT JOIN stm_chains c "
    "ON c.id = m.chain_id WHERE m.chain_id IS NOT NULL AND c.id IS NULL"
)


def orphans() -> Procedure[list[str]]:
    """Rows that pin a chain the database does not hold (a check for operators)."""
    rows = yield Step(_ORPHANS, {}, "all")
    return [
        f"short_term_memories row {memory} refers to a missing stm_chains row {chain}"
        for memory, chain in rows
    ]


_FORGET_RANGES = (
    f"DELETE FROM stm_purge_ranges WHERE position <= :through AND done = {Done.PURGE_DONE:d}"
)
_FORGET_PURGES = (
    "DELETE FROM stm_purges WHERE position <= :through AND planned = 1 AND NOT EXISTS "
    "(SELECT 1 FROM stm_purge_ranges r WHERE r.position = stm_purges.position)"
)


def forget_purges(through: int) -> Procedure[None]:
    """Drop the plans of finished purges the feed no longer holds (pruned through
    ``through``): no guard can ask about them any more."""
    yield Step(_FORGET_RANGES, {"through": through}, "exec")
    yield Step(_FORGET_PURGES, {"through": through}, "exec")


def collect(limit: int = COLLECT_CHUNK) -> Procedure[int]:
    """Drop chains that nothing pins and nothing was written from; returns how many."""
    rows = yield Step(_UNUSED, {"limit": limit}, "all")
    chains = [{"chain": int(row[0])} for row in rows]
    if chains:
        yield Step(_DROP_CHAIN_MEMBERS, chains, "many")
        yield Step(_DROP_CHAIN_EDGES, chains, "many")
        yield Step(_DROP_CHAIN, chains, "many")
    return len(chains)
