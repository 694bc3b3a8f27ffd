"""Crash safety: SIGKILL a writer process at random moments, reopen, check what it promised.

After every kill the database must pass ``PRAGMA integrity_check``; every
summary the writer acknowledged must be there unless a later acknowledged
upgrade or a later delete replaced it; nothing a completed delete removed may
be there unless written again after it; and nothing refused may be there.
Only the operation in flight at the kill may have gone either way.

STM_STRESS=1 runs hundreds of cycles; STM_SEED replays one sequence.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from helpers import scaled, seed_for

from stm import ShortTermMemory, STMConfig
from stm.store._shred import readable

WRITER = Path(__file__).with_name("crash_writer.py")
ROOT = WRITER.parent.parent
pytestmark = pytest.mark.process


@dataclass
class Row:
    summary: str
    contributors: set[int]
    server: int | None


Model = dict[str, Row]
# A row's key, scope, user id, server id and channel id.
Identity = tuple[str, str, int | None, int | None, int]


@dataclass
class History:
    """Everything the writers logged, over all cycles, in order."""

    events: list[dict[str, Any]] = field(default_factory=list)

    def last_write(self, key: str) -> int:
        for i in range(len(self.events) - 1, -1, -1):
            event = self.events[i]
            if event["e"] in ("capture", "attempt") and key in event["keys"]:
                return i
        return -1

    def last_completed_delete(self, identity: Identity) -> int:
        _, scope, user, server, channel = identity
        for i in range(len(self.events) - 1, -1, -1):
            event = self.events[i]
            if event["e"] == "cleared" and event["channel"] == channel:
                return i
            if (
                event["e"] == "purged"
                and scope == "user"
                and user == event["user"]
                and (event["server"] is None or event["server"] == server)
            ):
                return i
        return -1


def read_log(path: Path, start: int) -> list[dict[str, Any]]:
    """The events logged from byte ``start`` on (each cycle reads only its own: the log of
    a fast writer grows by thousands of lines a cycle)."""
    with path.open("rb") as f:
        f.seek(start)
        lines = f.read().decode().splitlines()
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            # Only the very last line can be torn by the kill.
            assert line is lines[-1], f"torn line in the middle of the log: {line!r}"
    return events


def apply_event(model: Model, event: dict[str, Any], attempt: dict[str, Any] | None) -> None:
    kind = event["e"]
    if kind == "ack":
        assert attempt is not None and attempt["text"] == event["text"]
        for key, row in event["rows"].items():
            model[key] = Row(event["text"], set(row["contributors"]), row["server"])
    elif kind in ("clear", "cleared"):
        for key in [k for k in model if int(k.split(":")[3]) == event["channel"]]:
            del model[key]
    elif kind in ("purge", "purged"):
        user, server = event["user"], event["server"]
        began = tuple(event["at"]) if "at" in event else None
        for key, row in list(model.items()):
            if server is not None and row.server != server:
                continue
            if began is not None and written(row) >= began:
                continue  # written after the purge began (a purge a kill left, resumed)
            own = key.startswith(f"shortterm:user:{user}:")
            if own or user in row.contributors:
                del model[key]


def written(row: Row) -> tuple[int, int]:
    """When in the run the row's summary was written: the writer's seed (which grows with
    each cycle) and its operation's number, as the summary's text says."""
    _, seed, n = row.summary.rsplit("-", 2)
    return int(seed), int(n)


# Purges the database still holds as pending: the first transaction committed, not every
# later step. The next process to open the database resumes them (``pending_sweeps``).
PENDING_PURGES = (
    "SELECT user_id, server_id, position FROM stm_purges p WHERE p.planned = 0 OR EXISTS "
    "(SELECT 1 FROM stm_purge_ranges r WHERE r.position = p.position AND r.done IN (0, 2)) "
    "ORDER BY p.position"
)


def _copy(model: Model) -> Model:
    return {k: Row(r.summary, set(r.contributors), r.server) for k, r in model.items()}


def state_bounds(
    baseline: Model, events: list[dict[str, Any]], carried: list[dict[str, Any]]
) -> list[tuple[Model, Model]]:
    """The states the database may be in, as (most, least) pairs: every completed
    operation applied; the one in flight at the kill applied or not, and, a purge, applied
    in part too (it runs in several transactions); purges an earlier kill left pending
    (``carried``) applied in any part (a resumed purge clears only versions written before
    it began, so it applies before the events). A state is allowed when it lies between the
    two of a pair: every row it holds is in the first, every row of the second in it."""
    most, least = _copy(baseline), _copy(baseline)
    for purge in carried:
        apply_event(least, purge, None)
    pending: dict[str, Any] | None = None
    for event in events:
        kind = event["e"]
        if kind in ("attempt", "clear", "purge"):
            pending = event
        elif kind in ("ack", "cleared", "purged"):
            apply_event(most, event, pending)
            apply_event(least, event, pending)
            pending = None
        elif kind == "refused":
            pending = None
    if pending is None:
        return [(most, least)]
    if pending["e"] == "purge":
        in_part = _copy(least)
        apply_event(in_part, pending, None)
        return [(most, in_part)]
    bounds = [(most, least)]
    applied_most, applied_least = _copy(most), _copy(least)
    for applied in (applied_most, applied_least):
        if pending["e"] == "attempt":
            for key in pending["keys"]:
                old = applied.get(key)
                server = int(key.split(":")[2]) if key.startswith("shortterm:server:") else None
                applied[key] = Row(pending["text"], set(), server if old is None else old.server)
        else:
            apply_event(applied, pending, None)
    bounds.append((applied_most, applied_least))
    return bounds


def expected_states(baseline: Model, events: list[dict[str, Any]]) -> list[Model]:
    """The states the database may be in when nothing is left pending from an earlier kill:
    all completed operations applied, and the one in flight at the kill either applied or
    not (the two ends of ``state_bounds``, which then name whole states)."""
    states: list[Model] = []
    for most, least in state_bounds(baseline, events, []):
        states += [m for m in (most, least) if all(summaries(m) != summaries(s) for s in states)]
    return states


def within(actual: Model, most: Model, least: Model) -> bool:
    """Every row ``actual`` holds is in ``most`` with its summary, and every row of
    ``least`` is in ``actual``."""
    held, upper, lower = summaries(actual), summaries(most), summaries(least)
    return all(upper.get(k) == v for k, v in held.items()) and all(
        held.get(k) == v for k, v in lower.items()
    )


async def _open_and_close(database: str) -> None:
    memory = await ShortTermMemory.open(STMConfig(database=database))
    await memory.close()


def check_cycle(
    actual: Model,
    identities: list[Identity],
    baseline: Model,
    events: list[dict[str, Any]],
    carried: list[dict[str, Any]],
    pending: list[dict[str, Any]],
    history: History,
    where: str,
) -> list[dict[str, Any]]:
    """Check the database's state after a kill (``actual``, ``identities``) against the
    writer's log of this cycle (``events``), what the last cycle left (``baseline``, and
    the purges it left pending, ``carried``) and what the database now holds as pending
    (``pending``, returned to carry into the next cycle, each with where it began)."""
    in_flight = next((e for e in reversed(events) if e["e"] != "capture"), None)
    began = {purge["position"]: purge["at"] for purge in carried}
    for purge in pending:
        if purge["position"] not in began:
            # Pending and not carried: the purge in flight at this kill, whose first
            # transaction committed.
            assert in_flight is not None and in_flight["e"] == "purge", where
            assert (purge["user"], purge["server"]) == (in_flight["user"], in_flight["server"])
            began[purge["position"]] = in_flight["at"]
        purge["at"] = began[purge["position"]]
    if not carried and (in_flight is None or in_flight["e"] != "purge"):
        allowed = expected_states(baseline, events)  # nothing can be in part
        assert summaries(actual) in [summaries(m) for m in allowed], where
    bounds = state_bounds(baseline, events, carried)
    assert any(within(actual, most, least) for most, least in bounds), where
    if not pending:
        # Every purge an earlier kill left pending has finished, and the one in flight, if
        # a purge, was applied whole or not at all.
        finished = expected_states(_with_purges(baseline, carried), events)
        assert summaries(actual) in [summaries(m) for m in finished], (
            f"a purge in part, not pending {where}"
        )
    for identity in identities:
        deleted_at = history.last_completed_delete(identity)
        assert history.last_write(identity[0]) > deleted_at, f"{identity[0]} came back {where}"
    return pending


def _with_purges(baseline: Model, purges: list[dict[str, Any]]) -> Model:
    """``baseline`` with ``purges`` applied whole, in order."""
    state = _copy(baseline)
    for purge in purges:
        apply_event(state, purge, None)
    return state


def check_finished(final: Model, baseline: Model, carried: list[dict[str, Any]]) -> None:
    """After a last open that was not killed: every purge the kills left pending applied."""
    finished = _with_purges(baseline, carried)
    assert summaries(final) == summaries(finished), f"pending purges {carried} not finished"


def pending_purges(db_path: Path) -> list[dict[str, Any]]:
    """The purges the database holds as pending, as the writer logs a purge."""
    with contextlib.closing(sqlite3.connect(str(db_path))) as db:
        rows = db.execute(PENDING_PURGES).fetchall()
    return [purge_of(*row) for row in rows]


def purge_of(user: int, server: int | None, position: int) -> dict[str, Any]:
    """A purge the database holds as pending, as the writer logs a purge (its "at" is
    known once it is matched with the purge that began it, in ``check_cycle``)."""
    return {"e": "purge", "user": user, "server": server, "position": position}


def database_state(db_path: Path) -> tuple[Model, list[Identity]]:
    with contextlib.closing(sqlite3.connect(str(db_path))) as db:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert db.execute("PRAGMA foreign_key_check").fetchall() == []
        rows = db.execute(
            f"SELECT id, key, scope, user_id, server_id, channel_id, summary FROM {readable(db)}"
        ).fetchall()
        contributors: dict[int, set[int]] = {}
        for user, memory_id in db.execute(
            "SELECT c.member, m.id FROM short_term_memories m JOIN stm_chain_members c "
            "ON c.chain_id = m.chain_id AND c.first <= m.chain_version"
        ):
            contributors.setdefault(memory_id, set()).add(user)
    model = {
        key: Row(summary, contributors.get(rid, set()), server)
        for rid, key, _, _, server, _, summary in rows
        if summary is not None
    }
    identities = [
        (key, scope, user, server, channel) for _, key, scope, user, server, channel, _ in rows
    ]
    return model, identities


def summaries(model: Model) -> dict[str, str]:
    return {key: row.summary for key, row in model.items()}


def wait_for_start(log_path: Path, start: int, proc: subprocess.Popen[bytes]) -> None:
    """Block until the writer logged that it is open (bounded, never asserted on time)."""
    for _ in range(3000):
        if proc.poll() is not None:
            raise AssertionError(f"the writer exited early: {proc.stderr.read()!r}")  # type: ignore[union-attr]
        if log_path.exists() and any(e["e"] == "start" for e in read_log(log_path, start)):
            return
        time.sleep(0.01)
    raise AssertionError("the writer never started")


@pytest.mark.slow
def test_sigkill_at_random_moments_keeps_every_promise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kill, reopen, check; many times over one database."""
    cycles = scaled(24, 300)
    seed = seed_for("crash")
    rng = random.Random(seed)
    db_path, log_path = tmp_path / "stm.sqlite3", tmp_path / "writer.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    baseline: Model = {}
    carried: list[dict[str, Any]] = []  # purges a kill left pending
    history = History()
    acks = deletes = left_pending = 0
    for cycle in range(cycles):
        start = log_path.stat().st_size if log_path.exists() else 0
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), str(db_path), str(log_path), str(seed * 1000 + cycle)],
            env=env,
            stderr=subprocess.PIPE,
        )
        try:
            wait_for_start(log_path, start, proc)
            time.sleep(rng.uniform(0.0, 0.3))
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            assert proc.stderr is not None
            proc.stderr.close()
        assert proc.returncode == -signal.SIGKILL, "the writer died before it was killed"
        events = read_log(log_path, start)
        history.events.extend(events)
        acks += sum(e["e"] == "ack" for e in events)
        deletes += sum(e["e"] in ("cleared", "purged") for e in events)
        actual, identities = database_state(db_path)
        where = f"(seed {seed}, cycle {cycle}; replay with STM_SEED={seed})"
        carried = check_cycle(
            actual, identities, baseline, events, carried, pending_purges(db_path), history, where
        )
        left_pending += bool(carried)
        baseline = actual
    # A last open, not killed, finishes every purge the kills left pending.
    asyncio.run(_open_and_close(str(db_path)))
    assert pending_purges(db_path) == []
    final, _ = database_state(db_path)
    check_finished(final, baseline, carried)
    with capsys.disabled():
        print(
            f"\ncrash safety: {cycles} SIGKILL cycles, {acks} acknowledged upgrades and "
            f"{deletes} completed deletes checked, {left_pending} kills left a purge "
            f"pending (seed {seed})"
        )
