"""Expiry: TTLs by content, never rendered once expired, janitor deletes rows."""

from __future__ import annotations

import sqlite3

from conftest import Clock, Opener, ctx, turn

from stm import ShortTermMemory


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


async def test_janitor_runs_on_its_interval(open_memory: Opener, clock: Clock) -> None:
    """The background janitor runs every janitor_interval_minutes."""
    import asyncio

    memory = await open_memory(janitor_interval_minutes=0.001)
    await memory.capture(turn(ctx(), "x"))
    clock.advance(hours=13)
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(memory.cache) == 0:
            break
    assert len(memory.cache) == 0


async def memory_upgrade(memory: ShortTermMemory, text: str) -> None:
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": text})).success
