"""Write-behind never undoes another process's delete: identity rows and counters held by
one process for write-behind are not written over a purge or clear that another process
committed after this one last caught up with the feed."""

from __future__ import annotations

import asyncio
import random
import time

from helpers import seed_for

from stm import ShortTermMemory, STMConfig
from stm.store import open_store
from stm.testing import ctx, turn

BOTH_STORES = True
USERS = (1, 2, 3)
CHANNELS = (10, 11)


async def _rows_of(database: str, user: int) -> list[tuple[str, float]]:
    store = await open_store(STMConfig(database=database))
    try:
        rows = await store.execute(  # type: ignore[attr-defined]
            "SELECT key, updated_at FROM short_term_memories WHERE scope = 'user' "
            + ("AND user_id = ?" if not database.startswith("postgresql") else "AND user_id = $1"),
            (user,),
        )
    finally:
        await store.close()
    return [(str(key), float(at)) for key, at in rows]


async def test_a_purge_elsewhere_is_not_undone_by_write_behind(store_database: str) -> None:
    """Process A captures turns (its identity rows wait for write-behind) while process B
    purges users and clears channels at random moments: afterwards no row of a purged user
    dated before the purge exists, whatever A wrote behind meanwhile."""
    rng = random.Random(seed_for("write-behind-guard"))
    # A catches up with the feed only every half second: many purges land in its lag.
    config = STMConfig(database=store_database, write_behind_seconds=0.02, coherence_seconds=0.5)
    a = await ShortTermMemory.open(config)
    b = await ShortTermMemory.open(config)
    purged_at: dict[int, float] = {}
    try:
        for _ in range(60):
            roll = rng.random()
            if roll < 0.7:
                user, channel = rng.choice(USERS), rng.choice(CHANNELS)
                await a.capture(turn(ctx(user=user, channel=channel), f"from {user}"))
            elif roll < 0.9:
                user = rng.choice(USERS)
                await b.purge(user)
                # A turn of this user that A captures from now on is one A may keep: only
                # what is older than the purge must be gone.
                purged_at[user] = time.time()
            else:
                await b.clear_short_term_memory_for_channel(rng.choice(CHANNELS))
                await b.flush()
            await asyncio.sleep(rng.choice([0.0, 0.0, 0.005, 0.03]))
        await a.flush()
        await asyncio.sleep(0.6)  # A's follower catches up; then A writes behind again
        await a.flush()
    finally:
        await a.close()
        await b.close()
    assert purged_at, "the run purged no one: change the seed"
    for user, at in purged_at.items():
        for key, updated_at in await _rows_of(store_database, user):
            assert updated_at > at, (user, key, updated_at, at)


async def test_rows_held_across_a_purge_and_a_clear_elsewhere_are_not_written(
    store_database: str,
) -> None:
    """The exact race: A holds rows for write-behind and has not caught up with the feed
    when B purges one user and clears another's channel; A's next write-behind writes
    neither back (and writes what neither touched). On PostgreSQL A would hear of the
    change at once, so A's follower is held back."""
    slow = STMConfig(database=store_database, write_behind_seconds=300, coherence_seconds=300)
    a = await ShortTermMemory.open(slow)
    b = await ShortTermMemory.open(slow.model_copy(update={"write_behind_seconds": 0.02}))
    caught_up = asyncio.Event()

    async def lagging() -> int:  # A lags behind the feed (a slow host, a long pause)
        await caught_up.wait()
        return 0

    a.follower.catch_up = lagging  # type: ignore[method-assign]
    try:
        await a.capture(turn(ctx(user=1, channel=10), "purged words"))
        await a.capture(turn(ctx(user=2, channel=11), "cleared words"))
        await a.capture(turn(ctx(user=3, channel=12), "kept words"))
        await b.purge(1)
        await b.clear_short_term_memory_for_channel(11)
        await b.flush()
        await a.flush()
    finally:
        await a.close()
        await b.close()
    assert await _rows_of(store_database, 1) == []
    assert await _rows_of(store_database, 2) == []
    assert len(await _rows_of(store_database, 3)) == 1
