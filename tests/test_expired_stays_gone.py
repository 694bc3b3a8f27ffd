"""Expired memory never comes back: not through write-behind, a read in flight, an upgrade
elsewhere, a restart, or a janitor pass that has not run yet.

An entry expires when it has been inactive for its TTL. Activity after that starts a
new entry: the old notes are gone from that moment, even though their row is only deleted
by the next janitor pass (or by whichever write or read meets it first).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field

from helpers import replayable
from hypothesis import example, given
from hypothesis import strategies as st

from stm import ShortTermMemory, STMConfig
from stm.store import open_store
from stm.store._base import LoadRows
from stm.testing import Clock, ctx, turn

BOTH_STORES = True
SLOW_ON_POSTGRES = True
HOUR = 3600.0
CRUDE_TTL, SUMMARY_TTL = 12.0, 24.0
TOKEN = re.compile(r"NOTE\d+X")


async def _row(database: str, key: str) -> object | None:
    store = await open_store(STMConfig(database=database))
    try:
        (rows,) = await store.run([LoadRows((key,), 0.0, 0.0)])
    finally:
        await store.close()
    return rows[0] if rows else None  # type: ignore[index]


async def test_activity_after_expiry_does_not_revive_the_old_summary(
    store_database: str,
) -> None:
    """A summary written at hour 0 expires at hour 24; at hour 25 its user posts in the
    channel and another user's upgrade elsewhere follows at once: the hour-0 summary is not
    returned, not rendered, and its row does not come back fresh."""
    clock = Clock(1_700_000_000.0)
    config = STMConfig(database=store_database, write_behind_seconds=0.01)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        alice = ctx(user=1, channel=10)
        await memory.capture(turn(alice, "hello"))
        assert (await memory.run_tool(alice, {"summary": "HOUR-ZERO"})).success
        await memory.flush()
        clock.advance(hours=25)
        await memory.capture(turn(ctx(user=1, channel=10), "back again"))
        bob = ctx(user=2, channel=11)
        assert (await memory.run_tool(bob, {"summary": "ELSEWHERE"})).success
        await memory.flush()
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is None or entry.summary is None
        assert "HOUR-ZERO" not in str(await memory.build_context(ctx(user=3, channel=12)))
    row = await _row(store_database, "shortterm:server:100:10")
    assert row is None or row.summary is None  # type: ignore[attr-defined]
    async with ShortTermMemory.open(config, clock=clock) as memory:
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is None or entry.summary is None


@dataclass
class _Key:
    """What the model knows of one key: its live notes and when it was last active."""

    notes: set[str] = field(default_factory=set)
    last: float = 0.0
    dead: set[str] = field(default_factory=set)

    def dead_at(self, at: float) -> set[str]:
        """The notes that must not be seen from this key at ``at``."""
        ttl = SUMMARY_TTL if self.notes else CRUDE_TTL
        expired = bool(self.last) and at - self.last >= ttl * HOUR
        return self.dead | (self.notes if expired else set())

    def active(self, at: float) -> None:
        """Activity at ``at``: if the entry expired before it, its notes died with it."""
        ttl = SUMMARY_TTL if self.notes else CRUDE_TTL
        if self.last and at - self.last >= ttl * HOUR:
            self.dead |= self.notes
            self.notes = set()
        self.last = at


# One step: (kind, user, channel, hours to wait before it).
STEPS = st.lists(
    st.tuples(
        st.sampled_from(["capture", "upgrade", "read", "janitor", "restart", "flush"]),
        st.integers(1, 3),
        st.integers(10, 12),
        st.sampled_from([0.0, 0.5, 11.0, 12.5, 23.0, 25.0]),
    ),
    min_size=2,
    max_size=14,
)


async def _play(database: str, steps: list[tuple[str, int, int, float]]) -> None:
    clock = Clock(1_700_000_000.0)
    config = STMConfig(database=database, write_behind_seconds=0.01, janitor_interval_minutes=1e5)
    keys: dict[str, _Key] = {}
    memory = await ShortTermMemory.open(config, clock=clock)
    n = 0
    try:
        # The end of the run is read too.
        for kind, user, channel, wait in [*steps, ("read", 9, 13, 0.0)]:
            clock.advance(hours=wait)
            now = clock()
            here = ctx(user=user, channel=channel)
            mine = (f"shortterm:user:{user}:{channel}", f"shortterm:server:100:{channel}")
            if kind in ("capture", "upgrade"):
                for key in mine:
                    keys.setdefault(key, _Key()).active(now)
                await memory.capture(turn(here, f"said at {now}"))
                if kind == "upgrade":
                    n += 1
                    note = f"NOTE{n}X"
                    await memory.build_context(here)
                    if (await memory.run_tool(here, {"summary": note})).success:
                        for key in mine:
                            keys[key].notes = {note}
            elif kind == "janitor":
                await memory.run_janitor()
            elif kind == "restart":
                await memory.close()
                memory = await ShortTermMemory.open(config, clock=clock)
            elif kind == "flush":
                await memory.flush()
            if kind != "read":
                continue  # other steps follow at once, as a busy bot's do
            # What must never be seen again: notes of an entry that expired, from that entry
            # (reading is not activity). Another key may hold the same note alive.
            for key, known in keys.items():
                entry = await memory.get_entry(key)
                seen = set(TOKEN.findall(entry.summary or "")) if entry is not None else set()
                assert not seen & known.dead_at(now), (steps, key, seen & known.dead_at(now))
            shared = [v for k, v in keys.items() if ":server:" in k]
            alive = set().union(*(v.notes - v.dead_at(now) for v in shared))
            dead = set().union(*(v.dead_at(now) for v in shared)) - alive
            shown = set(TOKEN.findall(str(await memory.build_context(ctx(user=9, channel=13)))))
            assert not shown & dead, (steps, shown & dead)
        await memory.flush()
    finally:
        await memory.close()


NAMED = [
    [
        ("upgrade", 1, 10, 0.0),
        ("capture", 1, 10, 25.0),
        ("upgrade", 2, 11, 0.0),
        ("flush", 1, 10, 0.0),
        ("read", 1, 10, 0.0),
    ],
    [("upgrade", 1, 10, 0.0), ("restart", 1, 10, 25.0), ("capture", 1, 10, 0.0)],
    [("upgrade", 1, 10, 0.0), ("capture", 2, 10, 23.0), ("capture", 1, 10, 23.0)],
]


def test_nothing_past_its_ttl_is_ever_returned_or_rendered(
    example_database: Callable[[], AbstractContextManager[str]],
) -> None:
    """Any mix of captures, upgrades, clock jumps past a TTL, write-behind, restarts and
    janitor passes (or none), on each store: no note of an entry that expired is rendered
    or returned afterwards (other channels' prompts show every channel's notes, so nothing
    hides it)."""

    @replayable(40)
    @given(steps=STEPS)
    def never_back(steps: list[tuple[str, int, int, float]]) -> None:
        with example_database() as database:
            asyncio.run(_play(database, steps))

    for named in NAMED:
        never_back = example(named)(never_back)
    never_back()
