"""The operator's view of a store, the same on both stores: counts, a user's and a
channel's rows, checks; opened read-only, never created."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import make_database, summary_of

from stm import STMConfig, StoreError
from stm._errors import NoDatabase
from stm.store import open_store
from stm.store._inspect import open_inspector

BOTH_STORES = True


async def test_counts_and_rows_agree_on_both_stores(store_database: str) -> None:
    """The same memories give the same counts and rows on SQLite and PostgreSQL."""
    await make_database(store_database)
    config = STMConfig(database=store_database)
    store = await open_inspector(config)
    try:
        now = 2e9  # far ahead: every row has expired by then
        stats = await store.stats((now - 12 * 3600, now - 24 * 3600), (now, now))
        assert stats.entries_by_scope == {"server": 3, "user": 5}
        assert (stats.distilled, stats.servers, stats.users, stats.opt_outs) == (8, 2, 3, 1)
        assert stats.expired == 8 and stats.near_expiry == 0
        assert stats.feed_position is None or stats.feed_position >= 6
        holdings = await store.holdings_of_user(42)
        assert {r.key for r in holdings.own} == {
            "shortterm:user:42:10",
            "shortterm:user:42:11",
            "shortterm:user:42:20",
        }
        assert {r.key for r in holdings.contributed} == {
            "shortterm:server:100:10",
            "shortterm:server:100:11",
            "shortterm:user:7:10",
        }
        assert holdings.opted_out_since is None
        assert (await store.holdings_of_user(9)).opted_out_since is not None
        channel = await store.rows_of_channel(10)
        assert {r.key for r in channel} == {
            "shortterm:server:100:10",
            "shortterm:user:42:10",
            "shortterm:user:7:10",
        }
        row = await store.row("shortterm:server:100:10")
        assert row is not None and row.summary == summary_of(7, 10)
        assert row.pin is not None and await store.members(row.pin) == [7, 42]
        assert await store.row("shortterm:server:100:99") is None
        assert await store.count_expired((now - 12 * 3600, now - 24 * 3600)) == 8
        report = await store.check()
        assert report.ok, report
    finally:
        await store.close()


async def test_the_view_cannot_write(store_database: str) -> None:
    """The operator's view is read-only: a write through it fails and changes nothing."""
    await make_database(store_database)
    store = await open_inspector(STMConfig(database=store_database))
    try:
        with pytest.raises(Exception, match=r"(?i)read.?only"):
            await store.execute("DELETE FROM short_term_memories")  # type: ignore[attr-defined]
        assert len(await store.rows_of_channel(10)) == 3
    finally:
        await store.close()


async def test_nothing_is_created(store_database: str) -> None:
    """Opening the view where there is no database says so and creates nothing."""
    with pytest.raises(NoDatabase):
        await open_inspector(STMConfig(database=store_database))
    with pytest.raises(StoreError):
        await open_inspector(STMConfig(database=store_database))
    if store_database.startswith("postgresql://"):
        store = await open_store(STMConfig(database=store_database))  # creates it now
        await store.close()
        found = await open_inspector(STMConfig(database=store_database))  # now it is there
        await found.close()
    else:
        assert not Path(store_database).exists()


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_the_operators_preview_of_a_purge_is_the_librarys(
    store_database: str, erasure: str
) -> None:
    """A read-only connection cannot record a plan, so the operator's preview plans edge
    by edge: it must count what the library's preview counts, under each policy, in a
    server and everywhere, for a user whose words were copied across channels."""
    from test_erasure import ALICE, BOB, CAROL
    from test_erasure import _server as notes_copied_across_channels

    from stm import ShortTermMemory

    config = STMConfig(database=store_database, render_mode="supersede", erasure=erasure)
    async with ShortTermMemory.open(config) as memory:
        await notes_copied_across_channels(memory)
        await memory.flush()
        expected = {
            (user, server): await memory.preview_purge(user, server)
            for user in (ALICE, BOB, CAROL)
            for server in (None, 100, 200)
        }
    store = await open_inspector(config)
    try:
        for (user, server), library in expected.items():
            found = await store.preview_purge(user, server, erasure)  # type: ignore[arg-type]
            assert (found.own, found.shared, found.shared_by_server, found.distilled_by_server) == (
                library.own, library.shared, library.shared_by_server,
                library.distilled_by_server,
            ), (user, server)  # fmt: skip
    finally:
        await store.close()
    assert expected[(ALICE, None)].shared == (3 if erasure == "complete" else 1)
