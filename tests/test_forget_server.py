"""A server cleared in one process is cleared in every process sharing the database, the
channels another process holds only in its cache included (recent messages, entries its
write-behind has not written yet), and an upgrade begun there before it is refused."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from helpers import Opener

from stm import ShortTermMemory, STMConfig
from stm.store._inspect import open_inspector
from stm.testing import ctx, turn

BOTH_STORES = True

SERVER, OTHER_SERVER = 100, 200
CHANNEL, NEIGHBOUR, ELSEWHERE = 10, 11, 20
USER = 1
SECRET = "WORDS-OF-THE-DEPARTED-SERVER"
USER_KEY = f"shortterm:user:{USER}:{CHANNEL}"
SERVER_KEY = f"shortterm:server:{SERVER}:{CHANNEL}"
# Nothing is written behind during the test unless it flushes: the rows are not there yet.
UNFLUSHED = {"write_behind_seconds": 3600.0, "coherence_seconds": 3600.0}


async def rows_of(config: STMConfig, *channels: int) -> list[object]:
    inspector = await open_inspector(config)
    try:
        found: list[object] = []
        for channel in channels:
            found.extend(await inspector.rows_of_channel(channel))
        return found
    finally:
        await inspector.close()


@contextlib.asynccontextmanager
async def follower_held(memory: ShortTermMemory) -> AsyncIterator[None]:
    """The follower reads nothing meanwhile: the store's guard alone must refuse."""
    async with memory.follower._reading:
        yield


async def test_another_process_forgets_the_channels_it_holds_only_in_its_cache(
    open_memory: Opener, config: STMConfig
) -> None:
    a = await open_memory(**UNFLUSHED)
    b = await open_memory(**UNFLUSHED)
    await b.capture(turn(ctx(user=USER, channel=CHANNEL, server=SERVER), SECRET))
    await b.capture(turn(ctx(user=USER, channel=ELSEWHERE, server=OTHER_SERVER), "KEPT"))
    assert await b.get_entry(USER_KEY) is not None
    assert SECRET in str(await b.build_context(ctx(user=2, channel=NEIGHBOUR, server=SERVER)))
    assert await rows_of(config, CHANNEL) == []  # B holds it only in its cache

    await a.clear_server(SERVER)
    await b.follower.catch_up()

    assert await b.get_entry(USER_KEY) is None
    assert await b.get_entry(SERVER_KEY) is None
    for prompt in (
        ctx(user=2, channel=NEIGHBOUR, server=SERVER),
        ctx(user=USER, channel=NEIGHBOUR, server=SERVER),
        ctx(user=USER, channel=99, server=None),
    ):
        assert SECRET not in str(await b.build_context(prompt))
    assert await b.get_entry(f"shortterm:user:{USER}:{ELSEWHERE}") is not None  # not S
    await b.close()
    assert await rows_of(config, CHANNEL) == []
    assert len(await rows_of(config, ELSEWHERE)) == 2


async def test_an_upgrade_begun_before_another_process_forgot_its_server_is_refused(
    open_memory: Opener, config: STMConfig
) -> None:
    a = await open_memory(**UNFLUSHED)
    b = await open_memory(**UNFLUSHED)
    here = ctx(user=USER, channel=CHANNEL, server=SERVER)
    await b.capture(turn(here, SECRET))
    turn_ctx = ctx(user=USER, channel=CHANNEL, server=SERVER)
    await b.build_context(turn_ctx)  # the turn begins: its position is taken
    async with follower_held(b):
        await a.clear_server(SERVER)
        result = await b.run_tool(turn_ctx, {"summary": f"they said {SECRET}"})
    assert not result.success and "Nothing was saved" in result.message
    assert await rows_of(config, CHANNEL) == []
    await b.follower.catch_up()
    assert await b.get_entry(SERVER_KEY) is None
    await b.close()
    assert await rows_of(config, CHANNEL) == []


async def test_an_upgrade_refused_locally_once_the_follower_applied_the_forget(
    open_memory: Opener, config: STMConfig
) -> None:
    """The follower applied it before the upgrade: it is refused here, from the deletion
    log (which holds the clear of each channel this process held, and the server; the
    server's entry alone is checked in ``test_overtaken.py``)."""
    a = await open_memory(**UNFLUSHED)
    b = await open_memory(**UNFLUSHED)
    turn_ctx = ctx(user=USER, channel=CHANNEL, server=SERVER)
    await b.capture(turn(turn_ctx, SECRET))
    await b.build_context(turn_ctx)
    await a.clear_server(SERVER)
    await b.follower.catch_up()
    result = await b.run_tool(turn_ctx, {"summary": f"they said {SECRET}"})
    assert not result.success
    assert "Nothing was saved" in result.message
    await asyncio.sleep(0)
    await b.close()
    assert await rows_of(config, CHANNEL) == []


async def test_a_row_read_while_its_server_is_cleared_does_not_come_back(
    store_database: str,
) -> None:
    """A read of a row in flight when its server is cleared (``get_entry`` of a channel
    the cache does not hold) answers nothing of it, and the cache does not take it in:
    the deletion log's ``apply_to_row`` drops rows of a forgotten server."""
    from stm.store import open_store
    from stm.testing import FaultyStore

    config = STMConfig(database=store_database)
    there = ctx(user=USER, channel=CHANNEL, server=SERVER)
    async with ShortTermMemory.open(config) as memory:
        await memory.capture(turn(there, "hello"))
        assert (await memory.run_tool(there.model_copy(), {"summary": SECRET})).success
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store) as memory:
        store.hold()
        reading = asyncio.create_task(memory.get_entry(SERVER_KEY))
        await store.holding()  # the row is being read
        clearing = asyncio.create_task(memory.clear_server(SERVER))
        for _ in range(5):
            await asyncio.sleep(0)
        store.release()
        assert await reading is None
        await clearing
        assert await memory.get_entry(SERVER_KEY) is None
        assert SECRET not in str(await memory.build_context(there.model_copy()))
