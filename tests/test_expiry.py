"""Expiry: TTLs by content, never rendered once expired, janitor deletes rows."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import Awaitable, Callable, Generator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from helpers import Opener
from hypothesis import given, settings
from hypothesis import strategies as st

import stm._memory as memory_module
from stm import ShortTermMemory, STMConfig
from stm._cache import Entry, MemoryCache
from stm._expiry import EXPIRED_SQL, Expiry, Thresholds, row_expired
from stm.store import _chains as chains
from stm.store import open_store
from stm.store._base import DeleteExpired, Expired, SaveDistilled
from stm.store._dialect import POSTGRES, SQLITE
from stm.store._schema import SLOT_SECONDS
from stm.store._sqlite import migrate, run_batch
from stm.testing import Clock, ManualScheduler, ctx, turn

# Each test on a memory runs on both stores.
BOTH_STORES = True


async def row_count(memory: ShortTermMemory) -> int:
    rows = await memory.store.execute(  # type: ignore[attr-defined]
        "SELECT count(*) FROM short_term_memories"
    )
    return int(rows[0][0])


async def test_crude_only_entries_expire_after_crude_ttl(
    memory: ShortTermMemory, clock: Clock
) -> None:
    """No distilled content: gone after crude_ttl_hours of inactivity."""
    await memory.capture(turn(ctx(), "hello"))
    clock.advance(hours=11.9)
    assert await memory.get_entry("shortterm:server:100:10") is not None
    clock.advance(hours=0.2)
    assert await memory.get_entry("shortterm:server:100:10") is None
    assert str(await memory.build_context(ctx(channel=11))) == ""


async def test_distilled_entries_live_for_summary_ttl(
    memory: ShortTermMemory, clock: Clock
) -> None:
    """With a summary: kept past the crude TTL, gone after summary_ttl_hours."""
    await memory.capture(turn(ctx(), "hello"))
    assert (await memory.run_tool(ctx(), {"summary": "LONG-LIVED"})).success
    clock.advance(hours=20)
    assert "LONG-LIVED" in str(await memory.build_context(ctx(channel=11)))
    clock.advance(hours=4.1)
    assert "LONG-LIVED" not in str(await memory.build_context(ctx(channel=11)))
    assert await memory.get_entry("shortterm:server:100:10") is None


async def test_activity_extends_life(memory: ShortTermMemory, clock: Clock) -> None:
    """Expiry counts from the last capture or upgrade."""
    await memory.capture(turn(ctx(), "a"))
    clock.advance(hours=10)
    await memory.capture(turn(ctx(), "b"))
    clock.advance(hours=10)
    assert await memory.get_entry("shortterm:server:100:10") is not None


async def test_janitor_deletes_expired_rows_and_cache(
    memory: ShortTermMemory, clock: Clock
) -> None:
    """A janitor pass drops expired entries from the cache and their rows from the file."""
    await memory.capture(turn(ctx(), "crude"))
    await memory.capture(turn(ctx(channel=11), "crude too"))
    assert (await memory.run_tool(ctx(channel=11), {"summary": "kept"})).success
    await memory.flush()
    assert await row_count(memory) == 4
    clock.advance(hours=13)
    dropped = await memory.run_janitor()
    await memory.flush()
    assert dropped == 2
    assert await row_count(memory) == 2
    assert len(memory.cache) == 2


async def test_a_feed_that_cannot_be_pruned_does_not_stop_the_pass(
    memory: ShortTermMemory, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    """Pruning the change feed is housekeeping: when it fails (its lock held past the
    store's lock timeout, an outage), the pass still drops and deletes what expired and
    says so in a warning; the next pass prunes."""
    await memory.capture(turn(ctx(), "crude"))
    await memory.flush()
    clock.advance(hours=13)

    async def locked(**_: object) -> int:
        raise RuntimeError("canceling statement due to lock timeout")

    pruned = memory.store.prune_changes
    memory.store.prune_changes = locked  # type: ignore[method-assign]
    try:
        assert await memory.run_janitor() == 2
    finally:
        memory.store.prune_changes = pruned  # type: ignore[method-assign]
    await memory.flush()
    assert await row_count(memory) == 0
    assert "could not be pruned" in caplog.text and "lock timeout" in caplog.text


async def test_expired_rows_are_not_hydrated_after_restart(
    open_memory: Opener, clock: Clock
) -> None:
    """A row past its TTL is dead at hydration even before the janitor ran."""
    first = await open_memory()
    await memory_upgrade(first, "STALE")
    await first.close()
    clock.advance(hours=25)
    second = await open_memory()
    assert "STALE" not in str(await second.build_context(ctx()))
    assert await second.get_entry("shortterm:server:100:10") is None
    await second.capture(turn(ctx(), "fresh start"))
    await second.flush()
    entry = await second.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary is None
    distilled = await second.store.execute(  # type: ignore[attr-defined]
        "SELECT count(*) FROM short_term_memories WHERE summary IS NOT NULL"
    )
    assert distilled == [(0,)]


async def test_janitor_runs_on_its_interval(config: STMConfig, clock: Clock) -> None:
    """The background janitor runs every janitor_interval_minutes, not before."""
    scheduler = ManualScheduler()
    hourly = config.model_copy(update={"janitor_interval_minutes": 60})
    async with ShortTermMemory.open(hourly, clock=clock, scheduler=scheduler) as memory:
        await memory.capture(turn(ctx(), "x"))
        clock.advance(hours=13)
        await scheduler.idle("stm-janitor")
        scheduler.advance(59 * 60)
        await scheduler.idle("stm-janitor")
        assert len(memory.cache) == 2  # not yet (both keys held): an hour has not passed
        scheduler.advance(60)
        await scheduler.idle("stm-janitor")  # asleep again: its pass is done
        assert len(memory.cache) == 0


async def memory_upgrade(memory: ShortTermMemory, text: str) -> None:
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": text})).success


_HOURS = st.floats(min_value=0.001, max_value=100.0, allow_nan=False)


@st.composite
def _ages(draw: st.DrawFn) -> tuple[float, float, float, float]:
    """TTLs in hours, a time ``now``, and how long ago an entry was active: often exactly
    one of its TTLs ago, often between the two."""
    crude, summary = draw(_HOURS), draw(_HOURS)
    inactive = draw(
        st.one_of(
            st.sampled_from([crude, summary]),
            st.floats(min_value=min(crude, summary), max_value=max(crude, summary)),
            st.floats(min_value=0.0, max_value=200.0),
        )
    )
    now = draw(st.floats(min_value=1_000_000.0, max_value=2_000_000_000.0))
    return crude, summary, now, now - inactive * 3600


# A row's case for the expiry rule: TTLs, now and its time; its summary; its categories.
RULE_CASES = dict(
    ages=_ages(),
    summary=st.sampled_from([None, "", "a summary"]),
    categories=st.sampled_from([{}, {"plans": "a trip"}]),
)
# The row, its time, summary and categories as parameters (each store spells them).
RULE_ROW = (
    "INSERT INTO short_term_memories (key, scope, channel_id, updated_at, summary, "
    "categories) VALUES ('shortterm:server:1:2', 'server', 2, {})"
)


@given(**RULE_CASES)
@settings(max_examples=300, deadline=None)
def test_the_sql_condition_and_the_cache_apply_one_expiry_rule(
    ages: tuple[float, float, float, float],
    summary: str | None,
    categories: dict[str, str],
) -> None:
    """The store's SQL, the row check of reads and the cache's check agree on every row,
    whichever TTL is longer and whatever empty summary a row holds."""
    crude_hours, summary_hours, now, updated_at = ages
    cache = MemoryCache(
        max_keys=1, crude_ttl_hours=crude_hours, summary_ttl_hours=summary_hours, clock=lambda: now
    )
    entry = Entry(
        key="shortterm:server:1:2",
        scope="server",
        server_id=1,
        user_id=None,
        channel_id=2,
        persona_id=None,
        messages=[],
        updated_at=updated_at,
        summary=summary,
        categories=dict(categories),
    )
    thresholds = cache.expiry.thresholds(now)
    in_cache = cache.is_expired(entry, now)
    in_reads = row_expired(updated_at, bool(summary) or bool(categories), thresholds)
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        migrate(db)
        db.execute(RULE_ROW.format("?, ?, ?"), (updated_at, summary, json.dumps(categories)))
        params = {"crude": thresholds.crude_before, "summary": thresholds.summary_before}
        in_sql, in_store = db.execute(
            f"SELECT {EXPIRED_SQL}, {SQLITE.expired()} FROM short_term_memories", params
        ).fetchone()
    assert in_cache == in_reads == bool(in_sql) == bool(in_store)


_TIMES = st.one_of(
    st.floats(min_value=-1e10, max_value=1e10, allow_nan=False),
    st.integers(min_value=-(10**6), max_value=10**6).map(lambda n: n * SLOT_SECONDS / 2),
)


@given(times=st.lists(_TIMES, min_size=1, max_size=12))
@settings(max_examples=200, deadline=None)
def test_a_rows_time_slot_orders_as_its_time_does(times: list[float]) -> None:
    """The slot the schema computes of ``updated_at`` never decreases as the time grows,
    on either side of zero and at slot boundaries: ordering by slot, then time, as the
    read of a recall group's newest rows does, is ordering by time."""
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        migrate(db)
        db.executemany(
            "INSERT INTO short_term_memories (key, scope, channel_id, updated_at) "
            "VALUES (?, 'server', 2, ?)",
            [(f"k{n}", t) for n, t in enumerate(times)],
        )
        ordered = [
            row[0]
            for row in db.execute(
                "SELECT updated_at FROM short_term_memories "
                "ORDER BY updated_slot DESC, updated_at DESC"
            )
        ]
    assert ordered == sorted(times, reverse=True)


async def test_a_janitor_pass_over_many_rows_deletes_them_in_bounded_transactions(
    open_memory: Opener, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pass over more expired rows than one chunk deletes them a chunk per transaction,
    each queued behind what was queued meanwhile (an upgrade submitted during the pass
    commits before the pass ends), and ``flush`` waits for the last chunk."""
    monkeypatch.setattr(memory_module, "EXPIRE_CHUNK", 3)
    memory = await open_memory()
    for channel in range(10):
        await memory.capture(turn(ctx(user=1, channel=channel), "hello"))
    await memory.flush()
    batches: list[tuple[list[object], list[object]]] = []
    run = memory.store.run

    async def recorded(ops: list[object]) -> list[object]:
        results = await run(ops)  # type: ignore[arg-type]
        batches.append((list(ops), list(results)))
        return results

    monkeypatch.setattr(memory.store, "run", recorded)
    clock.advance(hours=13)  # past the crude TTL: every row has expired
    await memory.run_janitor()
    fresh = ctx(user=2, channel=99)
    await memory.capture(turn(fresh, "meanwhile"))
    assert (await memory.run_tool(fresh, {"summary": "WRITTEN-MEANWHILE"})).success
    await memory.flush()
    chunks = [
        (n, result)
        for n, (ops, results) in enumerate(batches)
        for op, result in zip(ops, results, strict=True)
        if isinstance(op, DeleteExpired)
    ]
    deleted = [result.deleted for _, result in chunks]
    assert sum(deleted) == 20  # each channel's server entry and the user's entry there
    assert all(0 <= n <= 3 for n in deleted) and deleted[-1] < 3
    upgrade = next(
        n for n, (ops, _) in enumerate(batches) if any(isinstance(o, SaveDistilled) for o in ops)
    )
    assert chunks[0][0] < upgrade < chunks[-1][0], "the pass held the upgrade up to its end"
    entry = await memory.get_entry("shortterm:server:100:99")
    assert entry is not None and entry.summary == "WRITTEN-MEANWHILE"


# A janitor pass's cases: rows at times a quarter slot apart (some distilled), the crude
# threshold and how much older the summary one is, the chunk's limit and span, and the rows
# deleted before (gaps in the ids).
_TIME = st.integers(min_value=0, max_value=40).map(lambda n: 1_000_000 + n * SLOT_SECONDS / 4)
CHUNK_CASES = dict(
    rows=st.lists(st.tuples(_TIME, st.booleans()), max_size=30),
    crude=_TIME,
    older=st.integers(min_value=0, max_value=20).map(lambda n: n * SLOT_SECONDS / 4),
    limit=st.integers(min_value=1, max_value=7),
    span=st.integers(min_value=1, max_value=7),
    gone=st.sets(st.integers(min_value=0, max_value=29)),
)


def _chunks(op: DeleteExpired, rows: int) -> Generator[DeleteExpired, object, int]:
    """A janitor pass over ``rows`` rows, chunk after chunk from where the last stopped, as
    the writer queues them: yields each chunk's operation and is sent its result; returns
    how many rows went. Fails when a chunk deletes more than its limit, does not move on,
    or the pass does not end."""
    deleted = 0
    for _ in range(2 * rows + 2):  # each chunk moves on by a row at least
        done = yield op
        assert isinstance(done, Expired) and done.deleted <= op.limit
        deleted += done.deleted
        if done.after is None:
            return deleted
        assert done.after > op.after
        op = replace(op, after=done.after)
    raise AssertionError("the pass did not end")


@given(**CHUNK_CASES)
@settings(max_examples=80, deadline=None)
def test_a_pass_in_chunks_deletes_exactly_what_has_expired(
    rows: list[tuple[float, bool]],
    crude: float,
    older: float,
    limit: int,
    span: int,
    gone: set[int],
) -> None:
    """Chunk after chunk from where the last stopped, as the writer queues them, a janitor
    pass deletes exactly the rows the expiry rule says have expired (distilled ones passed
    over until their longer TTL), whatever the chunk's size and span, with gaps in the ids
    where rows were deleted before, and ends."""
    thresholds = Thresholds(crude, crude - older)
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        migrate(db)
        db.executemany(
            "INSERT INTO short_term_memories (key, scope, channel_id, updated_at, summary) "
            "VALUES (?, 'server', 2, ?, ?)",
            [(f"k{n}", at, "notes" if notes else None) for n, (at, notes) in enumerate(rows)],
        )
        db.executemany("DELETE FROM short_term_memories WHERE key = ?", [(f"k{n}",) for n in gone])
        kept = {n for n in range(len(rows)) if n not in gone}
        expected = {f"k{n}" for n in kept if row_expired(*rows[n], thresholds)}
        steps = _chunks(DeleteExpired(*thresholds, limit, span=span), len(rows))
        try:
            chunk = next(steps)
            while True:
                chunk = steps.send(run_batch(db, [chunk])[0])
        except StopIteration as end:
            deleted = end.value
        left = {key for (key,) in db.execute("SELECT key FROM short_term_memories")}
    assert deleted == len(expected)
    assert left == {f"k{n}" for n in kept} - expected


# -- the same rules in PostgreSQL's SQL -----------------------------------------------
# Each store spells the rule, the time slot and the janitor's chunks in its own SQL; these
# run the properties above against a migrated PostgreSQL schema (one per test, emptied
# between examples).
Check = Callable[[Any], Awaitable[None]]


@contextlib.contextmanager
def _postgres_examples(postgres_url: str) -> Iterator[Callable[[Check], None]]:
    """``run(check)`` runs ``check(store)`` on one open PostgreSQL store, emptied first."""
    with asyncio.Runner() as runner:
        store = runner.run(open_store(STMConfig(database=postgres_url)))

        def run(check: Check) -> None:
            async def go() -> None:
                await store.execute("DELETE FROM short_term_memories")
                await check(store)

            runner.run(go())

        try:
            yield run
        finally:
            runner.run(store.close())


def _positional(sql: str, params: dict[str, Any]) -> tuple[str, list[Any]]:
    text, names = chains.positional(sql)
    return text, [params[name] for name in names]


def test_the_expiry_rule_is_one_rule_on_postgres(postgres_url: str) -> None:
    """PostgreSQL's spelling of the rule (its casts included) agrees with the cache and the
    row check of reads on every row, as SQLite's does above."""

    with _postgres_examples(postgres_url) as run:

        @given(**RULE_CASES)
        @settings(max_examples=150, deadline=None)
        def agree(
            ages: tuple[float, float, float, float],
            summary: str | None,
            categories: dict[str, str],
        ) -> None:
            crude_hours, summary_hours, now, updated_at = ages
            thresholds = Expiry.hours(crude_hours, summary_hours).thresholds(now)
            in_reads = row_expired(updated_at, bool(summary) or bool(categories), thresholds)
            found: list[bool] = []

            async def check(store: Any) -> None:
                await store.execute(
                    RULE_ROW.format("$1, $2, $3"), (updated_at, summary, json.dumps(categories))
                )
                params = {"crude": thresholds.crude_before, "summary": thresholds.summary_before}
                sql, values = _positional(
                    f"SELECT {POSTGRES.expired()} FROM short_term_memories", params
                )
                ((in_store,),) = await store.execute(sql, values)
                found.append(bool(in_store))

            run(check)
            assert found == [in_reads]

        agree()


def test_a_rows_time_slot_orders_as_its_time_does_on_postgres(postgres_url: str) -> None:
    """PostgreSQL's generated slot never decreases as the time grows, as SQLite's does."""

    with _postgres_examples(postgres_url) as run:
        # PostgreSQL raises an underflow error for float8 arithmetic whose result is too
        # small to hold (a time within about 1e-300 s of zero, which no clock gives).
        times_of_clocks = _TIMES.filter(lambda t: t == 0 or abs(t) >= 1e-300)

        @given(times=st.lists(times_of_clocks, min_size=1, max_size=12))
        @settings(max_examples=100, deadline=None)
        def ordered(times: list[float]) -> None:
            found: list[float] = []

            async def check(store: Any) -> None:
                for n, at in enumerate(times):
                    await store.execute(
                        "INSERT INTO short_term_memories (key, scope, channel_id, updated_at) "
                        "VALUES ($1, 'server', 2, $2)",
                        (f"k{n}", at),
                    )
                rows = await store.execute(
                    "SELECT updated_at FROM short_term_memories "
                    "ORDER BY updated_slot DESC, updated_at DESC"
                )
                found.extend(row[0] for row in rows)

            run(check)
            assert found == sorted(times, reverse=True)

        ordered()


def test_a_pass_in_chunks_deletes_exactly_what_has_expired_on_postgres(postgres_url: str) -> None:
    """PostgreSQL's janitor chunks delete exactly what has expired and end, as SQLite's do."""

    with _postgres_examples(postgres_url) as run:

        @given(**CHUNK_CASES)
        @settings(max_examples=60, deadline=None)
        def exactly(
            rows: list[tuple[float, bool]],
            crude: float,
            older: float,
            limit: int,
            span: int,
            gone: set[int],
        ) -> None:
            thresholds = Thresholds(crude, crude - older)
            kept = {n for n in range(len(rows)) if n not in gone}
            expected = {f"k{n}" for n in kept if row_expired(*rows[n], thresholds)}
            outcome: dict[str, Any] = {}

            async def check(store: Any) -> None:
                for n, (at, notes) in enumerate(rows):
                    await store.execute(
                        "INSERT INTO short_term_memories (key, scope, channel_id, updated_at, "
                        "summary) VALUES ($1, 'server', 2, $2, $3)",
                        (f"k{n}", at, "notes" if notes else None),
                    )
                for n in gone:
                    await store.execute(
                        "DELETE FROM short_term_memories WHERE key = $1", (f"k{n}",)
                    )
                steps = _chunks(DeleteExpired(*thresholds, limit, span=span), len(rows))
                try:
                    chunk = next(steps)
                    while True:
                        chunk = steps.send((await store.run([chunk]))[0])
                except StopIteration as end:
                    outcome["deleted"] = end.value
                left = await store.execute("SELECT key FROM short_term_memories")
                outcome["left"] = {key for (key,) in left}

            run(check)
            assert outcome["deleted"] == len(expected)
            assert outcome["left"] == {f"k{n}" for n in kept} - expected

        exactly()
