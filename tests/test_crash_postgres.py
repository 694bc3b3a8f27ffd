"""Crash safety on PostgreSQL: SIGKILL a writer process at random moments (its server-side
transaction dies with its connection), reconnect, check what it promised.

The same writer (tests/crash_writer.py) and the same checker as tests/test_crash.py: every
summary the writer acknowledged is there unless a later acknowledged upgrade or a later
delete replaced it, nothing a completed delete removed is there unless written again, and
nothing refused is there; only the operation in flight at the kill may have gone either
way. The state carried from one cycle to the next is the model that matched (its
contributors come from the writer's acknowledgements), so the checker reads nothing of the
store but its rows.

STM_STRESS=1 runs many more cycles; STM_SEED replays one sequence.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import scaled, seed_for
from test_crash import (
    ROOT,
    WRITER,
    History,
    Identity,
    Model,
    expected_states,
    read_log,
    summaries,
    wait_for_start,
)


def database_state(url: str) -> tuple[dict[str, str], list[Identity]]:
    async def read() -> list[tuple[str, str, int | None, int | None, int, str | None]]:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            return [
                tuple(row)  # type: ignore[misc]
                for row in await conn.fetch(
                    "SELECT key, scope, user_id, server_id, channel_id, summary "
                    "FROM short_term_memories"
                )
            ]
        finally:
            await conn.close()

    rows = asyncio.run(read())
    return (
        {key: summary for key, _, _, _, _, summary in rows if summary is not None},
        [(key, scope, user, server, channel) for key, scope, user, server, channel, _ in rows],
    )


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_at_random_moments_on_postgres(
    postgres_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Kill, reconnect, check; many times over one database."""
    cycles = scaled(20, 150)
    seed = seed_for("crash-postgres")
    rng = random.Random(seed)
    log_path = tmp_path / "writer.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    baseline: Model = {}
    history = History()
    acks = deletes = 0
    for cycle in range(cycles):
        start = log_path.stat().st_size if log_path.exists() else 0
        proc = subprocess.Popen(
            [sys.executable, str(WRITER), postgres_url, str(log_path), str(seed * 1000 + cycle)],
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
        actual, identities = database_state(postgres_url)
        allowed = expected_states(baseline, events)
        where = f"(seed {seed}, cycle {cycle}; replay with STM_SEED={seed})"
        matched = [m for m in allowed if summaries(m) == actual]
        assert matched, f"{actual} is none of {[summaries(m) for m in allowed]} {where}"
        for identity in identities:
            deleted_at = history.last_completed_delete(identity)
            assert history.last_write(identity[0]) > deleted_at, f"{identity[0]} came back {where}"
        baseline = matched[0]
    with capsys.disabled():
        print(
            f"\ncrash safety on PostgreSQL: {cycles} SIGKILL cycles, {acks} acknowledged "
            f"upgrades and {deletes} completed deletes checked (seed {seed})"
        )
