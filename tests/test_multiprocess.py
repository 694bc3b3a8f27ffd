"""Several OS processes on one database: what one deletes or replaces, every other stops
showing within STM_COHERENCE_SECONDS (crude messages only it held included).

Each process is ``tests/bot_process.py``, driven over a pipe (``tests/bot_client.py``).
Runs on SQLite and on PostgreSQL (skipped with how-to-run instructions when no server is reachable).
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from pathlib import Path
from typing import Any

import pytest
from bot_client import BotProcess
from helpers import scaled, seed_for

from stm import STMConfig
from stm.store import open_store
from stm.store._base import LoadRows

BOTH_STORES = True
pytestmark = pytest.mark.process
COHERENCE = 1.0
SERVER = 100


class Worker(BotProcess):
    """One bot process on the shared database, following the feed within ``coherence``."""

    def __init__(
        self,
        database: str,
        cwd: Path,
        coherence: float = COHERENCE,
        test_env: dict[str, str] | None = None,
        **settings: object,
    ) -> None:
        super().__init__(database, cwd, test_env, coherence_seconds=coherence, **settings)


@pytest.fixture
def workers(store_database: str, tmp_path: Path) -> Any:
    """Start worker processes on the test's database; all are stopped at the end."""
    started: list[Worker] = []

    def start(coherence: float = COHERENCE, **settings: object) -> Worker:
        worker = Worker(store_database, tmp_path, coherence, **settings)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        try:
            worker.close()
        except Exception:
            worker.proc.kill()
            worker.proc.wait()


async def stored_rows(database: str, *keys: str) -> dict[str, Any]:
    store = await open_store(STMConfig(database=database))
    try:
        (rows,) = await store.run([LoadRows(tuple(keys), 0.0, 0.0)])
    finally:
        await store.close()
    return {row.key: row for row in rows}  # type: ignore[attr-defined]


async def members(database: str, pin: Any) -> list[int]:
    """Whose words the prompts of ``pin``'s chain showed directly, up to its version."""
    store = await open_store(STMConfig(database=database))
    try:
        return list(await store.members(pin))  # type: ignore[attr-defined]
    finally:
        await store.close()


def key(channel: int) -> str:
    return f"shortterm:server:{SERVER}:{channel}"


def turn(user: int, channel: int) -> dict[str, Any]:
    return {"user": user, "channel": channel, "server": SERVER}


def propagation(watcher: Worker, actor: Worker, marker: str, **action: Any) -> float:
    """Seconds from the moment ``actor``'s change committed until ``watcher`` stopped
    showing ``marker``; fails past the coherence bound (counted from before the change)."""
    watcher.send(op="wait_gone", marker=marker, timeout=10.0, **turn(action.pop("looker"), 10))
    done = actor.call(**action)
    gone = watcher.read()["at"]
    assert gone is not None, f"{marker} was still shown 10 s after the change"
    assert gone - done["started"] < COHERENCE + 0.5  # the bound, with a margin for the poll
    return float(max(0.0, gone - done["committed"]))


async def test_a_purge_reaches_every_process_and_no_upgrade_brings_it_back(
    workers: Any, store_database: str
) -> None:
    """After A purged two users, B and C stop showing their summary and messages (crude
    messages only B held included), and B's next upgrade records neither as shown."""
    a, b, c = workers(), workers(), workers()
    b.call(op="capture", text="U1-SECRET", **turn(1, 10))
    b.call(op="capture", text="U2-SECRET", **turn(2, 10))
    assert b.call(op="upgrade", summary="SUMMARY-OF-U1-U2", **turn(3, 10))["success"]
    c.call(op="capture", text="U1-ON-C", **turn(1, 10))
    assert c.call(op="wait_shown", marker="SUMMARY-OF-U1-U2", **turn(3, 10))["at"] is not None
    a.call(op="purge", user=1, server=SERVER)
    a.call(op="purge", user=2, server=None)
    for worker, marker in ((b, "U1-SECRET"), (b, "U2-SECRET"), (b, "SUMMARY-OF-U1-U2")):
        assert worker.call(op="wait_gone", marker=marker, **turn(3, 10))["at"] is not None
    for marker in ("U1-ON-C", "SUMMARY-OF-U1-U2"):
        assert c.call(op="wait_gone", marker=marker, **turn(3, 10))["at"] is not None
    assert b.call(op="upgrade", summary="AFTER", **turn(3, 10))["success"]
    b.call(op="flush")
    row = (await stored_rows(store_database, key(10)))[key(10)]
    assert row.summary == "AFTER"
    assert row.pin is not None
    assert not {1, 2} & set(await members(store_database, row.pin))


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_each_policy_reaches_across_processes(
    workers: Any, store_database: str, erasure: str
) -> None:
    """#general's notes hold Alice's words (written in B); C writes #random's notes from a
    prompt that showed #general's notes. A purge of Alice in A: every process stops showing
    #general's notes, and #random's under ``complete`` (kept under ``direct``, in every
    process and in the row), within the bound."""
    a, b, c = (workers(erasure=erasure, render_mode="supersede") for _ in range(3))
    b.call(op="capture", text="ALICE-SAID", **turn(1, 10))
    assert b.call(op="upgrade", summary="GENERAL-NOTES", **turn(1, 10))["success"]
    b.call(op="flush")
    c.call(op="capture", text="bob here", **turn(2, 11))
    assert c.call(op="wait_shown", marker="GENERAL-NOTES", **turn(2, 11))["at"] is not None
    assert c.call(op="upgrade", summary="RANDOM-NOTES", **turn(2, 11))["success"]
    c.call(op="flush")
    assert b.call(op="wait_shown", marker="RANDOM-NOTES", **turn(3, 12))["at"] is not None
    a.call(op="purge", user=1, server=None)
    for worker in (a, b, c):
        assert worker.call(op="wait_gone", marker="GENERAL-NOTES", **turn(3, 12))["at"]
    if erasure == "complete":
        for worker in (a, b, c):
            assert worker.call(op="wait_gone", marker="RANDOM-NOTES", **turn(3, 12))["at"]
    for worker in (a, b, c):
        worker.call(op="flush")
        worker.call(op="caught_up")
    rows = await stored_rows(store_database, key(10), key(11))
    assert key(10) not in rows or not rows[key(10)].summary
    random_notes = rows[key(11)].summary if key(11) in rows else None
    assert random_notes == (None if erasure == "complete" else "RANDOM-NOTES")
    for worker in (a, b, c):
        shown = worker.call(op="shown", **turn(3, 12))["text"]
        assert ("RANDOM-NOTES" in shown) == (erasure == "direct"), shown


async def test_a_purge_whose_process_died_is_carried_out_by_a_running_one(
    store_database: str, tmp_path: Path
) -> None:
    """A dies (SIGKILL's effect: no close, nothing more written) right after its purge's
    first transaction, with the purge far from done; B, running all along, stops showing
    what it may reach within the bound, carries it out without a restart, and the rows
    it reaches are cleared in the database."""
    hooks = {"BOT_PROCESS_ABANDONED_SECONDS": "0.3", "BOT_PROCESS_CHUNKS": "1"}
    b = Worker(store_database, tmp_path, test_env=hooks)
    a = Worker(store_database, tmp_path, test_env=hooks)
    try:
        channels = range(20, 26)
        for channel in channels:
            b.call(op="capture", text=f"U1-SAID-{channel}", **turn(1, channel))
            assert b.call(op="upgrade", summary=f"NOTES-{channel}", **turn(2, channel))["success"]
        b.call(op="flush")
        a.send(op="purge_then_die", user=1, server=SERVER)
        assert a.proc.wait(timeout=30) == 9
        for channel in channels:
            gone = b.call(
                op="wait_gone", marker=f"NOTES-{channel}", timeout=10.0, **turn(3, channel)
            )
            assert gone["at"] is not None, f"NOTES-{channel} still shown"
        store = await open_store(STMConfig(database=store_database))
        try:
            deadline = time.monotonic() + 30
            while await store.pending_sweeps():  # type: ignore[attr-defined]
                assert time.monotonic() < deadline, "the purge was never carried out"
                await asyncio.sleep(0.1)
        finally:
            await store.close()
        b.call(op="flush")
        rows = await stored_rows(store_database, *(key(c) for c in channels))
        assert [r.summary for r in rows.values() if r.summary] == []
    finally:
        b.close()
        if a.proc.poll() is None:
            a.proc.kill()
            a.proc.wait()
        a.close()  # its pipes


def test_a_channel_clear_reaches_every_process(workers: Any) -> None:
    """After A cleared a channel, B stops showing it, crude messages only B held included."""
    a, b = workers(), workers()
    b.call(op="capture", text="ONLY-IN-B", **turn(1, 10))
    b.call(op="upgrade", summary="B-SUMMARY", **turn(1, 10))
    b.call(op="capture", text="OTHER-CHANNEL", **turn(1, 11))
    a.call(op="clear", channel=10)
    assert b.call(op="wait_gone", marker="ONLY-IN-B", **turn(1, 10))["at"] is not None
    shown = b.call(op="shown", **turn(1, 10))["text"]
    assert "B-SUMMARY" not in shown and "ONLY-IN-B" not in shown
    assert "OTHER-CHANNEL" in b.call(op="shown", **turn(1, 11))["text"]


def test_an_upgrade_elsewhere_replaces_the_summary_shown(workers: Any) -> None:
    """A process that holds a summary shows the newer one another process wrote, and
    never the old one again (it used to serve it forever, then overwrite the new one)."""
    a, b = workers(), workers()
    a.call(op="capture", text="hello", **turn(1, 10))
    assert a.call(op="upgrade", summary="OLD-SUMMARY", **turn(1, 10))["success"]
    assert b.call(op="wait_shown", marker="OLD-SUMMARY", **turn(2, 10))["at"] is not None
    b.call(op="capture", text="B-WORDS", **turn(2, 10))
    assert a.call(op="upgrade", summary="NEW-SUMMARY", **turn(1, 10))["success"]
    assert b.call(op="wait_shown", marker="NEW-SUMMARY", **turn(2, 10))["at"] is not None
    shown = b.call(op="shown", **turn(2, 10))["text"]
    assert "OLD-SUMMARY" not in shown and "B-WORDS" in shown


def test_a_process_that_opened_an_empty_database_reads_rows_again(workers: Any) -> None:
    """The first process (it created the database) sees rows another process wrote."""
    first = workers()
    second = workers()
    second.call(op="capture", text="hi", **turn(1, 10))
    assert second.call(op="upgrade", summary="FROM-SECOND", **turn(1, 10))["success"]
    assert first.call(op="wait_shown", marker="FROM-SECOND", **turn(2, 10))["at"] is not None


def test_settings_and_opt_outs_reach_every_process(workers: Any) -> None:
    """An opt-out made in one process is honoured by the other."""
    a, b = workers(), workers()
    a.call(op="opt_out", user=7, opted_out=True)
    b.call(op="caught_up")
    for _ in range(200):
        if b.call(op="opted_out", user=7)["value"]:
            break
    assert b.call(op="opted_out", user=7)["value"]


@pytest.mark.parametrize("fault", ["none", "lost_wakeups", "dropped_listener", "restarted"])
def test_purge_propagation_stays_within_the_bound(
    workers: Any, store_kind: str, fault: str
) -> None:
    """Purges in A are gone from B within the bound: measured over many purges, also when
    every wake-up is lost, the listening connection dies, or B was restarted."""
    a, b = workers(), workers()
    if fault == "dropped_listener" and store_kind != "postgres":
        pytest.skip("only PostgreSQL has a listening connection")
    if fault == "restarted":
        b.close()
        b = workers()
    if fault == "lost_wakeups":
        b.call(op="lose_wakeups")
    seconds = []
    for round_ in range(scaled(12, 60)):
        if fault == "dropped_listener":
            b.call(op="drop_listener")
        user = 1000 + round_
        marker = f"M{round_}-X"
        b.call(op="capture", text=marker, **turn(user, 10))
        seconds.append(propagation(b, a, marker, op="purge", user=user, server=SERVER, looker=user))
    median, worst = statistics.median(seconds), max(seconds)
    print(
        f"\npurge propagation ({store_kind}, {fault}): median {median * 1000:.0f} ms, "
        f"worst {worst * 1000:.0f} ms over {len(seconds)} purges (bound {COHERENCE:g} s)"
    )
    assert b.call(op="stats")["dropped_caches"] == 0


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_randomized_processes_never_bring_deleted_memory_back(
    workers: Any, store_database: str, erasure: str
) -> None:
    """Random captures, upgrades, purges and clears in three processes, under each erasure
    policy: nothing deleted comes back in any process, and at the end every process's view
    matches the rows."""
    rng = random.Random(seed_for("multiprocess-race"))
    procs = [workers(erasure=erasure) for _ in range(3)]
    users, channels = [1, 2, 3, 4], [10, 11, 12]
    deleted: list[tuple[str, float]] = []  # marker, and when its delete was committed
    written: dict[str, tuple[int, int]] = {}  # marker -> (user, channel)
    for step in range(scaled(80, 400)):
        proc = rng.choice(procs)
        user, channel = rng.choice(users), rng.choice(channels)
        roll = rng.random()
        if roll < 0.5:
            marker = f"W{step}-X"
            proc.call(op="capture", text=marker, **turn(user, channel))
            written[marker] = (user, channel)
        elif roll < 0.75:
            marker = f"S{step}-X"
            if proc.call(op="upgrade", summary=marker, **turn(user, channel))["success"]:
                written[marker] = (user, channel)
        elif roll < 0.9:
            done = proc.call(op="purge", user=user, server=SERVER)
            for marker, (who, _) in list(written.items()):
                if who == user and marker.startswith("W"):
                    deleted.append((marker, done["committed"]))
                    del written[marker]
        else:
            done = proc.call(op="clear", channel=channel)
            for marker, (_, where) in list(written.items()):
                if where == channel:
                    deleted.append((marker, done["committed"]))
                    del written[marker]
    for proc in procs:
        proc.call(op="flush")
    for proc in procs:
        proc.call(op="caught_up")
    rows = await stored_rows(store_database, *(key(c) for c in channels))
    for proc in procs:
        held = {e["key"]: e for e in proc.call(op="entries")["entries"]}
        for k, entry in held.items():
            if entry["hydrated"] and k in rows:
                assert entry["summary"] == rows[k].summary, k
    gone = [marker for marker, _ in deleted]
    for proc in procs:
        for user in users:
            for channel in channels:
                shown = proc.call(op="shown", **turn(user, channel))["text"]
                assert not [m for m in gone if m in shown], (user, channel)
    assert gone, "the run deleted nothing"


async def test_a_purge_leaves_no_trace_while_other_processes_have_the_file_open(
    workers: Any, open_memory: Any, db_path: Path
) -> None:
    """On SQLite, purge and flush() in one process erase the user's text and every key
    that encrypted it from the file, its WAL and shared memory, while two other
    processes follow the same file (and then stop showing it too)."""
    from shredding import KeyWitness, file_bytes

    from stm import DialogueMessage, GenerationFinished, TurnContext

    others = [workers(), workers()]
    memory = await open_memory()
    witness = KeyWitness(db_path)
    for version in range(12):
        c = TurnContext(user_id=1, channel_id=10, server_id=SERVER)
        await memory.capture(
            GenerationFinished(
                context=c,
                messages=[DialogueMessage(role="user", content=f"hi {version}", author_id=1)],
            )
        )
        result = await memory.run_tool(c, {"summary": f"NEEDLE-U1-V{version:02d} " + "x" * 3000})
        assert result.success, result.message
        await memory.flush()
        witness.look()
    for other in others:
        assert other.call(op="wait_shown", marker="NEEDLE-U1-V11", **turn(2, 10))["at"]
    await memory.clear_short_term_memory_for_user(1, server_id=SERVER)
    await memory.flush()
    assert b"NEEDLE-U1" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows()) == 0
    for other in others:
        assert other.call(op="wait_gone", marker="NEEDLE-U1", **turn(2, 10))["at"] is not None
