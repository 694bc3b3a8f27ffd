"""Byte-level erasure under each policy, on each store: after a purge and ``flush()`` no
key that ever encrypted a row the purge deleted or cleared is left where the store keeps
its bytes (SQLite: the file, its WAL and shared memory; PostgreSQL: the key table, and its
files after ``VACUUM FULL stm_keys``), while the rows the policy keeps still have theirs.

The server is the one of ``test_erasure.py``: #games's notes are Carol's alone; Alice
speaks in #general and its notes are written; #random's notes (the server's and Bob's own)
are written from a prompt that showed #general's notes. ``complete`` clears #random's
notes with #general's; ``direct`` keeps them (docs/data.md says what each leaves)."""

from __future__ import annotations

from typing import Any

import pytest
from shredding import KeyWitness, file_bytes
from test_erasure import ALICE, GAMES, GENERAL, RANDOM, _server
from test_postgres_erasure import _connect, _file_bytes, _vacuum_full_keys

from stm import ShortTermMemory, STMConfig

BOTH_STORES = True


def _cleared(erasure: str) -> set[str]:
    """The rows whose distilled text the purge of Alice deletes or clears."""
    gone = {f"shortterm:user:{ALICE}:{GENERAL}", f"shortterm:server:100:{GENERAL}"}
    if erasure == "complete":
        gone |= {f"shortterm:server:100:{RANDOM}", f"shortterm:user:2:{RANDOM}"}
    return gone


async def _postgres_keys(conn: Any) -> dict[str, bytes]:
    rows = await conn.fetch(
        "SELECT m.key, k.key FROM short_term_memories m JOIN stm_keys k ON k.slot = m.key_slot"
    )
    return {str(row): bytes(key) for row, key in rows}


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_purge_leaves_no_key_of_what_it_cleared(
    store_kind: str, store_database: str, erasure: str
) -> None:
    config = STMConfig(database=store_database, render_mode="supersede", erasure=erasure)
    cleared = _cleared(erasure)
    kept = {f"shortterm:server:100:{GAMES}", f"shortterm:user:3:{GAMES}"}
    if erasure == "direct":
        kept |= {f"shortterm:server:100:{RANDOM}", f"shortterm:user:2:{RANDOM}"}
    if store_kind == "sqlite":
        witness = KeyWitness(store_database)
        async with ShortTermMemory.open(config) as memory:
            await _server(memory)
            await memory.flush()
            witness.look()
            assert set(witness.seen) == cleared | kept
            assert witness.left_in_files(cleared) == len(witness.keys(cleared))
            await memory.purge(ALICE)
            await memory.flush()
        assert witness.left_in_files(cleared) == 0
        data = file_bytes(store_database)
        assert all(key in data for key in witness.keys(kept))
        return
    conn = await _connect(store_database)
    try:
        async with ShortTermMemory.open(config) as memory:
            await _server(memory)
            await memory.flush()
            before = await _postgres_keys(conn)
            assert set(before) == cleared | kept
            await memory.purge(ALICE)
            await memory.flush()
        after = await _postgres_keys(conn)
        assert set(after) == kept and all(after[row] == before[row] for row in kept)
        gone = [before[row] for row in cleared]
        table = {bytes(k) for (k,) in await conn.fetch("SELECT key FROM stm_keys")}
        assert not table & set(gone)
        # Reading PostgreSQL's own files needs superuser or pg_read_server_files.
        if await conn.fetchval(
            "SELECT rolsuper OR pg_has_role(current_user, 'pg_read_server_files', 'member') "
            "FROM pg_roles WHERE rolname = current_user"
        ):
            left, holders = await _vacuum_full_keys(conn, gone)
            assert not left, (left, holders)
            files = await _file_bytes(conn, "stm_keys")
            assert all(before[row] in files for row in kept)
    finally:
        await conn.close()
