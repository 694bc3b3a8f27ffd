"""Storage on PostgreSQL: a row's write-behind, which moves its ``updated_at`` every turn,
updates the row in place (a heap-only update) instead of adding an entry to each of its
indexes, which only vacuum would reclaim."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stm import ShortTermMemory, STMConfig
from stm.store._base import DeleteExpired, LoadRecent
from stm.store._chains import positional
from stm.store._dialect import POSTGRES
from stm.store._ops import _expire_chunk, _recent
from stm.store._schema import SLOT_SECONDS
from stm.testing import Clock, ctx, turn


async def _updates(url: str, least: int) -> tuple[int, int]:
    """The updates of ``short_term_memories`` so far and how many were heap-only, once the
    statistics count at least ``least`` updates (closed connections report theirs as they
    exit; up to 15 s)."""
    import asyncpg

    conn: Any = await asyncpg.connect(url)
    try:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 15
        while True:
            await conn.execute("SELECT pg_stat_clear_snapshot()")
            updates, hot = await conn.fetchrow(
                "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                "WHERE relid = 'short_term_memories'::regclass"
            )
            if updates >= least or loop.time() > deadline:
                return int(updates), int(hot)
            await asyncio.sleep(0.1)
    finally:
        await conn.close()


async def test_a_rows_write_behind_updates_it_in_place(postgres_url: str) -> None:
    """Eight turns in one channel, each written behind within one time slot: every
    update of the channel's rows is heap-only. With ``updated_at`` (or any column a
    write-behind changes) in an index, none would be. (Few enough row versions to fit the
    rows' page without pruning it, which a transaction of another test may hold back.)"""
    # The middle of a slot: the turns' seconds stay inside it.
    clock = Clock(start=SLOT_SECONDS * 2_000_000 + SLOT_SECONDS / 2)
    config = STMConfig(database=postgres_url, write_behind_seconds=0.05)
    alice = ctx(user=1, channel=10)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        await memory.capture(turn(alice, "hello"))
        assert (await memory.run_tool(alice.model_copy(), {"summary": "greeted"})).success
        await memory.flush()
    before, before_hot = await _updates(postgres_url, 0)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        for n in range(8):
            clock.advance(1)
            await memory.capture(turn(alice, f"message {n}"))
            await memory.flush()
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is not None and entry.summary == "greeted"
    updates, hot = await _updates(postgres_url, before + 8)
    assert updates - before >= 8, "the turns were not written behind one by one"
    assert hot - before_hot == updates - before


_NOW = SLOT_SECONDS * 2_000_000.0
_EXPIRY = {"crude": _NOW - 12 * 3600, "summary": _NOW - 24 * 3600}
_PASS = _expire_chunk(DeleteExpired(*_EXPIRY.values(), after=5), [], POSTGRES)  # type: ignore[arg-type]
_EDGE = next(_PASS)
_CHUNK = _PASS.send((2500,))
_BY_TIME = {
    "janitor: where a chunk ends": (_EDGE.sql, _EDGE.params, "short_term_memories_pkey"),
    "janitor: a chunk's rows": (_CHUNK.sql, _CHUNK.params, "short_term_memories_pkey"),
    "warm a server's recall group": (
        "SELECT key FROM short_term_memories "
        + _recent(LoadRecent("server", 1, None, None, 4, *_EXPIRY.values()), POSTGRES).where,
        {"owner": 1, "limit": 4, **_EXPIRY},
        "Index",  # the group's, or the server's rows by the user index (user_id NULL)
    ),
}


@pytest.mark.parametrize("name", list(_BY_TIME))
async def test_what_the_janitor_and_recall_read_searches_an_index(
    postgres_url: str, name: str
) -> None:
    """A janitor chunk reads a range of the primary key, and a recall group's newest rows
    are found by an index: with scans ruled out, the plan still finds an index to use."""
    import asyncpg

    sql, params, index = _BY_TIME[name]
    async with ShortTermMemory.open(STMConfig(database=postgres_url)):
        pass  # the schema
    conn: Any = await asyncpg.connect(postgres_url)
    try:
        # Rows over many slots and servers, with statistics, so the planner chooses as it
        # would on a real table.
        await conn.execute(
            "INSERT INTO short_term_memories (key, scope, server_id, channel_id, updated_at) "
            "SELECT 'shortterm:server:' || (n % 50) || ':' || n, 'server', n % 50, n, "
            f"{_NOW} - n * 60 FROM generate_series(1, 5000) n"
        )
        await conn.execute("ANALYZE short_term_memories")
        await conn.execute("SET enable_seqscan = off")
        numbered, names = positional(sql)
        plan = "\n".join(
            row[0] for row in await conn.fetch(f"EXPLAIN {numbered}", *(params[n] for n in names))
        )
    finally:
        await conn.close()
    assert index in plan, plan
    assert "Seq Scan" not in plan, plan
    # A janitor chunk reads in the key's order from where the last stopped: no sort of
    # every row it looks at.
    assert "Sort" not in plan or not name.startswith("janitor"), plan
