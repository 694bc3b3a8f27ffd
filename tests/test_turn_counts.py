"""A key's turn count is the turns captured there since its channel was last cleared or its
conversation distilled: never counted twice or lost, whatever evictions, reads,
write-behind, clears, upgrades and restarts come between.

The count is what nudges the model to distill a conversation (``refresh_cadence``). An
entry the cache had to create before its row was read counts from zero and adds the row's
count when it reads it; a row that entry's own write-behind had inserted meanwhile must
not hold those turns, or they are counted twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from contextlib import AbstractContextManager

from helpers import replayable
from hypothesis import example, given
from hypothesis import strategies as st

from stm import ShortTermMemory, STMConfig
from stm._keys import user_key
from stm.store import open_store
from stm.store._base import LoadRows
from stm.testing import ctx, turn

BOTH_STORES = True
SLOW_ON_POSTGRES = True
CHANNELS = (1, 2, 3, 4)

STEP = st.one_of(
    st.tuples(st.just("capture"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("clear"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("read"), st.sampled_from(CHANNELS)),
    st.tuples(st.just("upgrade"), st.sampled_from(CHANNELS)),
    st.tuples(st.sampled_from(["flush", "settle", "restart"]), st.just(0)),
)
STEPS = st.lists(STEP, max_size=30)

# The sequence that counted a turn twice: an evicted key cleared, then captured again
# before the clear was written (the new entry's identity row was written ahead of its read).
NAMED = [
    [("capture", 1), ("capture", 2), ("capture", 3), ("flush", 0), ("clear", 1), ("capture", 1)],
    [("capture", 1), ("capture", 2), ("capture", 3), ("clear", 1), ("capture", 1)],
    [("capture", 1), ("capture", 2), ("capture", 3), ("capture", 1), ("read", 1)],
]


def _config(database: str) -> STMConfig:
    # Two keys: every third channel evicts one; write-behind only when flushed or read.
    return STMConfig(database=database, cache_max_keys=2, write_behind_seconds=3600)


async def _rows(database: str) -> dict[int, int]:
    store = await open_store(_config(database))
    try:
        keys = tuple(user_key(1, channel) for channel in CHANNELS)
        (rows,) = await store.run([LoadRows(keys, 0.0, 0.0)])
    finally:
        await store.close()
    return {row.channel_id: row.turns_since_refresh for row in rows}  # type: ignore[attr-defined]


async def _play(database: str, steps: list[tuple[str, int]]) -> None:
    counted = dict.fromkeys(CHANNELS, 0)
    memory = await ShortTermMemory.open(_config(database))
    try:
        for number, (kind, channel) in enumerate(steps):
            here = ctx(user=1, channel=channel, server=None)
            if kind == "capture":
                await memory.capture(turn(here, f"turn {number}"))
                counted[channel] += 1
            elif kind == "clear":
                await memory.clear_short_term_memory_for_channel(channel)
                counted[channel] = 0
            elif kind == "read":
                await memory.build_context(here)
            elif kind == "upgrade":
                # A distilled conversation counts from zero again.
                if (await memory.run_tool(here, {"summary": f"notes {number}"})).success:
                    counted[channel] = 0
            elif kind == "flush":
                await memory.flush()
            elif kind == "settle":
                for _ in range(5):
                    await asyncio.sleep(0)
            else:
                await memory.close()
                memory = await ShortTermMemory.open(_config(database))
        for channel in CHANNELS:
            entry = await memory.get_entry(user_key(1, channel))
            held = 0 if entry is None else entry.turns_since_refresh
            assert held == counted[channel], (channel, held, counted)
    finally:
        await memory.close()
    stored = await _rows(database)
    for channel in CHANNELS:
        assert stored.get(channel, 0) == counted[channel], (channel, stored, counted)


def test_a_keys_turns_are_counted_once(
    example_database: Callable[[], AbstractContextManager[str]],
) -> None:
    """Any mix of captures, clears, reads, upgrades, flushes and restarts over more keys
    than the cache holds, on each store: each key's count, in memory and in its row once
    closed, is the turns captured there since its channel was last cleared or distilled."""

    @replayable(40)
    @given(steps=STEPS)
    def counted_once(steps: list[tuple[str, int]]) -> None:
        with example_database() as database:
            asyncio.run(_play(database, steps))

    for named in NAMED:
        counted_once = example(named)(counted_once)
    counted_once()
