"""What several test modules share that is not a fixture: how many cases a randomized
test runs, its seed, and the types of the opener fixtures. Test doubles a host could use
too live in ``stm.testing``."""

from __future__ import annotations

import asyncio
import contextlib
import os
import zlib
from collections.abc import Awaitable, Callable
from typing import Any

from hypothesis import HealthCheck, settings

from stm import ShortTermMemory
from stm._cache import Entry
from stm._keys import server_key
from stm._window import EMPTY
from stm.store._base import StoredRow

Opener = Callable[..., Awaitable[ShortTermMemory]]
"""The ``open_memory`` fixture: open a memory on the test's database (again: a restart)."""

StoreOpener = Callable[[], Awaitable[Any]]
"""The ``open_store_`` fixture: open the test's store directly."""

# Deeper runs of the adversarial tests: STM_STRESS=1 multiplies kill cycles, interleavings
# and fuzz cases; STM_SEED fixes the seed of the randomized tests to replay a failure.
STRESS = os.environ.get("STM_STRESS", "").strip().lower() not in ("", "0", "false", "no")


def scaled(default: int, stress: int) -> int:
    """The default count, or the stress count when STM_STRESS is set."""
    return stress if STRESS else default


def replayable(max_examples: int) -> settings:
    """Hypothesis settings of a property whose examples each open a database: the same
    examples every run (a failure replays), no deadline, no saved examples."""
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow],
    )


def seed_for(name: str) -> int:
    """The seed of one randomized test: STM_SEED if set, else fixed per test name."""
    chosen = os.environ.get("STM_SEED")
    if chosen:
        return int(chosen)
    return zlib.crc32(name.encode())


async def follower_read_once(memory: ShortTermMemory) -> None:
    """Wait until ``memory``'s follower has done its first read of the feed (it then waits
    a quarter of the coherence bound before the next)."""
    opened = memory.follower.current_at
    for _ in range(1000):
        if memory.follower.current_at != opened:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the follower never read the feed")


def server_entry(channel: int, *, updated_at: float = 0.0, turns: int = 0) -> Entry:
    """A hydrated cache entry of channel ``channel`` of server 1, no messages, its turn
    counter at ``turns``."""
    entry = Entry(
        key=server_key(1, channel),
        scope="server",
        server_id=1,
        user_id=None,
        channel_id=channel,
        persona_id=None,
        messages=EMPTY,
        updated_at=updated_at,
    )
    entry.turns_since_refresh = turns
    return entry


def stored_row(
    key: str,
    server: int | None,
    user: int | None,
    channel: int,
    *,
    summary: str | None = "remembered",
    updated_at: float,
) -> StoredRow:
    """A row as the store keeps it, with notes: a user's entry when ``key`` is a user
    key, else the channel's."""
    return StoredRow(
        key=key,
        scope="user" if key.startswith("shortterm:user") else "server",
        server_id=server,
        user_id=user,
        channel_id=channel,
        persona_id=None,
        parent_channel_id=None,
        channel_name=None,
        server_name=None,
        channel_private=False,
        summary=summary,
        categories={},
        turns_since_refresh=1,
        last_refreshed_turn=1,
        updated_at=updated_at,
    )


async def paused(memory: ShortTermMemory) -> ShortTermMemory:
    """Stop the memory's background follower: the test calls ``catch_up`` itself."""
    for task in memory.background.periodic:
        if task.get_name() == "stm-follower":
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return memory
