"""Expiry: TTLs by content, never rendered once expired, janitor deletes rows."""

from __future__ import annotations

import contextlib
import json
import sqlite3

from helpers import Opener
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import ShortTermMemory, STMConfig
from stm.cache import Entry, MemoryCache
from stm.expiry import EXPIRED_SQL, row_expired
from stm.store.dialect import SQLITE
from stm.store.schema import SLOT_SECONDS
from stm.store.sqlite import migrate
from stm.testing import Clock, ManualScheduler, ctx, turn


def row_count(db_path: object) -> int:
    with sqlite3.connect(str(db_path)) as db:
        return int(db.execute("SELECT count(*) FROM short_term_memories").fetchone()[0])


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
    memory: ShortTermMemory, clock: Clock, db_path: object
) -> None:
    """A janitor pass drops expired entries from the cache and their rows from the file."""
    await memory.capture(turn(ctx(), "crude"))
    await memory.capture(turn(ctx(channel=11), "crude too"))
    assert (await memory.run_tool(ctx(channel=11), {"summary": "kept"})).success
    await memory.flush()
    assert row_count(db_path) == 4
    clock.advance(hours=13)
    dropped = await memory.run_janitor()
    await memory.flush()
    assert dropped == 2
    assert row_count(db_path) == 2
    assert len(memory.cache) == 2


async def test_expired_rows_are_not_hydrated_after_restart(
    open_memory: Opener, clock: Clock, db_path: object
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
    with sqlite3.connect(str(db_path)) as db:
        assert db.execute(
            "SELECT count(*) FROM short_term_memories WHERE summary IS NOT NULL"
        ).fetchone() == (0,)


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


@given(
    ages=_ages(),
    summary=st.sampled_from([None, "", "a summary"]),
    categories=st.sampled_from([{}, {"plans": "a trip"}]),
)
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
        db.execute(
            "INSERT INTO short_term_memories (key, scope, channel_id, updated_at, summary, "
            "categories) VALUES ('shortterm:server:1:2', 'server', 2, ?, ?, ?)",
            (updated_at, summary, json.dumps(categories)),
        )
        params = {"crude": thresholds.crude_before, "summary": thresholds.summary_before}
        in_sql, in_store = db.execute(
            f"SELECT {EXPIRED_SQL}, {SQLITE.expired()} FROM short_term_memories", params
        ).fetchone()
    # The store's spelling adds the bound on the row's time slot, which the rule implies.
    assert in_cache == in_reads == bool(in_sql) == bool(in_store)


_TIMES = st.one_of(
    st.floats(min_value=-1e10, max_value=1e10, allow_nan=False),
    st.integers(min_value=-(10**6), max_value=10**6).map(lambda n: n * SLOT_SECONDS / 2),
)


@given(times=st.lists(_TIMES, min_size=1, max_size=12), threshold=_TIMES)
@settings(max_examples=200, deadline=None)
def test_a_rows_time_slot_orders_and_bounds_as_its_time_does(
    times: list[float], threshold: float
) -> None:
    """The slot the schema computes of ``updated_at`` never decreases as the time grows,
    on either side of zero and at slot boundaries: so the slot bound finds every row at
    or before a threshold, and ordering by slot, then time, is ordering by time."""
    with contextlib.closing(sqlite3.connect(":memory:", isolation_level=None)) as db:
        migrate(db)
        db.executemany(
            "INSERT INTO short_term_memories (key, scope, channel_id, updated_at) "
            "VALUES (?, 'server', 2, ?)",
            [(f"k{n}", t) for n, t in enumerate(times)],
        )
        bound = SQLITE.slot.format(":t")
        found = {
            row[0]
            for row in db.execute(
                f"SELECT updated_at FROM short_term_memories WHERE updated_slot <= {bound}",
                {"t": threshold},
            )
        }
        ordered = [
            row[0]
            for row in db.execute(
                "SELECT updated_at FROM short_term_memories "
                "ORDER BY updated_slot DESC, updated_at DESC"
            )
        ]
    assert {t for t in times if t <= threshold} <= found
    assert ordered == sorted(times, reverse=True)
