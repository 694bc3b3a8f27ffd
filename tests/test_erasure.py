"""Erasure through the facade: what a purge reaches under each policy, what it says before
and after, and how its durable part runs: in bounded chunks, finished after a restart."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from helpers import replayable
from hypothesis import given
from hypothesis import strategies as st

import stm._memory as memory_module
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, StoreError
from stm._readthrough import ReadThrough
from stm.store import _chains as chains
from stm.store import open_store
from stm.store._base import SweepPurge
from stm.testing import FaultyStore, ctx, turn

BOTH_STORES = True
GENERAL, RANDOM, GAMES = 10, 11, 12
ALICE, BOB, CAROL = 1, 2, 3
# The chunks of a purge's steps: set to 1, a purge of a few chains takes many steps.
_CHUNKS = ("SEED_CHUNK", "FOLLOW_CHUNK", "SWEEP_CHUNK", "REACH_PAGE", "FINISH_CHUNK")


async def _server(memory: ShortTermMemory) -> None:
    """#games's notes are written from Carol's words only, before anything else; Alice
    speaks in #general and its notes are written; #random's notes are written from a prompt
    that showed #general's notes (and #games's)."""
    carol = ctx(user=CAROL, channel=GAMES)
    await memory.capture(turn(carol, "carol here"))
    assert (await memory.run_tool(carol, {"summary": "GAMES-NOTES"})).success
    alice = ctx(user=ALICE, channel=GENERAL)
    await memory.capture(turn(alice, "ALICE-SAID"))
    assert (await memory.run_tool(alice, {"summary": "GENERAL-NOTES"})).success
    bob = ctx(user=BOB, channel=RANDOM)
    await memory.capture(turn(bob, "bob here"))
    await memory.build_context(bob)
    assert (await memory.run_tool(bob, {"summary": "RANDOM-NOTES"})).success


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_whoever_purges_sees_what_will_go_and_then_what_went(
    store_database: str, erasure: str
) -> None:
    """A preview counts the user's own entries and, per server, the shared notes it would
    clear out of all the server holds; the purge then clears exactly that."""
    config = STMConfig(database=store_database, render_mode="supersede", erasure=erasure)
    async with ShortTermMemory.open(config) as memory:
        await _server(memory)
        preview = await memory.preview_purge(ALICE)
        assert preview.own == 1  # Alice's own entry of #general
        # Shared notes: #general's (and, under complete, #random's and Bob's copy of them).
        expected = 3 if erasure == "complete" else 1
        assert (preview.shared, preview.shared_by_server) == (expected, {100: expected})
        assert preview.distilled_by_server == {100: 6}
        assert preview.share_of(100) == expected / 6
        assert (await memory.get_entry(f"shortterm:server:100:{GENERAL}")) is not None
        done = await memory.purge(ALICE)
        assert (done.own, done.shared, done.erasure) == (1, expected, erasure)
        kept = {
            channel: (await memory.get_entry(f"shortterm:server:100:{channel}"))
            for channel in (GENERAL, RANDOM, GAMES)
        }
        assert kept[GENERAL] is None or kept[GENERAL].summary is None
        random_notes = kept[RANDOM].summary if kept[RANDOM] is not None else None
        assert random_notes == (None if erasure == "complete" else "RANDOM-NOTES")
        assert kept[GAMES] is not None and kept[GAMES].summary == "GAMES-NOTES"
        assert (await memory.preview_purge(ALICE)).shared == 0


async def test_a_purge_of_many_entries_clears_them_in_chunks_with_other_work_between(
    store_database: str,
) -> None:
    """Past one chunk, the rest is cleared by later transactions queued behind other work;
    flush() waits for all of them, and nothing of it is shown meanwhile."""
    config = STMConfig(database=store_database)
    users = range(100, 100 + chains.SWEEP_CHUNK + 30)
    async with ShortTermMemory.open(config) as memory:
        for user in users:
            here = ctx(user=user, channel=GENERAL)
            await memory.capture(turn(here, f"hello {user}, ALICE-WORD"))
        alice = ctx(user=ALICE, channel=GENERAL)
        await memory.capture(turn(alice, "ALICE-SAID"))
        for user in users:  # each upgrade shows Alice's message in the window
            here = ctx(user=user, channel=GENERAL)
            assert (await memory.run_tool(here, {"summary": "N"})).success
        batches_before = memory.writer.commits
        await memory.clear_short_term_memory_for_user(ALICE)
        for user in list(users)[:5]:
            entry = await memory.get_entry(f"shortterm:user:{user}:{GENERAL}")
            assert entry is None or entry.summary is None
        await memory.flush()
        assert memory.writer.commits - batches_before >= 2  # at least one later chunk
        rows = await memory.store.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM short_term_memories WHERE chain_id IS NOT NULL"
        )
        assert rows == [(0,)]


async def test_a_purge_stopped_mid_way_is_finished_at_the_next_open(store_database: str) -> None:
    """Rows a stopped process left to clear read as cleared, and the next open clears them
    before anything else."""
    config = STMConfig(database=store_database)
    users = range(100, 100 + chains.SWEEP_CHUNK + 30)
    async with ShortTermMemory.open(config) as memory:
        alice = ctx(user=ALICE, channel=GENERAL)
        await memory.capture(turn(alice, "ALICE-SAID"))
        for user in users:
            here = ctx(user=user, channel=GENERAL)
            assert (await memory.run_tool(here, {"summary": f"NOTES-{user}"})).success
    store = FaultyStore(await open_store(config))
    memory = await ShortTermMemory.open(config, store=store)
    original = store._run

    async def no_sweeps(ops: list[object]) -> list[object]:
        if any(isinstance(op, SweepPurge) for op in ops):
            raise OSError("stopped before the rest")
        return await original(ops)  # type: ignore[arg-type]

    store._run = no_sweeps  # type: ignore[method-assign]
    await memory.clear_short_term_memory_for_user(ALICE)
    for user in users:
        entry = await memory.get_entry(f"shortterm:user:{user}:{GENERAL}")
        assert entry is None or entry.summary is None
    memory.writer._task.cancel()  # the process stops: no close, nothing more written
    memory.closed = True
    await store.close()
    left = await open_store(config)
    try:
        assert await left.pending_sweeps()
    finally:
        await left.close()
    async with ShortTermMemory.open(config) as memory:
        await memory.flush()
        rows = await memory.store.execute(  # type: ignore[attr-defined]
            "SELECT count(*) FROM short_term_memories WHERE chain_id IS NOT NULL"
        )
        assert rows == [(0,)]
        assert await memory.store.pending_sweeps() == []  # type: ignore[attr-defined]


async def test_a_purge_left_unplanned_hides_what_it_may_reach_at_the_next_open(
    store_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A purge whose first transaction committed but whose plan a stopped process left
    unfinished is pending at the next open as a purge made there is: nothing it may reach
    is shown or built on before the store planned it, so no acknowledged upgrade is
    cleared by it afterwards."""
    for name in _CHUNKS:
        monkeypatch.setattr(chains, name, 1)  # one membership planned per transaction
    config = STMConfig(database=store_database)
    channels = range(20, 26)
    async with ShortTermMemory.open(config) as memory:
        await _alice_in_bobs_notes(memory, channels)
    store = FaultyStore(await open_store(config))
    memory = await ShortTermMemory.open(config, store=store)
    original = store._run

    stopped = asyncio.Event()

    async def no_sweeps(ops: list[object]) -> list[object]:
        if any(isinstance(op, SweepPurge) for op in ops):
            stopped.set()
            await asyncio.Event().wait()  # killed here: nothing failed, nothing journaled
        return await original(ops)  # type: ignore[arg-type]

    store._run = no_sweeps  # type: ignore[method-assign]
    await memory.clear_short_term_memory_for_user(ALICE)
    await stopped.wait()
    memory.writer._task.cancel()  # the process stops: no close, nothing more written
    memory.closed = True
    await store.close()
    left = await open_store(config)
    try:
        assert await left.unplanned_purges()  # the first transaction planned one chain only
    finally:
        await left.close()
    async with ShortTermMemory.open(config) as memory:
        # Where Alice has no notes, nothing waits for the plan (the store said where).
        elsewhere = ctx(user=CAROL, channel=90, server=300)
        assert (await memory.run_tool(elsewhere, {"summary": "ELSEWHERE"})).success
        assert memory._reads.deletions.pending, "not pending at the open, or waited for its plan"
        # Right away: each read queues behind a first step of the resumed purge only.
        prompts = await asyncio.gather(
            *(memory.build_context(ctx(user=CAROL, channel=c)) for c in channels)
        )
        for prompt in prompts:
            assert "OLD-NOTES" not in str(prompt)
        results = await asyncio.gather(
            *(
                memory.run_tool(ctx(user=CAROL, channel=c), {"summary": f"NEW-NOTES-{c}"})
                for c in channels
            )
        )
        await memory.flush()
        for channel, result in zip(channels, results, strict=True):
            entry = await memory.get_entry(f"shortterm:server:100:{channel}")
            notes = None if entry is None else entry.summary
            assert notes != f"OLD-NOTES-{channel}"
            if result.success:
                assert notes == f"NEW-NOTES-{channel}", "an acknowledged upgrade was cleared"
        assert await memory.store.unplanned_purges() == []  # type: ignore[attr-defined]


async def _alice_in_bobs_notes(memory: ShortTermMemory, channels: range) -> None:
    """In each channel Alice speaks, then Bob's upgrade writes notes ("OLD-NOTES-<n>") from
    a prompt that showed her words: a purge of Alice clears them."""
    for channel in channels:
        await memory.capture(turn(ctx(user=ALICE, channel=channel), f"ALICE-SAID-{channel}"))
        bob = ctx(user=BOB, channel=channel)
        assert (await memory.run_tool(bob, {"summary": f"OLD-NOTES-{channel}"})).success


async def _wait_until(done: Callable[[], bool], what: str, seconds: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while not done():
        assert loop.time() < deadline, what
        await asyncio.sleep(0.05)


def _held_sweeps(store: FaultyStore, gate: asyncio.Event, held: asyncio.Event) -> None:
    """Hold every step of a purge after its first transaction at ``gate``."""
    original = store._run

    async def run(ops: list[object]) -> list[object]:
        if any(isinstance(op, SweepPurge) for op in ops):
            held.set()
            await gate.wait()
        return await original(ops)  # type: ignore[arg-type]

    store._run = run  # type: ignore[method-assign]


@contextlib.asynccontextmanager
async def _maker_held(
    config: STMConfig, channels: range
) -> AsyncIterator[tuple[ShortTermMemory, FaultyStore, asyncio.Event, asyncio.Event]]:
    """The process that makes a purge: Alice in Bob's notes of ``channels``, written; then
    every step of a purge after its first transaction held until the gate it yields is
    set (``held``, also yielded, is set once a step waits there)."""
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store) as maker:
        await _alice_in_bobs_notes(maker, channels)
        await maker.flush()
        gate, held = asyncio.Event(), asyncio.Event()
        _held_sweeps(store, gate, held)
        yield maker, store, gate, held


async def _carried_out_elsewhere(config: STMConfig) -> None:
    """Another process opens the database and carries out the purge whose maker's steps
    are held, to its end."""
    async with ShortTermMemory.open(config) as other:
        await _wait_until(
            lambda: not other._reads.deletions.pending and not other.writer.sweeping(),
            "the other process did not carry the purge out",
        )
        await other.flush()


async def _notes_left(config: STMConfig, channels: range) -> list[str]:
    """The distilled text each channel's server entry still holds, read from the rows."""
    async with ShortTermMemory.open(config) as reader:
        found = []
        for channel in channels:
            entry = await reader.get_entry(f"shortterm:server:100:{channel}")
            if entry is not None and entry.summary:
                found.append(entry.summary)
        assert await reader.store.unplanned_purges() == []  # type: ignore[attr-defined]
        assert await reader.store.pending_sweeps() == []  # type: ignore[attr-defined]
        return found


async def _purge_then_stop(config: STMConfig, user: int) -> None:
    """Another process purges ``user`` and stops right after the purge's first
    transaction: no close, nothing more written."""
    store = FaultyStore(await open_store(config))
    stopping = await ShortTermMemory.open(config, store=store)
    held = asyncio.Event()
    _held_sweeps(store, asyncio.Event(), held)  # never opened: the process stops there
    await stopping.clear_short_term_memory_for_user(user)
    await held.wait()
    assert stopping.writer._task is not None
    stopping.writer._task.cancel()
    await stopping._background.stop()
    stopping.closed = True
    await store.close()


@contextlib.asynccontextmanager
async def _running_past_a_stopped_purge(
    config: STMConfig, channels: range
) -> AsyncIterator[ShortTermMemory]:
    """A process that runs all along, holding Bob's notes of ``channels`` that Alice's
    words went into, once another process purged Alice and stopped right after the
    purge's first transaction (and the running one read the feed since)."""
    async with ShortTermMemory.open(config) as running:
        await _alice_in_bobs_notes(running, channels)
        await running.flush()
        await _purge_then_stop(config, ALICE)
        await running.follower.catch_up()
        yield running


async def test_turns_wait_once_for_a_plan_that_does_not_come(
    store_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While a purge whose process stopped is not carried out yet, the first turn where
    it may reach waits for its plan in vain; the turns after it do not wait again. None
    shows what it may reach, and an upgrade there is refused at once."""
    for name in _CHUNKS:
        monkeypatch.setattr(chains, name, 1)
    monkeypatch.setattr(memory_module, "ABANDONED_PURGE_SECONDS", 3600.0)
    waits: list[float] = []
    progress = ReadThrough._progress

    async def counted(purge: Any, wait: float, trouble: asyncio.Event) -> None:
        waits.append(wait)
        await progress(purge, wait, trouble)

    monkeypatch.setattr(ReadThrough, "_progress", staticmethod(counted))
    config = STMConfig(database=store_database)
    channels = range(20, 26)
    async with _running_past_a_stopped_purge(config, channels) as running:
        assert running._reads.deletions.pending
        first = await running.build_context(ctx(user=CAROL, channel=20))
        assert "OLD-NOTES" not in str(first)
        assert waits, "the first turn did not wait for the plan"
        waits.clear()
        for channel in channels:
            prompt = await running.build_context(ctx(user=CAROL, channel=channel))
            assert "OLD-NOTES" not in str(prompt)
        result = await running.run_tool(ctx(user=CAROL, channel=21), {"summary": "NEW"})
        assert not result.success
        assert waits == [], "later turns waited again for a plan that was not coming"
        assert running._reads.deletions.pending  # still hidden, not carried out here


async def test_a_purge_whose_process_stopped_is_carried_out_by_a_running_one(
    store_database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A process stops right after a purge's first transaction while another runs: the
    running one carries the purge out once it has been left at two looks in a row, without
    a restart, and says whose it is. Until then nothing it may reach is shown there;
    afterwards it is not pending there (turns no longer wait for its plan) and its rows are
    cleared."""
    for name in _CHUNKS:
        monkeypatch.setattr(chains, name, 1)  # one membership planned per transaction
    monkeypatch.setattr(memory_module, "ABANDONED_PURGE_SECONDS", 0.2)
    config = STMConfig(database=store_database)
    channels = range(20, 26)
    async with _running_past_a_stopped_purge(config, channels) as running:
        for channel in channels:
            assert "OLD-NOTES" not in str(
                await running.build_context(ctx(user=CAROL, channel=channel))
            )
        await _wait_until(
            lambda: not running._reads.deletions.pending, "the purge was never carried out"
        )
        await running.flush()
        for channel in channels:
            assert "OLD-NOTES" not in str(
                await running.build_context(ctx(user=CAROL, channel=channel))
            )
    assert await _notes_left(config, channels) == []
    assert f"carrying out the purge of user {ALICE} everywhere at feed position" in caplog.text


@pytest.mark.parametrize("ranges_readable", [True, False])
async def test_a_purge_carried_out_elsewhere_is_seen_through_by_its_own_process(
    store_database: str, monkeypatch: pytest.MonkeyPatch, ranges_readable: bool
) -> None:
    """A process whose purge's steps cannot run for a while (its store held) is still
    alive when another process carries the purge out: once its steps run again, it learns
    the purge's whole ranges from the store (it told none of them itself), stops holding
    up its turns, and shows none of what the purge cleared. Should the ranges not be
    readable then, what the purge may reach leaves its cache and is read again."""
    for name in _CHUNKS:
        monkeypatch.setattr(chains, name, 1)
    monkeypatch.setattr(memory_module, "ABANDONED_PURGE_SECONDS", 0.2)
    config = STMConfig(database=store_database)
    channels = range(20, 26)
    async with _maker_held(config, channels) as (slow, store, gate, held):
        await slow.clear_short_term_memory_for_user(ALICE)
        await held.wait()
        await _carried_out_elsewhere(config)
        with monkeypatch.context() as patched:
            if not ranges_readable:

                async def unreadable(position: int) -> None:
                    raise StoreError("short-term memory database is locked")

                patched.setattr(store, "purge_ranges", unreadable)
            gate.set()
            await _wait_until(
                lambda: not slow._reads.deletions.pending, "the purge stayed pending where made"
            )
        await slow.flush()
        for channel in channels:
            prompt = await slow.build_context(ctx(user=CAROL, channel=channel))
            assert "OLD-NOTES" not in str(prompt)
            entry = await slow.get_entry(f"shortterm:server:100:{channel}")
            assert entry is None or not entry.summary
    assert await _notes_left(config, channels) == []


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_channel_clear_starts_that_channel_over_and_nothing_else(
    store_database: str, erasure: str
) -> None:
    """``/refresh`` of #general deletes every entry of #general (every scope and persona);
    #random's notes, written from a prompt that showed #general's messages, are #random's
    and stay, under either policy (a purge of the people who spoke reaches them)."""
    config = STMConfig(database=store_database, erasure=erasure)
    async with ShortTermMemory.open(config) as memory:
        alice = ctx(user=ALICE, channel=GENERAL)
        await memory.capture(turn(alice, "GENERAL-WORDS"))
        assert (await memory.run_tool(alice, {"summary": "GENERAL-NOTES"})).success
        bob = ctx(user=BOB, channel=RANDOM)
        await memory.capture(turn(bob, "hello"))
        assert "GENERAL-WORDS" in str(await memory.build_context(bob))
        assert (await memory.run_tool(bob, {"summary": "COPIED GENERAL-WORDS"})).success
        await memory.clear_short_term_memory_for_channel(GENERAL)
        await memory.flush()
        for key in (f"shortterm:server:100:{GENERAL}", f"shortterm:user:{ALICE}:{GENERAL}"):
            assert await memory.get_entry(key) is None
        kept = await memory.get_entry(f"shortterm:server:100:{RANDOM}")
        assert kept is not None and kept.summary == "COPIED GENERAL-WORDS"
        # The words' author can still erase the copy.
        await memory.purge(ALICE)
        gone = await memory.get_entry(f"shortterm:server:100:{RANDOM}")
        assert gone is None or gone.summary is None


@pytest.mark.parametrize("reach", ["told in pages", "told at once"])
async def test_a_purge_carried_out_elsewhere_answers_with_all_it_cleared(
    store_database: str, monkeypatch: pytest.MonkeyPatch, reach: str
) -> None:
    """Whoever asked for a purge is told what it cleared, all of it, even when another
    process carried out the steps its own process could not run meanwhile: the counts
    are the purge's, kept with it in the store, not this process's share of the work.
    Of wide reach, its ranges are told a page at a time (the other process tells those
    left); else its first transaction tells them all and clears a chunk of its rows."""
    channels = range(20, 26)
    if reach == "told in pages":
        for name in _CHUNKS:
            monkeypatch.setattr(chains, name, 1)
    else:  # six chains and twelve rows: the first transaction clears six
        monkeypatch.setattr(chains, "SWEEP_CHUNK", len(channels))
    monkeypatch.setattr(memory_module, "ABANDONED_PURGE_SECONDS", 0.2)
    config = STMConfig(database=store_database)
    async with _maker_held(config, channels) as (slow, _, gate, held):
        before = await slow.preview_purge(ALICE)
        assert before.shared_by_server == {100: 2 * len(channels)}  # Bob's and the server's
        asked = asyncio.create_task(slow.purge(ALICE))
        await held.wait()
        await _carried_out_elsewhere(config)
        gate.set()
        after = await asked
    assert (after.own, after.shared) == (before.own, before.shared)
    assert after.shared_by_server == before.shared_by_server
    assert after.distilled_by_server == before.distilled_by_server
    watched = slow.recent_purges(100)
    assert (watched.purges, watched.shared) == (1, before.shared_by_server[100])
    assert await _notes_left(config, channels) == []


async def test_a_purge_finished_elsewhere_and_forgotten_says_its_count_is_partial(
    store_database: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Should another process finish the purge and the feed forget it (pruned past it)
    before the process that made it runs its steps again, the store no longer records what
    the purge cleared: the answer counts what this process cleared, and a warning says
    the count is partial."""
    for name in _CHUNKS:
        monkeypatch.setattr(chains, name, 1)
    config = STMConfig(database=store_database)
    channels = range(20, 24)
    async with _maker_held(config, channels) as (slow, _, gate, held):
        before = await slow.preview_purge(ALICE)
        asked = asyncio.create_task(slow.purge(ALICE))
        await held.wait()
        other = await open_store(config)
        try:
            while pending := await other.pending_sweeps():
                await other.run([SweepPurge(pending[0])])
            assert await other.prune_changes(older_than=slow.clock() + 3600) > 0
        finally:
            await other.close()
        gate.set()
        after = await asked
    assert after.own == before.own and after.shared < before.shared
    assert "the database no longer records it" in caplog.text
    assert await _notes_left(config, channels) == []


def test_whoever_asked_hears_all_a_purge_did_however_its_steps_were_shared(
    store_kind: str,
    example_database: Callable[[], contextlib.AbstractContextManager[str]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Any split of a purge's steps between the process that asked for it and another
    (which carries out steps while the first cannot run them), told in pages or at once,
    everywhere or in one server, under either policy, with notes in a DM among those it
    reaches: the answer says what the preview said, all of it. (Fewer examples on
    PostgreSQL, where each needs a schema of its own.)"""

    @replayable(30 if store_kind == "sqlite" else 8)
    @given(
        data=st.data(),
        paged=st.booleans(),
        server=st.sampled_from([None, 100]),
        erasure=st.sampled_from(["complete", "direct"]),
    )
    def answered_in_full(
        data: st.DataObject, paged: bool, server: int | None, erasure: str
    ) -> None:
        with example_database() as database, monkeypatch.context() as patched:
            for name in _CHUNKS if paged else ("SWEEP_CHUNK",):
                patched.setattr(chains, name, 1 if paged else 4)
            asyncio.run(_steps_shared(database, erasure, server, data))

    answered_in_full()


async def _steps_shared(
    database: str, erasure: str, server: int | None, data: st.DataObject
) -> None:
    channels = range(20, 24)
    config = STMConfig(database=database, erasure=erasure)
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store) as asker:
        await _alice_in_bobs_notes(asker, channels)
        # A group DM whose turn carries Alice's message before Bob's: Bob's notes there
        # are written from her words, in no server.
        dm = ctx(user=BOB, channel=900, server=None)
        alice = DialogueMessage(
            role="user", content="ALICE-IN-DM", author_id=ALICE, speaker_name="alice"
        )
        said = turn(dm, "bob in private").messages
        await asker.capture(GenerationFinished(context=dm, messages=[alice, *said]))
        assert (await asker.run_tool(dm, {"summary": "DM-NOTES"})).success
        await asker.flush()
        before = await asker.preview_purge(ALICE, server)
        held, free, step = asyncio.Event(), asyncio.Event(), asyncio.Semaphore(0)
        original = store._run

        async def run(ops: list[object]) -> list[object]:
            if not free.is_set() and any(isinstance(op, SweepPurge) for op in ops):
                held.set()
                await step.acquire()
            return await original(ops)  # type: ignore[arg-type]

        store._run = run  # type: ignore[method-assign]
        asked = asyncio.create_task(asker.purge(ALICE, server))
        other = await open_store(config)

        async def at_next_step() -> None:
            waiting = asyncio.create_task(held.wait())
            await asyncio.wait([waiting, asked], return_when=asyncio.FIRST_COMPLETED)
            waiting.cancel()

        try:
            await at_next_step()
            while not asked.done() and (pending := await other.pending_sweeps()):
                if data.draw(st.booleans(), label="the asker runs the next step"):
                    held.clear()
                    step.release()
                    await at_next_step()
                else:
                    await other.run([SweepPurge(pending[0])])
        finally:
            free.set()
            step.release()
            await other.close()
        after = await asked
    assert (after.own, after.shared) == (before.own, before.shared)
    assert after.shared_by_server == before.shared_by_server
    assert after.distilled_by_server == before.distilled_by_server
    assert after.distilled_at_least == before.distilled_at_least
    # The admins see it: the purge watch counted all it cleared in the server.
    watched = asker.recent_purges(100)
    assert (watched.purges, watched.shared) == (1, before.shared_by_server[100])


# Where a property example's entries are: two servers' channels and two DMs.
_PLACES = ((100, 10), (100, 11), (200, 20), (200, 21), (None, 900), (None, 901))
# "written": captured, then written; "unwritten": captured, waiting for the write-behind;
# "both": written, then captured again (its row is behind what this process holds).
_STATES = ("written", "unwritten", "both")


def test_a_preview_counts_what_the_purge_then_erases(
    store_kind: str, example_database: Callable[[], contextlib.AbstractContextManager[str]]
) -> None:
    """Any mix of entries written, waiting for the write-behind, or both, of the user and
    of someone else, with entries evicted from a small cache or not, in a server or
    everywhere, the write-behind due while the confirmation waits or not: the preview
    counts every own entry, as the purge that follows counts what it erased. (Fewer
    examples on PostgreSQL, where each needs a schema of its own.)"""

    @replayable(40 if store_kind == "sqlite" else 10)
    @given(
        held=st.dictionaries(
            st.tuples(st.sampled_from([ALICE, BOB]), st.sampled_from(_PLACES)),
            st.sampled_from(_STATES),
            max_size=8,
        ),
        server=st.sampled_from([None, 100]),
        small_cache=st.booleans(),
        written_meanwhile=st.booleans(),
    )
    def agree(
        held: dict[tuple[int, tuple[int | None, int]], str],
        server: int | None,
        small_cache: bool,
        written_meanwhile: bool,
    ) -> None:
        with example_database() as database:
            config = STMConfig(
                database=database,
                write_behind_seconds=3600,  # written only when the test says
                cache_max_keys=2 if small_cache else 10_000,
            )
            asyncio.run(_preview_then_purge(config, held, server, written_meanwhile))

    agree()


async def _preview_then_purge(
    config: STMConfig,
    held: dict[tuple[int, tuple[int | None, int]], str],
    server: int | None,
    written_meanwhile: bool,
) -> None:
    async with ShortTermMemory.open(config) as memory:
        for (user, (where, channel)), state in held.items():
            if state != "unwritten":
                await memory.capture(turn(ctx(user, channel, where), "said before"))
        await memory.flush()
        for (user, (where, channel)), state in held.items():
            if state != "written":
                await memory.capture(turn(ctx(user, channel, where), "said just now"))
        own = sum(
            user == ALICE and (server is None or where == server) for user, (where, _) in held
        )
        preview = await memory.preview_purge(ALICE, server)
        if written_meanwhile:
            await memory.flush()  # the write-behind is due while the buttons wait
        done = await memory.purge(ALICE, server)
    assert preview.own == own, (preview, held)
    assert (done.own, done.shared) == (preview.own, preview.shared)
    assert done.shared_by_server == preview.shared_by_server


async def test_a_preview_counts_entries_whose_write_is_in_flight(
    store_database: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write-behind took the user's entry and its commit has not landed yet: the
    preview waits for it rather than reading the store beside it, and counts the entry."""
    config = STMConfig(database=store_database, write_behind_seconds=3600)
    store = FaultyStore(await open_store(config))
    async with ShortTermMemory.open(config, store=store) as memory:
        await memory.capture(turn(ctx(ALICE, GENERAL), "said just now"))
        store.hold()
        memory.writer.queue_dirty()  # the write-behind is due
        await store.holding()
        # The commit is let through once the preview has read beside it, or has queued
        # its read behind it.
        aside, submit = store.preview_aside, memory.writer.submit

        async def read_aside(*args: Any) -> Any:
            try:
                return await aside(*args)
            finally:
                store.release()

        def queued(*args: Any, **kwargs: Any) -> Any:
            future = submit(*args, **kwargs)
            store.release()
            return future

        monkeypatch.setattr(store, "preview_aside", read_aside)
        monkeypatch.setattr(memory.writer, "submit", queued)
        try:
            preview = await memory.preview_purge(ALICE)
        finally:
            store.release()  # a failure here must not leave the commit held at close
            monkeypatch.undo()
        done = await memory.purge(ALICE)
    assert (preview.own, done.own) == (1, 1)
