"""W6 realistic servers: skewed users in favourite channels, DMs, a model that copies its prompt.

A simulation of busy servers, played through the public API the way the bundled
host calls it, on SQLite or PostgreSQL and under an erasure policy
(``STM_ERASURE``):

- **servers**: a busy one (server 1: ``users`` members, 40 channels, 85% of the
  turns) and two smaller ones (a quarter of the members each, 10 channels, 6% of
  the turns each); 3% of the turns are DMs.
- **users**: Zipf-like activity (the member of rank r speaks with weight 1/r), each
  active in 1-5 favourite channels (popular channels more often); ten members of
  server 1 are also members of the two small servers; one member writes exactly
  one message (at turn 500).
- **every turn**: ``build_context`` → with probability 1/5 an upgrade (``run_tool``)
  whose summary is written by a stand-in model that copies words from what the
  prompt showed (other channels' notes and messages included) and from the turn's
  message → ``capture`` of the user's message (words of their own, tagged with their
  id) and the bot's reply (which repeats some of them). Inputs are built inside the
  clock.

- **time**: simulated. The memory's clock (``ShortTermMemory.open(clock=)``) moves
  ``--turn-seconds`` (3 s) per turn, so 20,000 turns span 16.7 hours and the TTLs
  apply as they would; every ``janitor_interval_minutes`` of it the janitor runs, as
  the memory's scheduler would run it, and on PostgreSQL every ``autovacuum_naptime``
  autovacuum's rule picks the tables to ``VACUUM`` (``Autovacuum``). Turns are timed
  with the real clock; the janitor and vacuums run outside their timing.

At each checkpoint (after ``flush()``): distilled entries, provenance storage
(rows of the chain tables, their bytes in the database, and the bytes of the
cache's pins), database bytes per row, and by table (heap and indexes), the change
feed's share, RSS, and per-turn cost since the last checkpoint. At the end, four
purges in turn: the most active member of server 1, a median one, the one-message
member (each in server 1), and a member of all three servers (everywhere); the
simulated clock stands still meanwhile. Before them, ``preview_purge`` of each, and of a
sample of the active members, gives the share of the server's distilled entries
each would clear. While they run, an upgrader in a server of its own upgrades in
a loop: the longest upgrade that overlapped a purge and its flush is the stall,
beside its p99 without purges.

``members``: the turn and the upgrade as a server's membership grows (20
channels, ``cache_max_keys`` 100, each member says one thing and upgrades once),
then turns without an upgrade, sequential upgrades and a storm of 100 concurrent
callers, timed.

    python -m benchmarks.w6_server --store sqlite --erasure direct --users 400
    python -m benchmarks.w6_server --store postgresql --erasure complete --users 4000
    python -m benchmarks.w6_server --members 500 1500 5000
    python -m benchmarks.w6_server --turn-seconds 0   # the wall clock, as W6 ran before
    python -m benchmarks.run --only W6        # every store, policy and size
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import itertools
import json
import math
import os
import random
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .common import LargestFile, percentile, rss_bytes, settle, text
from .database import Skipped, memory_database, open_memory, skipped

_VOCAB = [
    "river", "amber", "cobalt", "meadow", "pixel", "lantern", "harbor", "quartz", "ember",
    "willow", "falcon", "cipher", "maple", "orbit", "saffron", "tundra", "velvet", "zephyr",
    "basalt", "comet", "dune", "fjord", "glacier", "juniper", "kelp", "lagoon", "nectar",
    "opal", "prairie", "quill", "reef", "sable", "thistle", "umber", "vortex", "wren",
]  # fmt: skip
CHECKPOINTS = (1_000, 5_000, 20_000)
UPGRADE_P = 0.2
DM_P = 0.03
BUSY = 1  # the busy server
SMALL = (2, 3)
QUIET = 99  # the upgrader's own server during purges
ROAMERS = 10
ONE_MESSAGE_AT = 500
PROVENANCE_TABLES = ("stm_chains", "stm_chain_members", "stm_chain_edges", "stm_purge_ranges")
FEED_TABLE = "stm_changes"
# Simulated seconds between two turns (bot answers) by default: a busy server's pace.
TURN_SECONDS = 3.0


def _p50_mean(values: list[float]) -> dict[str, float]:
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "p50": statistics.median(values),
        "mean": statistics.fmean(values),
        "p99": percentile(values, 99),
        "max": max(values),
    }


@dataclass
class Member:
    user: int
    servers: dict[int | None, list[int]]  # server -> favourite channels
    weight: float
    said: int = 0
    said_in: dict[int | None, int] = field(default_factory=dict)


@dataclass
class World:
    """Who speaks where, and how often: built once per run from a seed."""

    users: int
    seed: int = 6
    members: list[Member] = field(default_factory=list)
    by_server: dict[int, list[Member]] = field(default_factory=dict)
    cum: dict[int, list[float]] = field(default_factory=dict)
    one_message: Member | None = None
    roamers: list[Member] = field(default_factory=list)

    def __post_init__(self) -> None:
        rng = random.Random(self.seed)
        layout = {BUSY: (self.users, 40)} | {s: (max(10, self.users // 4), 10) for s in SMALL}
        next_user = 1
        for server, (count, channels) in layout.items():
            channel_ids = [server * 10_000 + c for c in range(channels)]
            popularity = [1 / (c + 1) ** 0.8 for c in range(channels)]
            people = []
            for rank in range(1, count + 1):
                favourites = sorted(set(rng.choices(channel_ids, popularity, k=rng.randint(1, 5))))
                m = Member(next_user, {server: favourites, None: [10**12 + next_user]}, 1 / rank)
                next_user += 1
                people.append(m)
            self.by_server[server] = people
            self.members += people
        # The one-message member: of the busy server, never chosen by weight.
        self.one_message = self.by_server[BUSY][-1]
        self.one_message.weight = 0.0
        # Members of every server, at middling ranks of the busy one.
        for m in self.by_server[BUSY][20 : 20 + ROAMERS]:
            for server in SMALL:
                m.servers[server] = rng.sample(
                    [server * 10_000 + c for c in range(10)], rng.randint(1, 3)
                )
                self.by_server[server].append(m)
            self.roamers.append(m)
        for server, people in self.by_server.items():
            self.cum[server] = list(itertools.accumulate(m.weight for m in people))

    def pick(self, rng: random.Random, turn: int) -> tuple[Member, int | None, int]:
        """Who speaks in this turn, in which server (None: a DM) and channel."""
        if turn == ONE_MESSAGE_AT and self.one_message is not None:
            m = self.one_message
            return m, BUSY, m.servers[BUSY][0]
        x = rng.random()
        server = BUSY if x < 0.85 else SMALL[0] if x < 0.91 else SMALL[1]
        cum = self.cum[server]
        m = self.by_server[server][bisect.bisect(cum, rng.random() * cum[-1])]
        if rng.random() < DM_P:
            return m, None, m.servers[None][0]
        return m, server, rng.choice(m.servers[server])


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(_VOCAB) for _ in range(n))


def model_summary(rng: random.Random, prompt: str, said: str) -> str:
    """The stand-in model: a summary copying words from what the prompt showed and the
    turn's message, as a model may (every user's tagged words included)."""
    shown = prompt.split()
    picked = rng.sample(shown, min(len(shown), 60)) if shown else []
    return ("Notes: " + " ".join(picked) + " / " + said)[:900]


# -- measurements -------------------------------------------------------------------
def _pin_bytes(pin: Any) -> int:
    if pin is None:
        return 0
    size = sys.getsizeof(pin)
    for value in (pin.chain, pin.version):
        if not -5 <= value <= 256:  # CPython's shared small ints cost nothing per entry
            size += sys.getsizeof(value)
    return size


def cache_provenance(memory: Any) -> dict[str, float]:
    entries = list(memory.cache)
    distilled = [e for e in entries if e.distilled]
    held = sum(_pin_bytes(e.pin) for e in entries)
    return {
        "cached_keys": len(entries),
        "cached_distilled": len(distilled),
        "cache_provenance_bytes": held,
        "cache_provenance_bytes_per_distilled": held / len(distilled) if distilled else 0.0,
    }


def sqlite_storage(path: str) -> dict[str, Any]:
    # The WAL copied into the file first (what a checkpoint does anyway), so the file's
    # size is what the rows take; the library's own connection stays open meanwhile.
    db = sqlite3.connect(path, isolation_level=None, timeout=5)
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        rows = db.execute("SELECT count(*) FROM short_term_memories").fetchone()[0]
        distilled = db.execute(
            "SELECT count(*) FROM short_term_memories WHERE summary IS NOT NULL "
            "OR categories != '{}'"
        ).fetchone()[0]
        by_table: dict[str, int] = {}
        split: dict[str, dict[str, int]] = {}
        for table, kind, size in db.execute(
            "SELECT m.tbl_name, m.type, sum(d.pgsize) FROM dbstat d JOIN sqlite_master m "
            "ON m.name = d.name GROUP BY m.tbl_name, m.type"
        ):
            by_table[table] = by_table.get(table, 0) + int(size)
            part = split.setdefault(table, {"heap": 0, "indexes": 0, "other": 0})
            part["heap" if kind == "table" else "indexes"] += int(size)
        counts = {
            t: db.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in PROVENANCE_TABLES
        }
        feed_rows = db.execute(f"SELECT count(*) FROM {FEED_TABLE}").fetchone()[0]
        members = [n for (n,) in db.execute(
            "SELECT count(*) FROM stm_chain_members GROUP BY chain_id")]  # fmt: skip
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        free *= db.execute("PRAGMA page_size").fetchone()[0]
    finally:
        db.close()
    files = os.path.getsize(path)
    out = _storage(rows, distilled, by_table, counts, members, files)
    return out | {"table_split": split, "feed_rows": feed_rows, "free_bytes": free}


async def postgres_compact(url: str) -> dict[str, Any]:
    """``VACUUM FULL``, then the tables' sizes: what the rows take without the dead row
    versions that (auto)vacuum reclaims over time. It rewrites every table under an
    exclusive lock, so runs with ``--compact`` time what follows on compacted tables."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("VACUUM FULL")
    finally:
        await conn.close()
    storage = await postgres_storage(url)
    return {
        "compact_bytes": storage["database_bytes"],
        "compact_bytes_per_distilled": storage["database_bytes_per_distilled"],
        "compact_table_bytes": storage["table_bytes"],
        "compact_table_split": storage["table_split"],
        "compact_index_bytes": storage["index_bytes"],
    }


async def postgres_storage(url: str) -> dict[str, Any]:
    try:
        import asyncpg
    except ImportError:  # the postgres extra; the library itself needs it to get here
        raise Skipped("asyncpg is not installed: pip install -e '.[postgres]'") from None

    conn = await asyncpg.connect(url)
    try:
        rows = await conn.fetchval("SELECT count(*) FROM short_term_memories")
        distilled = await conn.fetchval(
            "SELECT count(*) FROM short_term_memories WHERE summary IS NOT NULL "
            "OR categories <> '{}'"
        )
        sizes = await conn.fetch(
            "SELECT c.relname, pg_total_relation_size(c.oid) AS total, "
            "pg_relation_size(c.oid) AS heap, pg_indexes_size(c.oid) AS indexes, "
            "s.n_live_tup, s.n_dead_tup "
            "FROM pg_class c LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid "
            "WHERE c.relkind = 'r' AND c.relnamespace = 'public'::regnamespace"
        )
        by_table = {r["relname"]: int(r["total"]) for r in sizes}
        # Heap: the table's main fork; other: its TOAST table, free space and visibility maps.
        split = {
            r["relname"]: {
                "heap": int(r["heap"]),
                "indexes": int(r["indexes"]),
                "other": int(r["total"]) - int(r["heap"]) - int(r["indexes"]),
                "live_tuples": int(r["n_live_tup"] or 0),
                "dead_tuples": int(r["n_dead_tup"] or 0),
            }
            for r in sizes
        }
        counts = {t: await conn.fetchval(f"SELECT count(*) FROM {t}") for t in PROVENANCE_TABLES}
        # Each index's bytes, and each table's live rows' mean width as stored (tuple
        # header excluded): where the bytes go.
        indexes = {
            r["name"]: int(r["bytes"])
            for r in await conn.fetch(
                "SELECT i.relname AS name, pg_relation_size(i.oid) AS bytes FROM pg_index x "
                "JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE i.relnamespace = 'public'::regnamespace"
            )
        }
        widths = {
            r["relname"]: await conn.fetchval(
                f"SELECT coalesce(avg(pg_column_size(t.*)), 0)::float FROM {r['relname']} t"
            )
            for r in sizes
        }
        feed_rows = await conn.fetchval(f"SELECT count(*) FROM {FEED_TABLE}")
        members = [
            r[0] for r in await conn.fetch(
                "SELECT count(*) FROM stm_chain_members GROUP BY chain_id")
        ]  # fmt: skip
        files = sum(by_table.values())
    finally:
        await conn.close()
    out = _storage(rows, distilled, by_table, counts, members, files)
    return out | {
        "table_split": split,
        "index_bytes": indexes,
        "row_widths": widths,
        "feed_rows": feed_rows,
    }


def _storage(
    rows: int,
    distilled: int,
    by_table: dict[str, int],
    counts: dict[str, int],
    members: list[int],
    files: int,
) -> dict[str, Any]:
    prov_rows = sum(counts.values())
    prov_bytes = sum(by_table.get(t, 0) for t in PROVENANCE_TABLES)
    return {
        "rows": rows,
        "distilled": distilled,
        "provenance_rows": counts,
        "provenance_rows_per_distilled": prov_rows / distilled if distilled else 0.0,
        "provenance_bytes": prov_bytes,
        "provenance_bytes_per_distilled": prov_bytes / distilled if distilled else 0.0,
        "members_per_chain_p50": statistics.median(members) if members else 0,
        "members_per_chain_max": max(members) if members else 0,
        "database_bytes": files,
        "database_bytes_per_row": files / rows if rows else 0.0,
        "database_bytes_per_distilled": files / distilled if distilled else 0.0,
        "feed_bytes": by_table.get(FEED_TABLE, 0),
        "feed_bytes_per_distilled": by_table.get(FEED_TABLE, 0) / distilled if distilled else 0.0,
        "table_bytes": by_table,
    }


# -- simulated time: the memory's clock, its janitor, PostgreSQL's autovacuum ---------------
class Autovacuum:
    """What PostgreSQL's autovacuum daemon does, in simulated time: every naptime, a plain
    ``VACUUM`` of each table past its threshold, on a connection of its own, while the load
    goes on (the real daemon works in real time, which W6 compresses into seconds).

    The rule is autovacuum's own (``autovacuum.c``, PostgreSQL 13 and later): a table is
    vacuumed when its dead tuples exceed ``autovacuum_vacuum_threshold +
    autovacuum_vacuum_scale_factor × reltuples`` (``pg_class.reltuples``, taken as 0 for a
    table never vacuumed or analyzed), or its inserts since the last vacuum exceed
    ``autovacuum_vacuum_insert_threshold + autovacuum_vacuum_insert_scale_factor ×
    reltuples``; a table's own storage parameters override the server's settings, which
    are read from ``pg_settings``, not assumed. Counts come from ``pg_stat_user_tables``,
    which other backends update at most once a second (real time): at W6's pace a decision
    may miss the last second of turns, as the daemon misses nothing at a real server's.
    One worker, vacuuming tables one after another (the daemon has up to three); rounds
    due while one still runs (in real time) are skipped. The daemon's cost-based
    delay is a real-time budget and is not applied (a manual ``VACUUM`` has none)."""

    SETTINGS = (
        "autovacuum",
        "autovacuum_naptime",
        "autovacuum_vacuum_threshold",
        "autovacuum_vacuum_scale_factor",
        "autovacuum_vacuum_insert_threshold",
        "autovacuum_vacuum_insert_scale_factor",
    )

    def __init__(self, conn: Any, settings: dict[str, str], start: float) -> None:
        self.conn = conn
        self.settings = settings
        self.naptime = float(settings["autovacuum_naptime"])  # seconds (pg_settings' unit)
        self.threshold = float(settings["autovacuum_vacuum_threshold"])
        self.scale = float(settings["autovacuum_vacuum_scale_factor"])
        self.insert_threshold = float(settings["autovacuum_vacuum_insert_threshold"])
        self.insert_scale = float(settings["autovacuum_vacuum_insert_scale_factor"])
        self.next_round = start + self.naptime
        self.task: asyncio.Task[None] | None = None
        self.rounds = 0  # rounds run
        self.rounds_due = 0  # naptimes passed (a round due while one runs is skipped)
        self.vacuums: dict[str, int] = {}
        self.vacuums_for_inserts: dict[str, int] = {}
        self.vacuum_seconds = 0.0
        self.dead_seen = 0  # n_dead_tup of the tables vacuumed, when they were picked

    @classmethod
    async def open(cls, url: str, start: float) -> Autovacuum:
        import asyncpg

        conn = await asyncpg.connect(url)
        rows = await conn.fetch(
            "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1::text[])",
            list(cls.SETTINGS),
        )
        settings = {r["name"]: r["setting"] for r in rows}
        units = {r["name"]: r["unit"] for r in rows}
        if units.get("autovacuum_naptime") not in ("s", None):
            raise RuntimeError(f"autovacuum_naptime in {units['autovacuum_naptime']!r}, not s")
        return cls(conn, settings, start)

    def tick(self, now: float) -> None:
        """Start a round when one is due (never awaited by a turn); while the last one
        still runs, the rounds due meanwhile are skipped."""
        if now < self.next_round:
            return
        while self.next_round <= now:
            self.next_round += self.naptime
            self.rounds_due += 1
        if self.task is not None and not self.task.done():
            return
        self.task = asyncio.get_running_loop().create_task(self._round())

    async def _round(self) -> None:
        self.rounds += 1
        rows = await self.conn.fetch(
            "SELECT s.relname, s.n_dead_tup, s.n_ins_since_vacuum, c.reltuples, c.reloptions "
            "FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid"
        )
        for row in rows:
            options = dict(o.split("=", 1) for o in row["reloptions"] or ())
            if options.get("autovacuum_enabled", "true") in ("false", "off"):
                continue
            tuples = max(0.0, float(row["reltuples"]))
            limit = (
                float(options.get("autovacuum_vacuum_threshold", self.threshold))
                + float(options.get("autovacuum_vacuum_scale_factor", self.scale)) * tuples
            )
            insert_base = float(
                options.get("autovacuum_vacuum_insert_threshold", self.insert_threshold)
            )
            insert_limit = (
                insert_base
                + float(options.get("autovacuum_vacuum_insert_scale_factor", self.insert_scale))
                * tuples
            )
            name = row["relname"]
            if row["n_dead_tup"] > limit:
                self.vacuums[name] = self.vacuums.get(name, 0) + 1
                self.dead_seen += int(row["n_dead_tup"])
            elif insert_base >= 0 and row["n_ins_since_vacuum"] > insert_limit:
                self.vacuums_for_inserts[name] = self.vacuums_for_inserts.get(name, 0) + 1
            else:
                continue
            t0 = time.perf_counter()
            await self.conn.execute(f'VACUUM "{name}"')
            self.vacuum_seconds += time.perf_counter() - t0

    async def settled(self) -> None:
        """Wait for the round in flight (before a measurement)."""
        if self.task is not None:
            await self.task

    def report(self) -> dict[str, Any]:
        return {
            "settings": self.settings,
            "rounds": self.rounds,
            "rounds_due": self.rounds_due,
            "vacuums": sum(self.vacuums.values()),
            "vacuums_by_table": dict(sorted(self.vacuums.items())),
            "vacuums_for_inserts": sum(self.vacuums_for_inserts.values()),
            "vacuums_for_inserts_by_table": dict(sorted(self.vacuums_for_inserts.items())),
            "dead_tuples_at_vacuum": self.dead_seen,
            "vacuum_seconds": self.vacuum_seconds,
        }

    async def close(self) -> None:
        try:
            await self.settled()
        finally:
            await self.conn.close()


class WallClock:
    """The memory's clock when time is not simulated (``--turn-seconds 0``): the wall
    clock, which moves only by the seconds the run takes, as in W6 before it kept time."""

    @property
    def now(self) -> float:
        return time.time()

    def __call__(self) -> float:
        return time.time()

    def advance(self, seconds: float = 0.0) -> None:
        """Turns take no simulated time."""


def memory_clock(turn_seconds: float) -> Any:
    """Simulated time from now, or the wall clock when turns take no time."""
    from stm.testing import Clock

    return Clock() if turn_seconds > 0 else WallClock()


class Upkeep:
    """Simulated time and what runs on it between turns: the memory's clock moves
    ``turn_seconds`` per turn; every ``janitor_interval_minutes`` of it the janitor runs, as
    the memory's own scheduler would run it; on PostgreSQL, autovacuum (``Autovacuum``).

    Before each janitor pass the feed's follower reads the feed: in real time it reads
    every quarter of the coherence bound (0.5 s), so at a real server it is current when
    an hour has passed; at W6's pace half a second is hundreds of turns, and the janitor,
    which keeps what the follower has not read, would keep them."""

    def __init__(
        self,
        memory: Any,
        clock: Any,
        turn_seconds: float,
        autovacuum: Autovacuum | None = None,
    ) -> None:
        self.memory = memory
        self.clock = clock
        self.turn_seconds = turn_seconds
        self.started = clock.now
        self.janitor_seconds = memory.config.janitor_interval_minutes * 60
        # On the wall clock the memory's own scheduler keeps the janitor's hours.
        self.next_janitor = clock.now + self.janitor_seconds if turn_seconds > 0 else math.inf
        self.janitor_runs = 0
        self.janitor_ms: list[float] = []
        self.expired_keys = 0  # cache entries the janitor found expired
        self.autovacuum = autovacuum

    def turn(self) -> None:
        """One turn's worth of simulated time passes."""
        self.clock.advance(self.turn_seconds)

    async def tick(self) -> None:
        """Run what is due at the clock's time (between turns, outside their timing)."""
        now = self.clock.now
        while now >= self.next_janitor:
            self.next_janitor += self.janitor_seconds
            t0 = time.perf_counter()
            await self.memory.follower.catch_up()
            self.expired_keys += await self.memory.run_janitor()
            self.janitor_ms.append((time.perf_counter() - t0) * 1e3)
            self.janitor_runs += 1
        if self.autovacuum is not None:
            self.autovacuum.tick(now)

    async def settled(self) -> None:
        if self.autovacuum is not None:
            await self.autovacuum.settled()

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "simulated_hours": (self.clock.now - self.started) / 3600 if self.turn_seconds else 0.0,
            "janitor_runs": self.janitor_runs,
            "janitor_ms": _p50_mean(self.janitor_ms),
            "janitor_expired_keys": self.expired_keys,
        }
        if self.autovacuum is not None:
            out["autovacuum"] = self.autovacuum.report()
        return out


# -- the simulation -----------------------------------------------------------------
class Sim:
    def __init__(self, memory: Any, world: World, upkeep: Upkeep, seed: int = 11) -> None:
        from stm import DialogueMessage, GenerationFinished, TurnContext

        self.memory = memory
        self.world = world
        self.upkeep = upkeep
        self.rng = random.Random(seed)
        self.turn = 0
        self.turn_us: list[float] = []  # turns without an upgrade, whole turn
        self.upgrade_turn_us: list[float] = []  # turns with one, whole turn
        self.upgrade_us: list[float] = []  # run_tool alone
        self.failed_upgrades = 0
        self._types = (DialogueMessage, GenerationFinished, TurnContext)

    async def play(self, until: int) -> None:
        DialogueMessage, GenerationFinished, TurnContext = self._types
        memory, rng, world = self.memory, self.rng, self.world
        clock = time.perf_counter
        upkeep = self.upkeep
        while self.turn < until:
            self.turn += 1
            upkeep.turn()
            await upkeep.tick()
            m, server, channel = world.pick(rng, self.turn)
            upgrade = rng.random() < UPGRADE_P
            t0 = clock()
            said = f"u{m.user}n{m.said} {_words(rng, 12)}"
            ctx = TurnContext(
                user_id=m.user,
                channel_id=channel,
                server_id=server,
                user_name=f"member{m.user}",
                channel_name=None if server is None else f"chan-{channel % 10_000}",
                server_name=None if server is None else f"server-{server}",
                user_text=said,
            )
            prompt = str(await memory.build_context(ctx))
            if upgrade:
                summary = model_summary(rng, prompt, said)
                u0 = clock()
                result = await memory.run_tool(ctx, {"summary": summary})
                self.upgrade_us.append((clock() - u0) * 1e6)
                self.failed_upgrades += not result.success
            reply = f"ok {said.split()[0]} {_words(rng, 8)}"
            await memory.capture(
                GenerationFinished(
                    context=ctx,
                    messages=[
                        DialogueMessage(role="user", content=said, author_id=m.user,
                                        speaker_name=ctx.user_name),
                        DialogueMessage(role="assistant", content=reply, author_id=None,
                                        speaker_name=ctx.bot_name),
                    ],
                )
            )  # fmt: skip
            (self.upgrade_turn_us if upgrade else self.turn_us).append((clock() - t0) * 1e6)
            m.said += 1
            m.said_in[server] = m.said_in.get(server, 0) + 1

    def cost(self) -> dict[str, Any]:
        out = {
            "turn_us": _p50_mean(self.turn_us),
            "upgrade_turn_us": _p50_mean(self.upgrade_turn_us),
            "run_tool_us": _p50_mean(self.upgrade_us),
            "failed_upgrades": self.failed_upgrades,
        }
        self.turn_us, self.upgrade_turn_us, self.upgrade_us = [], [], []
        self.failed_upgrades = 0
        return out


class Upgrader:
    """Upgrades in a loop in a server of its own; each run_tool waits for its commit."""

    def __init__(self, memory: Any) -> None:
        self.memory = memory
        self.latencies: list[tuple[float, float]] = []
        self.stop = asyncio.Event()
        self.failed = 0

    async def run(self) -> None:
        from stm import DialogueMessage, GenerationFinished, TurnContext

        n = 0
        while not self.stop.is_set():
            ctx = TurnContext(
                user_id=10**9 + n % 20, channel_id=QUIET * 10_000 + n % 20, server_id=QUIET
            )
            await self.memory.build_context(ctx)
            t0 = time.perf_counter()
            result = await self.memory.run_tool(ctx, {"summary": f"quiet server notes {n}"})
            self.latencies.append((t0, time.perf_counter() - t0))
            self.failed += not result.success
            await self.memory.capture(
                GenerationFinished(
                    context=ctx,
                    messages=[DialogueMessage(role="user", content=f"q{n}", author_id=ctx.user_id)],
                )
            )
            n += 1
            await asyncio.sleep(0.002)

    def during(self, a: float, b: float) -> list[float]:
        return [s * 1e3 for t, s in self.latencies if t + s >= a and t <= b]


def _targets(world: World) -> dict[str, tuple[Member, int | None]]:
    busy = [m for m in world.by_server[BUSY] if m.said_in.get(BUSY, 0) > 0]
    busy.sort(key=lambda m: m.said_in.get(BUSY, 0))
    assert world.one_message is not None
    roamer = max(world.roamers, key=lambda m: sum(1 for s in (*SMALL, BUSY) if m.said_in.get(s)))
    return {
        "most active": (busy[-1], BUSY),
        "median": (busy[len(busy) // 2], BUSY),
        "one message": (world.one_message, BUSY),
        "in every server (everywhere)": (roamer, None),
    }


def _shares(impact: Any) -> dict[str, Any]:
    return {
        "own": impact.own,
        "shared": impact.shared,
        "by_server": {
            str(s): [impact.shared_by_server.get(s, 0), impact.distilled_by_server.get(s, 0)]
            for s in sorted(
                set(impact.distilled_by_server) | set(impact.shared_by_server),
                key=lambda s: -1 if s is None else s,
            )
        },
        "busy_share": impact.share_of(BUSY),
    }


async def purges(memory: Any, world: World, sample: int) -> dict[str, Any]:
    targets = _targets(world)
    previews = {}
    for name, (m, server) in targets.items():
        previews[name] = _shares(await memory.preview_purge(m.user, server))
    # The blast radius over active members of the busy server (a sample spread over ranks).
    active = sorted(
        (m for m in world.by_server[BUSY] if m.said_in.get(BUSY)),
        key=lambda m: -m.said_in.get(BUSY, 0),
    )
    step = max(1, len(active) // sample)
    shares = []
    t0 = time.perf_counter()
    for m in active[::step][:sample]:
        shares.append((await memory.preview_purge(m.user, BUSY)).share_of(BUSY))
    preview_ms = (time.perf_counter() - t0) * 1e3 / max(1, len(shares))
    shares.sort()
    blast = {
        "sampled": len(shares),
        "active": len(active),
        "share_p50": statistics.median(shares),
        "share_p10": shares[len(shares) // 10],
        "share_p90": shares[min(len(shares) - 1, (9 * len(shares)) // 10)],
        "share_max": shares[-1],
        "preview_ms_mean": preview_ms,
    }
    upgrader = Upgrader(memory)
    task = asyncio.create_task(upgrader.run())
    out: dict[str, Any] = {}
    try:
        await asyncio.sleep(1.0)
        b0 = time.perf_counter()
        await asyncio.sleep(3.0)
        base = upgrader.during(b0, time.perf_counter())
        for name, (m, server) in targets.items():
            t0 = time.perf_counter()
            impact = await memory.purge(m.user, server)
            t1 = time.perf_counter()
            stalls = upgrader.during(t0, t1)
            out[name] = {
                "user": m.user,
                "messages": m.said_in.get(BUSY, 0) if server else m.said,
                "servers": sorted(s for s in m.said_in if s is not None),
                "preview": previews[name],
                "purged": _shares(impact),
                "purge_flush_ms": (t1 - t0) * 1e3,
                "stall_max_ms": max(stalls) if stalls else 0.0,
                "upgrades_during": len(stalls),
            }
            await asyncio.sleep(0.5)
    finally:
        upgrader.stop.set()
        await task
    return {
        "targets": out,
        "blast": blast,
        "baseline_upgrade_ms": _p50_mean(base),
        "quiet_failed": upgrader.failed,
    }


async def run_server(
    store: str,
    erasure: str,
    users: int,
    checkpoints: tuple[int, ...],
    sample: int = 40,
    compact: bool = False,
    turn_seconds: float = TURN_SECONDS,
    autovacuum: bool = True,
    note_history: int = 3,
) -> dict[str, Any]:
    world = World(users)
    started = time.perf_counter()
    clock = memory_clock(turn_seconds)
    async with memory_database(store, f"w6{erasure[0]}{users}") as database:
        memory = await open_memory(
            database, erasure=erasure, clock=clock, note_history=note_history
        )
        vacuum = (
            await Autovacuum.open(database, clock.now)
            if autovacuum and store == "postgresql" and turn_seconds > 0
            else None
        )
        upkeep = Upkeep(memory, clock, turn_seconds, vacuum)
        # SQLite: the largest the WAL grew while the turns were played (sqlite_storage
        # empties it at each checkpoint).
        wal = LargestFile(f"{database}-wal")
        try:
            sim = Sim(memory, world, upkeep)
            rss0 = rss_bytes()
            points = []
            for until in checkpoints:
                t0 = time.perf_counter()
                with wal:
                    await sim.play(until)
                played = time.perf_counter() - t0
                await upkeep.settled()
                await memory.flush()
                settle()
                storage = (
                    await postgres_storage(database)
                    if store == "postgresql"
                    else sqlite_storage(database)
                )
                if compact and store == "postgresql":
                    storage.update(await postgres_compact(database))
                points.append({
                    "turns": until,
                    "seconds": played,
                    "active_members": sum(1 for m in world.members if m.said),
                    **storage,
                    **cache_provenance(memory),
                    "rss_mb": rss_bytes() / 2**20,
                    "rss_grown_mb": (rss_bytes() - rss0) / 2**20,
                    **sim.cost(),
                    **upkeep.report(),
                    **({"largest_wal_bytes": wal.take()} if store == "sqlite" else {}),
                })  # fmt: skip
                print(_point_line(store, erasure, users, points[-1]), file=sys.stderr, flush=True)
            purged = await purges(memory, world, sample)
            await memory.flush()
            after = (
                await postgres_storage(database)
                if store == "postgresql"
                else sqlite_storage(database)
            )
        finally:
            try:
                await memory.close()
            finally:
                if vacuum is not None:
                    await vacuum.close()
    return {
        "store": store,
        "erasure": erasure,
        "note_history": note_history,
        "users": users,
        "turn_seconds": turn_seconds,
        "autovacuum_emulated": vacuum is not None,
        "checkpoints": points,
        "purges": purged,
        "distilled_after_purges": after["distilled"],
        "seconds": time.perf_counter() - started,
    }


def _point_line(store: str, erasure: str, users: int, p: dict[str, Any]) -> str:
    vacuum = p.get("autovacuum")
    return (
        f"{store} {erasure} {users} users, {p['turns']:,} turns ({p['seconds']:.1f} s; "
        f"{p.get('simulated_hours', 0):.1f} h simulated, {p.get('janitor_runs', 0)} janitor "
        f"passes, {p.get('janitor_expired_keys', 0)} keys expired"
        + (f", {vacuum['vacuums']} autovacuums" if vacuum else "")
        + f"): {p['distilled']} distilled, {p['provenance_rows_per_distilled']:.1f} prov rows "
        f"and {p['provenance_bytes_per_distilled']:,.0f} B per distilled, "
        f"{p['cache_provenance_bytes_per_distilled']:.0f} B cached, "
        f"{p['database_bytes_per_distilled']:,.0f} B db per distilled "
        f"(feed {_feed_per_distilled(p):,.0f}; {p['database_bytes_per_row']:,.0f} per row"
        + (
            f"; {p['compact_bytes_per_distilled']:,.0f} per distilled after VACUUM FULL"
            if "compact_bytes_per_distilled" in p
            else ""
        )
        + f"), RSS {p['rss_mb']:.0f} MB, "
        f"turn p50 {p['turn_us'].get('p50', 0):.0f} us, run_tool p50 "
        f"{p['run_tool_us'].get('p50', 0) / 1e3:.1f} ms"
        + (
            f", largest WAL {p['largest_wal_bytes'] / 2**20:.1f} MiB"
            if "largest_wal_bytes" in p
            else ""
        )
    )


def _feed_per_distilled(p: dict[str, Any]) -> float:
    """The change feed's bytes per distilled row (from the table sizes in older results)."""
    if "feed_bytes_per_distilled" in p:
        return float(p["feed_bytes_per_distilled"])
    feed = p.get("table_bytes", {}).get(FEED_TABLE, 0)
    return feed / p["distilled"] if p.get("distilled") else 0.0


# -- cost against membership ------------------------------------------------------------
async def run_members(
    store: str,
    members: int,
    erasure: str = "direct",
    storm_callers: int = 40,
    cache_max_keys: int = 100,
    turn_seconds: float = TURN_SECONDS,
    autovacuum: bool = True,
) -> dict[str, Any]:
    from stm import DialogueMessage, GenerationFinished, TurnContext
    from stm._keys import server_key

    channels = 20
    clock = memory_clock(turn_seconds)  # ``turn_seconds`` per turn, storms' turns included
    server = 7
    rng = random.Random(members)
    refused = {True: 0, False: 0}  # upgrades applied (True) and refused, per phase

    def channel_key(user: int) -> str:
        return server_key(server, server * 10_000 + user % channels)

    def ctx_of(user: int) -> Any:
        return TurnContext(
            user_id=user,
            channel_id=server * 10_000 + user % channels,
            server_id=server,
            user_name=f"member{user}",
            channel_name=f"chan-{user % channels}",
            server_name="server",
        )

    async def turn(memory: Any, user: int, upgrade: bool, tm: list[float]) -> None:
        upkeep.turn()
        said = f"u{user} {_words(rng, 12)}"
        ctx = ctx_of(user)
        prompt = str(await memory.build_context(ctx))
        if upgrade:
            t0 = time.perf_counter()
            result = await memory.run_tool(ctx, {"summary": model_summary(rng, prompt, said)})
            tm.append((time.perf_counter() - t0) * 1e6)
            refused[result.success] += 1
        await memory.capture(
            GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(role="user", content=said, author_id=user),
                    DialogueMessage(role="assistant", content=f"ok {said[:30]}"),
                ],
            )
        )

    async with memory_database(store, f"w6m{members}") as database:
        memory = await open_memory(
            database, erasure=erasure, cache_max_keys=cache_max_keys, clock=clock
        )
        vacuum = (
            await Autovacuum.open(database, clock.now)
            if autovacuum and store == "postgresql" and turn_seconds > 0
            else None
        )
        # Its janitor and autovacuum run between the sequential turns, outside their timing,
        # and once after each storm (whose wall time is measured whole).
        upkeep = Upkeep(memory, clock, turn_seconds, vacuum)
        try:
            t0 = time.perf_counter()
            fill: list[float] = []
            fill_turns: list[float] = []
            upkept = 0.0
            for user in range(1, members + 1):  # each member says one thing, upgrades once
                s = time.perf_counter()
                await turn(memory, user, True, fill)
                fill_turns.append((time.perf_counter() - s) * 1e6)
                s = time.perf_counter()
                await upkeep.tick()
                upkept += time.perf_counter() - s
            filled = time.perf_counter() - t0 - upkept
            await upkeep.settled()
            await memory.flush()
            settle()
            # Turns without an upgrade, by members already seen (inputs inside the clock).
            plain: list[float] = []
            reads = memory.writer.round_trips
            # Turns whose channel's entry had left the cache (read back from the store, its
            # recent messages lost): plain turns, then turns of which a fifth upgrade.
            missing = {False: 0, True: 0}
            for _ in range(3000):
                user = 1 + rng.randrange(members)
                missing[False] += channel_key(user) not in memory.cache
                s = time.perf_counter()
                await turn(memory, user, False, [])
                plain.append((time.perf_counter() - s) * 1e6)
                await upkeep.tick()
                # Between turns the loop runs what they left in the background (reads
                # of evicted entries' rows), as a bot's loop does between messages.
                await asyncio.sleep(0)
            await memory.flush()
            plain_round_trips = memory.writer.round_trips - reads
            # Sequential upgrades by members already seen.
            sequential: list[float] = []
            for _ in range(300):
                await turn(memory, 1 + rng.randrange(members), True, sequential)
                await upkeep.tick()
                await asyncio.sleep(0)
            for _ in range(1000):  # turns of which a fifth upgrade, as in the busy server
                user = 1 + rng.randrange(members)
                missing[True] += channel_key(user) not in memory.cache
                await turn(memory, user, rng.random() < UPGRADE_P, [])
                await upkeep.tick()
                await asyncio.sleep(0)
            await upkeep.settled()
            before = dict(refused)
            # A storm: concurrent callers, each upgrading after its own prompt (at most 40:
            # each upgrade needs two keys in a cache of 100).
            storm: list[float] = []
            per_caller = 1000 // storm_callers

            async def caller(c: int) -> None:
                for n in range(per_caller):
                    await turn(memory, 1 + (c * 37 + n * 101) % members, True, storm)

            s = time.perf_counter()
            await asyncio.gather(*(caller(c) for c in range(storm_callers)))
            storm_s = time.perf_counter() - s
            storm_applied = refused[True] - before[True]
            storm_refused = refused[False] - before[False]
            await upkeep.tick()
            await upkeep.settled()
            # The same storm as W2's: run_tool alone (no prompt built: the upgrade credits
            # what one would have shown), summaries made before the clock starts.
            summaries = [text(f"s{i}", 1000) for i in range(1000)]
            before = dict(refused)

            async def tool_caller(c: int) -> None:
                for n in range(per_caller):
                    result = await memory.run_tool(
                        ctx_of(1 + (c * 37 + n * 101) % members),
                        {"summary": summaries[c * per_caller + n]},
                    )
                    refused[result.success] += 1

            s = time.perf_counter()
            await asyncio.gather(*(tool_caller(c) for c in range(storm_callers)))
            tool_s = time.perf_counter() - s
            tool_applied = refused[True] - before[True]
            tool_refused = refused[False] - before[False]
            for _ in range(per_caller * storm_callers):  # its upgrades take simulated time too
                upkeep.turn()
            await upkeep.tick()
            await upkeep.settled()
            await memory.flush()
            storage = (
                await postgres_storage(database)
                if store == "postgresql"
                else sqlite_storage(database)
            )
            rss = rss_bytes() / 2**20
        finally:
            try:
                await memory.close()
            finally:
                if vacuum is not None:
                    await vacuum.close()
    return {
        "store": store,
        "members": members,
        "turn_seconds": turn_seconds,
        **upkeep.report(),
        "fill_seconds": filled,
        "fill_upgrade_us": _p50_mean(fill),
        "fill_turn_us": _p50_mean(fill_turns),
        "turn_us": _p50_mean(plain),
        # Store round trips per turn without an upgrade, their background reads included.
        "turn_round_trips": plain_round_trips / len(plain),
        # Share of turns whose channel's entry had left the cache: without upgrades, and
        # with a fifth of the turns upgrading.
        "channel_missing": missing[False] / 3000,
        "channel_missing_with_upgrades": missing[True] / 1000,
        "upgrade_us": _p50_mean(sequential),
        "storm_callers": storm_callers,
        "cache_max_keys": cache_max_keys,
        "storm_upgrades_per_s": storm_applied / storm_s,
        "storm_us_per_upgrade": storm_s * 1e6 / max(1, storm_applied),
        "storm_refused": storm_refused,
        "tool_storm_upgrades_per_s": tool_applied / tool_s,
        "tool_storm_us_per_upgrade": tool_s * 1e6 / max(1, tool_applied),
        "tool_storm_refused": tool_refused,
        "refused_before_storm": before[False],
        "distilled": storage["distilled"],
        "provenance_bytes_per_distilled": storage["provenance_bytes_per_distilled"],
        "database_bytes_per_distilled": storage["database_bytes_per_distilled"],
        "rss_mb": rss,
    }


# -- tables -----------------------------------------------------------------------------
def _row(*cells: object) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _pm(cell: dict[str, Any], scale: float = 1.0, digits: int = 0) -> str:
    if not cell.get("n"):
        return "–"
    return f"{cell['p50'] * scale:,.{digits}f} / {cell['mean'] * scale:,.{digits}f}"


def tables(results: list[dict[str, Any]]) -> list[str]:
    """Markdown tables of W6 results (server runs and membership sweeps, in any order)."""
    servers = [r for r in results if "checkpoints" in r]
    sweeps = [r for r in results if "members" in r and "checkpoints" not in r]
    lines: list[str] = []
    if servers:
        lines += [
            "**W6 checkpoints** (busy server of N members, 40 channels, plus two small servers "
            "and DMs; every turn `build_context`, an upgrade with probability 1/5, `capture`; "
            "simulated time: the memory's clock moves the run's seconds per turn, the janitor "
            "runs every hour of it and, on PostgreSQL, autovacuum's rule every naptime "
            "(vacuums: how many ran so far); after `flush()`; provenance: rows and bytes of "
            "the chain tables per distilled entry; cache: bytes of the pins held per "
            "distilled entry; file bytes after a checkpoint of the WAL; PostgreSQL: the "
            "tables' total relation size; feed: the change feed's part of it; turn: p50 / "
            "mean since the previous checkpoint, inputs built inside the clock)",
            "",
            _row(
                "store", "erasure", "members", "turns", "simulated (h), s per turn",
                "distilled entries",
                "provenance rows per entry", "provenance bytes per entry (DB)",
                "provenance bytes per entry (cache)", "members per chain p50 / max",
                "DB bytes per row", "DB bytes per distilled row",
                "feed bytes per distilled row", "vacuums", "RSS MB",
                "turn without upgrade p50 / mean (µs)", "run_tool p50 / mean (ms)",
            ),
            _row(*["---"] * 17),
        ]  # fmt: skip
        for r in servers:
            for p in r["checkpoints"]:
                vacuum = p.get("autovacuum")
                lines.append(
                    _row(
                        r["store"], r["erasure"], f"{r['users']:,}", f"{p['turns']:,}",
                        _simulated(r, p),
                        f"{p['distilled']:,}", f"{p['provenance_rows_per_distilled']:.1f}",
                        f"{p['provenance_bytes_per_distilled']:,.0f}",
                        f"{p['cache_provenance_bytes_per_distilled']:.0f}",
                        f"{p['members_per_chain_p50']:.0f} / {p['members_per_chain_max']}",
                        f"{p['database_bytes_per_row']:,.0f}",
                        f"{p['database_bytes_per_distilled']:,.0f}",
                        f"{_feed_per_distilled(p):,.0f}",
                        f"{vacuum['vacuums']:,}" if vacuum else "–",
                        f"{p['rss_mb']:.0f}",
                        _pm(p["turn_us"]), _pm(p["run_tool_us"], 1e-3, 1),
                    )
                )  # fmt: skip
        lines += [
            "",
            "**W6 storage by table** (at the last checkpoint, bytes per distilled row; "
            "SQLite: pages of the table and of its indexes, `dbstat`, and the file's free "
            "pages; PostgreSQL: `pg_relation_size` (heap), `pg_indexes_size`, the rest of "
            "`pg_total_relation_size` (TOAST, free space and visibility maps), and live / "
            "dead tuples from `pg_stat_user_tables`)",
            "",
            _row("store", "erasure", "members", "table", "total", "heap", "indexes", "other",
                 "live / dead tuples"),
            _row(*["---"] * 9),
        ]  # fmt: skip
        for r in servers:
            lines += _table_rows(r)
        lines += [
            "",
            "**W6 purges** (at the last checkpoint; cleared: the shared entries of the busy "
            "server whose notes a purge clears, from `preview_purge` before any of the four "
            "purges ran, beside the server's distilled entries; the member of every server "
            "is purged everywhere, its other servers in brackets; then the four purges in "
            "turn with `purge()`, which returns after `flush()`; stall: the longest "
            "`run_tool` in a server of its own that overlapped the purge, beside its p50 / "
            "p99 without purges)",
            "",
            _row(
                "store", "erasure", "members", "purge of", "messages", "cleared / server's",
                "share", "purge + flush (ms)", "longest upgrade elsewhere (ms)",
                "baseline p50 / p99 (ms)",
            ),
            _row(*["---"] * 10),
        ]  # fmt: skip
        for r in servers:
            pr = r["purges"]
            base = pr["baseline_upgrade_ms"]
            for name, t in pr["targets"].items():
                busy = t["preview"]["by_server"].get(str(BUSY), [0, 0])
                others = [
                    f"{v[0]}/{v[1]}" for k, v in t["preview"]["by_server"].items()
                    if k not in (str(BUSY), "None")
                ]  # fmt: skip
                extra = f" ({', '.join(others)})" if others else ""
                lines.append(
                    _row(
                        r["store"], r["erasure"], f"{r['users']:,}", name, t["messages"],
                        f"{busy[0]:,} / {busy[1]:,}{extra}",
                        f"{t['preview']['busy_share']:.0%}", f"{t['purge_flush_ms']:,.0f}",
                        f"{t['stall_max_ms']:,.1f}" if t["upgrades_during"] else "none overlapped",
                        f"{base['p50']:.1f} / {base['p99']:.1f}",
                    )
                )  # fmt: skip
        lines += [
            "",
            "**W6 blast radius** (share of the busy server's distilled entries that a purge "
            "of one member there would clear, `preview_purge` of a sample of its active "
            "members spread over their ranks, at the last checkpoint)",
            "",
            _row("store", "erasure", "members", "active members", "sampled", "median",
                 "10th percentile", "90th percentile", "max"),
            _row(*["---"] * 9),
        ]  # fmt: skip
        for r in servers:
            b = r["purges"]["blast"]
            lines.append(
                _row(
                    r["store"], r["erasure"], f"{r['users']:,}", b["active"], b["sampled"],
                    f"{b['share_p50']:.0%}", f"{b['share_p10']:.0%}", f"{b['share_p90']:.0%}",
                    f"{b['share_max']:.0%}",
                )
            )  # fmt: skip
        lines.append("")
    if sweeps:
        lines += [
            "**W6 cost against membership** (one server, 20 channels; "
            "each member says one thing and upgrades once, then 3,000 turns without an "
            "upgrade, 300 sequential upgrades, then two storms of N concurrent callers × "
            "1,000/N upgrades: whole turns, and `run_tool` alone as W2 calls it (µs per "
            "upgrade: the storm's wall time over the upgrades applied); p50 / mean; refused: "
            "upgrades refused before the storms, in the storm of turns, in that of run_tool)",
            "",
            _row("store", "cache_max_keys", "members", "first turns, with their upgrade (ms)",
                 "turn without upgrade (µs)", "its store round trips",
                 "channel's entry not held: plain turns / a fifth upgrading",
                 "sequential run_tool (ms)",
                 "storm of turns: µs per upgrade", "storm of run_tool alone (as W2): µs per "
                 "upgrade", "refused",
                 "provenance bytes per entry",
                 "DB bytes per distilled row", "RSS MB"),
            _row(*["---"] * 14),
        ]  # fmt: skip
        sweeps = [r for r in sweeps if "tool_storm_us_per_upgrade" in r]
        for r in sweeps:
            lines.append(
                _row(
                    r["store"], f"{r.get('cache_max_keys', 100):,}",
                    f"{r['members']:,}" + (f" ({r['storm_callers']} callers)"
                                           if r.get("storm_callers", 40) != 40 else ""),
                    _pm(r["fill_turn_us"], 1e-3, 1),
                    _pm(r["turn_us"], 1, 1),
                    f"{r['turn_round_trips']:.3f}" if "turn_round_trips" in r else "–",
                    f"{r['channel_missing']:.1%} / {r['channel_missing_with_upgrades']:.1%}"
                    if "channel_missing" in r else "–",
                    _pm(r["upgrade_us"], 1e-3, 2), f"{r['storm_us_per_upgrade']:,.0f}",
                    f"{r['tool_storm_us_per_upgrade']:,.0f}",
                    f"{r['refused_before_storm']} + {r['storm_refused']} + "
                    f"{r['tool_storm_refused']}",
                    f"{r['provenance_bytes_per_distilled']:,.0f}",
                    f"{r['database_bytes_per_distilled']:,.0f}", f"{r['rss_mb']:.0f}",
                )
            )  # fmt: skip
        lines.append("")
    return lines


def _simulated(r: dict[str, Any], p: dict[str, Any]) -> str:
    if "simulated_hours" not in p or not r.get("turn_seconds"):
        return "– (wall clock)"
    return f"{p['simulated_hours']:,.1f}, {r.get('turn_seconds', 0):g}"


def _table_rows(r: dict[str, Any]) -> list[str]:
    """One line per table at the last checkpoint (results without the split: totals)."""
    p = r["checkpoints"][-1]
    distilled = p["distilled"] or 1
    split = p.get("table_split", {})
    out = []
    for table, total in sorted(p["table_bytes"].items(), key=lambda kv: -kv[1]):
        part = split.get(table)
        cells = ["–", "–", "–", "–"]
        if part is not None:
            cells = [
                f"{part['heap'] / distilled:,.0f}",
                f"{part['indexes'] / distilled:,.0f}",
                f"{part['other'] / distilled:,.0f}",
                f"{part['live_tuples']:,} / {part['dead_tuples']:,}"
                if "live_tuples" in part
                else "–",
            ]
        out.append(
            _row(r["store"], r["erasure"], f"{r['users']:,}", table,
                 f"{total / distilled:,.0f}", *cells)
        )  # fmt: skip
    if "free_bytes" in p:
        out.append(
            _row(r["store"], r["erasure"], f"{r['users']:,}", "(free pages)",
                 f"{p['free_bytes'] / distilled:,.0f}", "–", "–", "–", "–")
        )  # fmt: skip
    return out


# -- benchmarks.run ---------------------------------------------------------------------
SYSTEMS: dict[str, Any] = {
    f"{store}-{erasure}-{users}": (store, erasure, users)
    for store in ("sqlite", "postgresql")
    for erasure in ("direct", "complete")
    for users in (400, 4000)
} | {
    f"members-{store}-{n}": (store, "members", n)
    for store in ("sqlite", "postgresql")
    for n in (500, 1500, 5000)
}


def run(system: str, quick: bool) -> dict[str, Any]:
    store, erasure, users = SYSTEMS[system]
    try:
        if erasure == "members":
            return asyncio.run(run_members(store, users // 10 if quick else users))
        checkpoints = (500, 2_000) if quick else CHECKPOINTS
        return asyncio.run(run_server(store, erasure, users, checkpoints, 10 if quick else 40))
    except Skipped as exc:
        return skipped(str(exc))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--erasure", choices=("direct", "complete"), default="direct")
    parser.add_argument("--users", type=int, default=400)
    parser.add_argument("--turns", type=int, nargs="+", default=list(CHECKPOINTS))
    parser.add_argument("--sample", type=int, default=40, help="members previewed for the blast")
    parser.add_argument("--members", type=int, nargs="*", help="run the membership sweep instead")
    parser.add_argument("--storm-callers", type=int, default=40)
    parser.add_argument("--cache-max-keys", type=int, default=100)
    parser.add_argument(
        "--turn-seconds",
        type=float,
        default=TURN_SECONDS,
        help=(
            "simulated seconds between turns: the memory's clock, the janitor's hours and "
            "autovacuum's naptimes run on it (0: no simulated time; the memory keeps the "
            "wall clock and nothing runs between turns, as in W6 before)"
        ),
    )
    parser.add_argument(
        "--no-autovacuum",
        action="store_true",
        help="PostgreSQL: do not emulate autovacuum in simulated time",
    )
    parser.add_argument(
        "--compact",
        action="store_true",
        help=(
            "PostgreSQL: also measure each checkpoint after a VACUUM FULL "
            "(what follows then runs on compacted tables)"
        ),
    )
    parser.add_argument(
        "--note-history",
        type=int,
        default=3,
        help="STM_NOTE_HISTORY: earlier versions of notes kept (0: history off)",
    )
    parser.add_argument("--out", type=Path, help="append the JSON result to this file")
    parser.add_argument("--report", type=Path, help="print the tables of a file of results")
    args = parser.parse_args(argv)
    if args.report:
        lines = args.report.read_text().splitlines()
        print("\n".join(tables([json.loads(line) for line in lines if line.strip()])))
        return
    if args.members:
        results = [
            asyncio.run(
                run_members(
                    args.store,
                    n,
                    storm_callers=args.storm_callers,
                    cache_max_keys=args.cache_max_keys,
                    turn_seconds=args.turn_seconds,
                    autovacuum=not args.no_autovacuum,
                )
            )
            for n in args.members
        ]
    else:
        results = [
            asyncio.run(
                run_server(
                    args.store,
                    args.erasure,
                    args.users,
                    tuple(args.turns),
                    args.sample,
                    compact=args.compact,
                    turn_seconds=args.turn_seconds,
                    autovacuum=not args.no_autovacuum,
                    note_history=args.note_history,
                )
            )
        ]
    for result in results:
        line = json.dumps(result)
        print(line)
        if args.out:
            with args.out.open("a") as f:
                f.write(line + "\n")


if __name__ == "__main__":
    main()
