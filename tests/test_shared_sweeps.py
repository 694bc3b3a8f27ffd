"""Several processes carrying out one purge: the steps of any of them, interleaved in any
order (a process still alive while another took its purge over, or two taking one over),
leave the database as one process carrying it out alone does, and a process never takes
the pages it was told for all of the purge's ranges."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import stored_row
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stm._deletions import Purge
from stm._keys import server_key, user_key
from stm._lineage import Lineage
from stm.store import _chains as chains
from stm.store._base import PurgeResult, PurgeUser, SaveDistilled, StoredRow, SweepPurge, SweepStep
from stm.store._sqlite import _run, migrate, run_batch

NOW = 1_800_000_000.0
ALICE = 7


def _row(key: str, user: int | None, channel: int, text: str) -> StoredRow:
    return stored_row(key, 1, user, channel, summary=text, updated_at=NOW)


def _build(path: Path) -> sqlite3.Connection:
    """Twelve channels' notes, each written from a prompt that showed Alice's words or the
    previous channel's notes, so that her purge reaches most of them through edges."""
    db = sqlite3.connect(path, isolation_level=None)
    migrate(db)
    for channel in range(12):
        direct = frozenset({ALICE, 8}) if channel % 3 == 0 else frozenset({8})
        shown = Lineage(direct, other=(server_key(1, channel - 1),) if channel else ())
        saves = [
            SaveDistilled(
                _row(server_key(1, channel), None, channel, f"notes {channel}"), lineage=shown
            )
        ]
        if channel % 4 == 0:
            saves.append(
                SaveDistilled(_row(user_key(ALICE, channel), ALICE, channel, "mine"), lineage=shown)
            )
        run_batch(db, saves, at=NOW)
    return db


def _state(db: sqlite3.Connection) -> list[tuple[object, ...]]:
    return db.execute(
        "SELECT key, summary IS NULL, chain_id IS NULL FROM short_term_memories ORDER BY key"
    ).fetchall()


@pytest.fixture
def chunks_of_one(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("SEED_CHUNK", "FOLLOW_CHUNK", "SWEEP_CHUNK", "REACH_PAGE", "FINISH_CHUNK"):
        monkeypatch.setattr(chains, name, 1)  # as many steps as there can be
    yield


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.lists(st.integers(min_value=0, max_value=2), min_size=200, max_size=200))
def test_interleaved_steps_of_several_processes_leave_what_one_leaves(
    tmp_path_factory: pytest.TempPathFactory, chunks_of_one: None, order: list[int]
) -> None:
    """Process 0 makes the purge; processes 0, 1 and 2 then take its steps in the order
    drawn (each until its own steps say nothing is left). The rows end as one process
    alone leaves them, nothing is left to do, and each process that takes the ranges from
    its own pages has them all; any other knows it missed some, or sees steps past the
    telling while its purge is pending (and reads them whole from the store)."""
    folder = tmp_path_factory.mktemp("sweeps")
    alone = _build(folder / "alone.sqlite3")
    (first,) = run_batch(alone, [PurgeUser(ALICE, None)], at=NOW)
    assert isinstance(first, PurgeResult)
    more = first.more
    while more:
        (step,) = run_batch(alone, [SweepPurge(first.position)], at=NOW)
        assert isinstance(step, SweepStep)
        more = step.more
    expected = _state(alone)
    everything = tuple(chains_ranges(alone, first.position))
    alone.close()

    shared = _build(folder / "shared.sqlite3")
    (made,) = run_batch(shared, [PurgeUser(ALICE, None)], at=NOW)
    assert isinstance(made, PurgeResult)
    purges = [Purge(PurgeUser(ALICE, None)) for _ in range(3)]
    # Process 0 knows its purge's ranges if the first transaction planned them all.
    told: list[tuple[object, ...] | None] = [made.ranges, None, None]
    past = [False, False, False]
    going = [made.more, True, True]

    def step_of(process: int) -> None:
        """One step of the purge, taken by ``process``, told to it as the memory tells it."""
        (step,) = run_batch(shared, [SweepPurge(made.position)], at=NOW)
        assert isinstance(step, SweepStep)
        if "page" in step.phases:
            got = purges[process].tell(step.ranges or (), step.told, step.after)
            if got is not None:
                told[process] = got
        elif told[process] is None and ({"clear", "finish"} & {*step.phases} or not step.more):
            past[process] = True
        going[process] = step.more

    for process in order:
        if going[process]:
            step_of(process)
    while any(going):  # the order drawn ran out: each goes on alone until done
        for process in range(3):
            if going[process]:
                step_of(process)
    assert _state(shared) == expected
    assert _run(shared, chains.pending_sweeps()) == []
    for process in range(3):
        if told[process] is not None:
            assert tuple(told[process]) == everything  # type: ignore[arg-type]
        else:
            assert purges[process].gapped or past[process]
    shared.close()


def chains_ranges(db: sqlite3.Connection, position: int) -> list[object]:
    from stm._lineage import Range

    return [
        Range(int(chain), int(start))
        for chain, start in db.execute(
            "SELECT chain_id, from_version FROM stm_purge_ranges WHERE position = ? "
            "ORDER BY chain_id",
            (position,),
        )
    ]
