"""Crash safety on PostgreSQL: SIGKILL a writer process at random moments (its server-side
transaction dies with its connection), reconnect, check what it promised.

The same writer (tests/crash_writer.py) and the same checker as tests/test_crash.py: every
summary the writer acknowledged is there unless a later acknowledged upgrade or a later
delete replaced it, nothing a completed delete removed is there unless written again, and
nothing refused is there; only the operation in flight at the kill may have gone either
way, and a purge (several transactions) may be applied in part only while the database
holds it as pending; a last open, not killed, finishes every pending purge.

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
from typing import Any

import pytest
from helpers import scaled, seed_for
from test_crash import (
    PENDING_PURGES,
    ROOT,
    WRITER,
    History,
    Identity,
    Model,
    Row,
    _open_and_close,
    check_cycle,
    check_finished,
    purge_of,
    read_log,
    wait_for_start,
)

from stm.store._shred import open_sealed_text

# The other sessions on the test's database: a killed writer's backend may still be
# committing what it had sent.
OTHER_SESSIONS = (
    "SELECT count(*) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def database_state(url: str) -> tuple[Model, list[Identity], list[dict[str, Any]]]:
    """What the database holds, as the model states it (as test_crash.database_state), and
    the purges it holds as pending: read in one snapshot, once no other session is left."""

    async def read() -> tuple[list[Any], list[Any], list[Any]]:
        import asyncpg

        conn = await asyncpg.connect(url)
        try:
            for _ in range(500):
                if not await conn.fetchval(OTHER_SESSIONS):
                    break
                await asyncio.sleep(0.02)
            async with conn.transaction(isolation="repeatable_read", readonly=True):
                rows = await conn.fetch(
                    "SELECT m.id, m.key, m.scope, m.user_id, m.server_id, m.channel_id, "
                    "m.summary, k.key FROM short_term_memories m "
                    "LEFT JOIN stm_keys k ON k.slot = m.key_slot"
                )
                members = await conn.fetch(
                    "SELECT c.member, m.id FROM short_term_memories m JOIN stm_chain_members c "
                    "ON c.chain_id = m.chain_id AND c.first <= m.chain_version"
                )
                pending = await conn.fetch(PENDING_PURGES)
            return list(rows), list(members), list(pending)
        finally:
            await conn.close()

    rows, members, pending = asyncio.run(read())
    contributors: dict[int, set[int]] = {}
    for user, memory_id in members:
        contributors.setdefault(memory_id, set()).add(user)
    model: Model = {}
    for rid, key, _, _, server, _, sealed, secret in rows:
        summary = open_sealed_text(None if secret is None else bytes(secret), key, sealed)
        if summary is not None:
            model[key] = Row(summary, contributors.get(rid, set()), server)
    identities = [
        (key, scope, user, server, channel) for _, key, scope, user, server, channel, *_ in rows
    ]
    purges = [purge_of(*row) for row in pending]
    return model, identities, purges


@pytest.mark.slow
@pytest.mark.process
def test_sigkill_at_random_moments_on_postgres(
    postgres_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Kill, reconnect, check; many times over one database."""
    cycles = scaled(20, 150)
    seed = seed_for("crash-postgres")
    rng = random.Random(seed)
    log_path = tmp_path / "writer.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_STATE_HOME": str(tmp_path / "state")}
    baseline: Model = {}
    carried: list[dict[str, Any]] = []  # purges a kill left pending
    history = History()
    acks = deletes = left_pending = 0
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
        actual, identities, pending = database_state(postgres_url)
        where = f"(seed {seed}, cycle {cycle}; replay with STM_SEED={seed})"
        carried = check_cycle(
            actual, identities, baseline, events, carried, pending, history, where
        )
        left_pending += bool(carried)
        baseline = actual
    # A last open, not killed, with the writers' journal, finishes every pending purge.
    monkeypatch.setenv("XDG_STATE_HOME", env["XDG_STATE_HOME"])
    asyncio.run(_open_and_close(postgres_url))
    final, _, left = database_state(postgres_url)
    assert left == []
    check_finished(final, baseline, carried)
    with capsys.disabled():
        print(
            f"\ncrash safety on PostgreSQL: {cycles} SIGKILL cycles, {acks} acknowledged "
            f"upgrades and {deletes} completed deletes checked, {left_pending} kills left a "
            f"purge pending (seed {seed})"
        )
