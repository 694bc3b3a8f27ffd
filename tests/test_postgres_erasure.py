"""Erasure on PostgreSQL: distilled text never reaches a file in the clear, a purge
destroys the keys of what it deleted, and the key table can be rewritten so that no file
of it holds them (what VACUUM alone leaves is stated in docs/guarantees.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from stm import ShortTermMemory, STMConfig
from stm.testing import ctx, turn

TEXTS = ("FIRST-VERSION-7f3a", "SECOND-VERSION-9c1d", "THIRD-VERSION-22e8")


async def _connect(url: str) -> Any:
    import asyncpg

    return await asyncpg.connect(url)


async def _file_bytes(conn: Any, table: str) -> bytes:
    """Every byte of the files of ``table``, its TOAST table and their indexes, on disk."""
    await conn.execute("CHECKPOINT")
    paths = await conn.fetch(
        "SELECT pg_relation_filepath(c.oid) FROM pg_class c WHERE c.oid IN ("
        "  SELECT $1::regclass UNION SELECT reltoastrelid FROM pg_class WHERE oid = $1::regclass"
        "  UNION SELECT indexrelid FROM pg_index WHERE indrelid = $1::regclass"
        ") AND pg_relation_filepath(c.oid) IS NOT NULL",
        table,
    )
    found = b""
    for (path,) in paths:
        found += bytes(await conn.fetchval("SELECT pg_read_binary_file($1)", path))
    return found


async def _vacuum_full_keys(conn: Any, keys: list[bytes]) -> tuple[list[str], list[Any]]:
    """``VACUUM FULL stm_keys``, then the keys still in its files. VACUUM keeps a deleted
    row while any transaction in the database could still see it (another test's, in a
    schema of its own in the same database, or an autovacuum ANALYZE): while keys are
    left, vacuum again, up to 30 s (the transaction that held them may have ended before
    the look for it). Returns the keys left and the backends that held an older snapshot
    at the last look."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 30
    while True:
        await conn.execute("VACUUM FULL stm_keys")
        key_files = await _file_bytes(conn, "stm_keys")
        left = [key.hex() for key in keys if key in key_files]
        holders = await conn.fetch(
            "SELECT pid, backend_type, state, left(query, 80) AS query FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND backend_xmin IS NOT NULL"
        )
        if not left or loop.time() > deadline:
            return left, [dict(row) for row in holders]
        await asyncio.sleep(0.2)


async def test_distilled_text_is_never_in_the_clear_and_a_purge_destroys_its_keys(
    postgres_url: str,
) -> None:
    config = STMConfig(database=postgres_url)
    conn = await _connect(postgres_url)
    try:
        if not await conn.fetchval(
            "SELECT rolsuper OR pg_has_role(current_user, 'pg_read_server_files', 'member') "
            "FROM pg_roles WHERE rolname = current_user"
        ):
            pytest.skip("reading PostgreSQL's files needs superuser or pg_read_server_files")
        async with ShortTermMemory.open(config) as memory:
            alice = ctx(user=1, channel=10)
            await memory.capture(turn(alice, "hello"))
            for text in TEXTS:  # three versions of one row: old ones stay as dead tuples
                assert (await memory.run_tool(alice.model_copy(), {"summary": text})).success
            assert (await memory.get_entry("shortterm:server:100:10")).summary == TEXTS[-1]
            keys = [bytes(k) for (k,) in await conn.fetch("SELECT key FROM stm_keys")]
            assert keys
            held = await _file_bytes(conn, "short_term_memories")
            assert not any(text.encode() in held for text in TEXTS)
            await memory.purge(1)
        assert await conn.fetchval("SELECT count(*) FROM stm_keys") == 0
        held = await _file_bytes(conn, "short_term_memories")
        assert not any(text.encode() in held for text in TEXTS)
        # The operator's step for the key table's own free space (docs/guarantees.md).
        left, holders = await _vacuum_full_keys(conn, keys)
        assert not left, (left, holders)
    finally:
        await conn.close()


async def test_a_database_of_an_earlier_version_is_sealed_when_opened(postgres_url: str) -> None:
    """Rows an earlier version stored in the clear are encrypted by the migration and read
    back as they were."""
    from stm.store._postgres import MIGRATIONS

    conn = await _connect(postgres_url)
    try:
        await conn.execute("CREATE TABLE stm_schema (version INTEGER NOT NULL)")
        await conn.execute("INSERT INTO stm_schema (version) VALUES (1)")
        await conn.execute(MIGRATIONS[0])  # the first release: contributors, text in the clear
        await conn.execute(
            "INSERT INTO short_term_memories (key, scope, server_id, channel_id, summary, "
            "categories, updated_at) VALUES ('shortterm:server:100:10', 'server', 100, 10, "
            "'PLAIN-OLD-NOTES', '{}', extract(epoch from now()))"
        )
        async with ShortTermMemory.open(STMConfig(database=postgres_url)) as memory:
            entry = await memory.get_entry("shortterm:server:100:10")
            assert entry is not None and entry.summary == "PLAIN-OLD-NOTES"
        stored = await conn.fetchval("SELECT summary FROM short_term_memories")
        assert stored.startswith("stm1:") and "PLAIN-OLD-NOTES" not in stored
    finally:
        await conn.close()


async def test_an_erasure_does_not_wait_for_another_transaction_on_the_key_table(
    postgres_url: str,
) -> None:
    """The vacuum that erases destroyed keys gives no pages back, so it never asks for the
    key table alone: while another connection's transaction holds a lock on it (another
    process's upgrade writing a key), the erasure still ends at once. Asking would wait up
    to 5 s, and this process's writer with it."""
    from stm.store._base import Scrub
    from stm.store._postgres import PostgresStore

    store = await PostgresStore.open(postgres_url)
    other = await _connect(postgres_url)
    try:
        await other.execute(
            "INSERT INTO stm_keys (key) SELECT decode(md5(i::text) || md5(i::text), 'hex') "
            "FROM generate_series(1, 4000) AS i"
        )
        # The table's end is empty: a plain VACUUM would give those pages back.
        await other.execute("DELETE FROM stm_keys WHERE slot > 1000")
        async with other.transaction():
            await other.execute("LOCK TABLE stm_keys IN ROW EXCLUSIVE MODE")
            await asyncio.wait_for(store.run([Scrub()]), timeout=3.0)
    finally:
        await other.close()
        await store.close()
