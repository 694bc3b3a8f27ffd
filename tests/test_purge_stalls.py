"""A purge of any reach holds no other work up for long, on both stores: an everywhere
purge still being planned does not hold up memory of servers it cannot reach, each step
of a purge is a transaction of its own, a preview runs off the write path, and a purge
counted a page at a time adds up to what a preview counts. (A purge resumed after its
rows are cleared: ``test_store_behaviour``.)"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from helpers import Opener

import stm._memory as memory_module
from stm import ShortTermMemory, STMConfig
from stm._keys import server_key, user_key
from stm.store import _chains as chains
from stm.store._base import (
    DeleteExpired,
    LoadRows,
    Op,
    PurgeUser,
    Scrub,
    SweepPurge,
    SweepStep,
)
from stm.testing import Clock, ctx, faulty_memory, turn

BOTH_STORES = True
SERVER, ELSEWHERE = 100, 300
ALICE, BOB, CAROL, DAVE = 1, 2, 3, 4
CHANNELS = range(20, 32)


async def _alice_everywhere(memory: ShortTermMemory) -> None:
    """Alice's words in the notes of many channels of SERVER (each a chain of its own),
    Bob's own notes in ELSEWHERE."""
    for channel in CHANNELS:
        for user in (ALICE, CAROL):
            here = ctx(user=user, channel=channel, server=SERVER)
            await memory.capture(turn(here, f"user {user} in {channel}"))
            result = await memory.run_tool(here, {"summary": f"notes {user} {channel}"})
            assert result.success, result.message
    bob = ctx(user=BOB, channel=40, server=ELSEWHERE)
    await memory.capture(turn(bob, "bob says hi"))
    assert (await memory.run_tool(bob, {"summary": "bob's notes"})).success


@pytest.fixture
def slow_plans(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plans of one chain per transaction: a purge of Alice takes many steps to plan."""
    monkeypatch.setattr(chains, "SEED_CHUNK", 1)
    monkeypatch.setattr(chains, "FOLLOW_CHUNK", 1)


@pytest.mark.usefixtures("slow_plans")
async def test_an_upgrade_in_a_server_a_purge_cannot_reach_does_not_wait_for_its_plan(
    config: STMConfig, clock: Clock
) -> None:
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        purging = asyncio.create_task(memory.clear_short_term_memory_for_user(ALICE))
        pending = memory._reads.deletions.pending
        # Once the first transaction said where the purge may reach: only SERVER.
        narrowed = store.until(lambda: bool(pending) and pending[0].servers is not None)
        await asyncio.wait_for(narrowed, timeout=10)
        (purge,) = pending
        assert purge.servers == frozenset({SERVER})
        bob = ctx(user=BOB, channel=40, server=ELSEWHERE)
        await memory.capture(turn(bob, "bob again"))
        assert (await memory.run_tool(bob, {"summary": "bob's notes, later"})).success
        # It committed while the plan still had steps to go.
        assert purge.pending
        carol = ctx(user=CAROL, channel=CHANNELS[0], server=SERVER)
        await memory.capture(turn(carol, "carol again"))
        await memory.run_tool(carol, {"summary": "carol's notes, later"})
        assert not purge.pending  # an upgrade where it may reach waited for its plan
        await purging
        await memory.flush()
        for channel in CHANNELS[1:]:
            entry = await memory.get_entry(f"shortterm:server:{SERVER}:{channel}")
            assert entry is None or entry.summary is None
        kept = await memory.get_entry(f"shortterm:server:{ELSEWHERE}:40")
        assert kept is not None and kept.summary == "bob's notes, later"
    finally:
        await memory.close()


async def test_each_step_of_a_purge_is_a_transaction_of_its_own(
    config: STMConfig, clock: Clock
) -> None:
    """What is queued before a purge commits without waiting for it, and what comes after
    waits for one step of it at most."""
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        store.batches.clear()
        store.hold()
        bob = ctx(user=BOB, channel=40, server=ELSEWHERE)
        await memory.capture(turn(bob, "bob again"))
        upgrading = asyncio.create_task(memory.run_tool(bob, {"summary": "bob, later"}))
        await store.holding()  # the upgrade's batch is in flight
        # Queued behind it: a channel clear elsewhere, then the purge.
        await memory.clear_short_term_memory_for_channel(42)
        purging = asyncio.create_task(memory.purge(ALICE))
        await asyncio.sleep(0.05)
        store.release()
        assert (await upgrading).success
        await purging
        assert any("DeleteChannel" in b for b in store.batches)
        purge_steps = [b for b in store.batches if {"PurgeUser", "SweepPurge"} & set(b)]
        assert purge_steps and all(len(b) == 1 for b in purge_steps), store.batches
    finally:
        await memory.close()


async def test_a_purge_takes_smaller_steps_after_slow_ones(
    config: STMConfig, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each kind of work of a purge's steps is sized by how long the last steps of that
    kind held the write lock: after steps slower than the target, the next of the same
    kind take a smaller share of their chunks, down to the floor, while the first step of
    another kind starts at the starting share, not at the size the last kind ended at;
    the purge still clears everything it reaches."""
    monkeypatch.setattr(chains, "SWEEP_CHUNK", 4)
    monkeypatch.setattr(chains, "FINISH_CHUNK", 2)
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        sized: list[tuple[str, float]] = []  # (kind of work, the share it was asked for)
        inner_run = store.inner.run

        async def spy(ops: Sequence[Op]) -> list[object]:
            results = await inner_run(ops)
            for op, result in zip(ops, results, strict=True):
                if isinstance(op, SweepPurge) and isinstance(result, SweepStep):
                    sized.extend((phase, op.size_of(phase)) for phase in result.phases)
            return results

        monkeypatch.setattr(store.inner, "run", spy)
        steps = memory.writer.purge_steps
        steps.target = 0.0  # every step took too long
        await memory.purge(ALICE)
        by_kind: dict[str, list[float]] = {}
        for phase, size in sized:
            by_kind.setdefault(phase, []).append(size)
        clears, finishes = by_kind["clear"], by_kind["finish"]
        assert len(clears) >= 3 and len(finishes) >= 3, sized
        for sizes in (clears, finishes):
            assert sizes[0] == steps.start > 1 / 16, sized
            assert sizes == sorted(sizes, reverse=True) and min(sizes) == 1 / 16, sized
        # The first finishing step came after clears had shrunk to the floor.
        first_finish = sized.index(("finish", steps.start))
        assert ("clear", 1 / 16) in sized[:first_finish], sized
        for channel in CHANNELS:
            entry = await memory.get_entry(f"shortterm:server:{SERVER}:{channel}")
            assert entry is None or entry.summary is None
        # Steps quicker than the target grow again, to the full chunks at most.
        steps.target = 1e9
        for _ in range(8):
            steps.took(["clear"], 0.001)
        assert dict(steps.sizes())["clear"] == 1.0
    finally:
        await memory.close()


async def test_a_preview_runs_off_the_write_path(config: STMConfig, clock: Clock) -> None:
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        before = await memory.preview_purge(ALICE)
        assert before.own == len(CHANNELS) and before.shared_by_server[SERVER] > 0
        store.hold()
        bob = ctx(user=BOB, channel=40, server=ELSEWHERE)
        await memory.capture(turn(bob, "bob again"))
        upgrading = asyncio.create_task(memory.run_tool(bob, {"summary": "bob, later"}))
        await store.holding()  # the writer is stuck in a transaction
        try:
            preview = await asyncio.wait_for(memory.preview_purge(ALICE), timeout=10)
        finally:
            store.release()
        assert preview == before
        assert (await upgrading).success
    finally:
        await memory.close()


async def test_a_preview_that_cannot_be_read_aside_is_read_through_the_writer(
    config: STMConfig, clock: Clock
) -> None:
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        store.aside_failures = 1
        preview = await asyncio.wait_for(memory.preview_purge(ALICE), timeout=10)
        assert preview.own == len(CHANNELS)
        assert ["PreviewPurge"] in store.batches
    finally:
        await memory.close()


@pytest.mark.usefixtures("slow_plans")
async def test_a_wide_reach_counted_a_page_at_a_time_adds_up(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chains, "REACH_PAGE", 2)
    memory = await open_memory()
    await _alice_everywhere(memory)
    bob = ctx(user=BOB, channel=41, server=ELSEWHERE)
    await memory.capture(turn(bob, "bob hears of alice"))
    preview = await memory.preview_purge(ALICE)
    assert preview.shared > 2 * chains.REACH_PAGE  # counted over several pages
    done = await memory.purge(ALICE)
    assert (done.own, done.shared) == (preview.own, preview.shared)
    assert done.shared_by_server == preview.shared_by_server
    assert done.distilled_by_server == preview.distilled_by_server
    # Told a page at a time, the ranges reached this process's cache all together.
    for channel in CHANNELS:
        entry = await memory.get_entry(f"shortterm:server:{SERVER}:{channel}")
        assert entry is None or entry.summary is None


@pytest.mark.usefixtures("slow_plans")
async def test_a_server_counted_a_page_at_a_time_is_bounded_by_what_the_purge_clears(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge told a page at a time and a server counted only up to its bound: the
    answer says the server holds at least the count, which is at least COUNT_BEYOND times
    what the purge cleared there (so its share is at most 1 / COUNT_BEYOND)."""
    monkeypatch.setattr(chains, "REACH_PAGE", 2)
    monkeypatch.setattr(chains, "COUNT_BEYOND", 1)
    monkeypatch.setattr(chains, "COUNT_FLOOR", 0)
    memory = await open_memory()
    for channel in range(50, 62):  # notes of the server no purge of Alice reaches
        dave = ctx(user=DAVE, channel=channel, server=SERVER)
        await memory.capture(turn(dave, f"dave in {channel}"))
        assert (await memory.run_tool(dave, {"summary": f"dave's {channel}"})).success
    await _alice_everywhere(memory)
    done = await memory.purge(ALICE, SERVER)
    shared = done.shared_by_server[SERVER]
    assert shared > 2 * chains.REACH_PAGE  # counted over several pages
    assert done.distilled_at_least == {SERVER}
    assert shared <= done.distilled_by_server[SERVER] < 2 * (len(CHANNELS) + 12)
    assert done.share_of(SERVER) <= 1 / chains.COUNT_BEYOND


async def test_a_purge_is_pending_until_the_last_page_of_its_ranges(
    config: STMConfig, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until the last page of a wide purge's ranges is told, the purge is pending (what it
    may reach is hidden, upgrades where it may reach wait); then it holds every range."""
    monkeypatch.setattr(chains, "SWEEP_CHUNK", 2)
    monkeypatch.setattr(chains, "REACH_PAGE", 3)
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await _alice_everywhere(memory)
        seen: list[tuple[bool, int]] = []
        inner_run = store.inner.run

        async def spy(ops: Sequence[Op]) -> list[object]:
            results = await inner_run(ops)
            for result in results:
                if isinstance(result, SweepStep) and result.ranges is not None:
                    seen.append((result.told, len(result.ranges)))
            return results

        monkeypatch.setattr(store.inner, "run", spy)
        purging = asyncio.create_task(memory.purge(ALICE))
        pending = memory._reads.deletions.pending
        await asyncio.wait_for(store.until(lambda: len(seen) == 1), timeout=10)
        (purge,) = pending
        assert purge.pending and not seen[0][0]  # a page told, not the last
        await purging
        assert len(seen) > 2 and seen[-1][0] and not any(t for t, _ in seen[:-1])
        assert purge.ranges is not None and len(purge.ranges) == sum(n for _, n in seen)
    finally:
        await memory.close()


async def test_a_purge_resumed_at_start_takes_steps_of_the_starting_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A purge a stopped process left is resumed by the next one's writer in steps sized
    as any other purge's: its first step takes the starting share of each kind's chunk,
    not the full chunks."""
    from stm._writer import Writer
    from stm.store._sqlite import SQLiteStore

    store = await SQLiteStore.open(":memory:")
    asked: list[SweepPurge] = []
    inner_run = store.run

    async def spy(ops: Sequence[Op]) -> list[object]:
        asked.extend(op for op in ops if isinstance(op, SweepPurge))
        return await inner_run(ops)

    monkeypatch.setattr(store, "run", spy)
    writer = Writer(store, write_behind=3600, retry_delay=3600)
    writer.start([71])  # no such purge: the step finds nothing and ends
    try:
        await writer.flush()
        (first,) = asked
        start = writer.purge_steps.start
        assert start < 1.0
        assert all(first.size_of(kind) == start for kind in ("seed", "page", "clear", "finish"))
    finally:
        await writer.close()
        await store.close()


def _first_ops(memory: ShortTermMemory, monkeypatch: pytest.MonkeyPatch) -> list[Op]:
    """The first operation of each batch the store runs from now on, in order."""
    batches: list[Op] = []
    run = memory.store.run

    async def recorded(ops: Sequence[Op]) -> list[object]:
        batches.append(ops[0])
        return await run(ops)

    monkeypatch.setattr(memory.store, "run", recorded)
    return batches


async def test_a_purge_during_a_long_janitor_pass_answers_before_the_pass_ends(
    open_memory: Opener, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge made while a janitor pass deletes rows a chunk per transaction answers once
    its own steps and an erasure after them are committed, between two chunks: the rest of
    the pass is not its to wait for (``flush`` still is)."""
    monkeypatch.setattr(memory_module, "EXPIRE_CHUNK", 1)
    memory = await open_memory()
    for channel in range(12):
        await memory.capture(turn(ctx(user=DAVE, channel=channel, server=ELSEWHERE), "long ago"))
    dave = [k for c in range(12) for k in (server_key(ELSEWHERE, c), user_key(DAVE, c))]
    await memory.flush()
    clock.advance(hours=13)  # past the crude TTL: Dave's rows have expired
    alice = ctx(user=ALICE, channel=50, server=SERVER)
    await memory.capture(turn(alice, "alice's words"))
    assert (await memory.run_tool(alice, {"summary": "ALICE-NOTES"})).success
    await memory.flush()
    run = memory.store.run
    batches = _first_ops(memory, monkeypatch)
    await memory.run_janitor()
    await memory.purge(ALICE)
    answered = batches[:]
    (rows,) = await run([LoadRows((*dave, server_key(SERVER, 50)), 0.0, 0.0)])
    held = {row.key: row for row in rows}
    assert "ALICE-NOTES" not in repr(held), "the purge was not durable when it answered"
    steps = [n for n, op in enumerate(answered) if isinstance(op, PurgeUser | SweepPurge)]
    scrubs = [n for n, op in enumerate(answered) if isinstance(op, Scrub)]
    assert scrubs and scrubs[-1] > steps[-1], "it answered before the erasure after its steps"
    chunks = sum(isinstance(op, DeleteExpired) for op in answered)
    assert any(key in held for key in dave), f"the purge waited for the whole pass ({chunks})"
    await memory.flush()
    (rows,) = await run([LoadRows(tuple(dave), 0.0, 0.0)])
    assert rows == [], "flush did not wait for the rest of the pass"


@pytest.mark.usefixtures("slow_plans")
async def test_a_purge_answers_before_another_purge_begun_before_it_ends(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a purge of wide reach goes on a step at a time, another member's purge made
    after it answers once its own steps and an erasure after them are done: the erasure
    does not wait for the first purge's last step, nor does the answer."""
    memory = await open_memory()
    await _alice_everywhere(memory)
    await memory.flush()
    run = memory.store.run
    batches = _first_ops(memory, monkeypatch)
    alice = asyncio.create_task(memory.clear_short_term_memory_for_user(ALICE))
    await asyncio.sleep(0)
    await memory.purge(BOB)
    assert memory.writer.sweeping(), "the answer waited for the other purge's last step"
    bob = next(n for n, op in enumerate(batches) if isinstance(op, PurgeUser) and op.user_id == BOB)
    assert any(isinstance(op, Scrub) for op in batches[bob:]), "it answered before an erasure"
    (rows,) = await run([LoadRows((server_key(ELSEWHERE, 40), user_key(BOB, 40)), 0.0, 0.0)])
    assert "bob's notes" not in repr(rows)
    await alice
    await memory.flush()
    assert not memory.writer.sweeping()
