"""Erasure by crypto-shredding: cheap, skipped when nothing was deleted, never stuck behind
a reader, and keys that leave no copy once destroyed."""

from __future__ import annotations

import asyncio
import contextlib
import random
import sqlite3
import tempfile
from pathlib import Path

from helpers import Opener
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from shredding import file_bytes

from stm import DurabilityError, STMConfig
from stm._lineage import Lineage
from stm.store._base import DeleteChannel, DeleteExpired, PurgeUser, SaveDistilled, Scrub, StoredRow
from stm.store._shred import DEAD_KEY
from stm.store._sqlite import SQLiteStore
from stm.testing import Clock, ctx, faulty_memory, turn


async def test_a_purge_of_someone_who_holds_nothing_costs_no_erasure(config: STMConfig) -> None:
    """/memory forget by a member with no memory: 0 keys touched, one cheap delete, and
    no erasure step at all, however often it is called."""
    memory, store = await faulty_memory(config)
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": "kept"})).success
    await memory.flush()
    store.batches.clear()
    for _ in range(20):
        assert await memory.clear_short_term_memory_for_user(424242) == 0
    await memory.flush()
    assert not any("Scrub" in batch for batch in store.batches)
    assert sum(batch.count("PurgeUser") for batch in store.batches) == 20
    await memory.close()


async def test_a_burst_of_purges_shares_one_erasure(config: STMConfig) -> None:
    """Erasure is coalesced: many purges queued together are erased in one step."""
    memory, store = await faulty_memory(config)
    for user in range(1, 11):
        await memory.capture(turn(ctx(user=user, channel=user), "x"))
        assert (await memory.run_tool(ctx(user=user, channel=user), {"summary": "s"})).success
    await memory.flush()
    store.batches.clear()
    for user in range(1, 11):
        await memory.clear_short_term_memory_for_user(user)
    await memory.flush()
    assert sum(batch.count("Scrub") for batch in store.batches) == 1
    await memory.close()


async def test_a_reader_does_not_stall_upgrades_nor_grow_the_wal(
    open_memory: Opener, db_path: Path
) -> None:
    """Another connection holding a read transaction keeps the WAL from being emptied: the
    erasure fails and is tried again later, while upgrades commit; retrying it adds
    nothing to the WAL (the file rewrite it replaces appended a copy of the database)."""
    memory = await open_memory()
    for channel in range(10, 40):
        await memory.capture(turn(ctx(channel=channel), "x"))
        assert (await memory.run_tool(ctx(channel=channel), {"summary": "s" * 300})).success
    await memory.flush()
    reader = sqlite3.connect(db_path)
    wal = Path(f"{db_path}-wal")
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM short_term_memories").fetchone()
        await memory.clear_short_term_memory_for_user(1)
        with contextlib.suppress(DurabilityError):
            await memory.flush()
        size = wal.stat().st_size
        for attempt in range(5):
            assert (
                await memory.run_tool(ctx(user=2, channel=50), {"summary": f"u{attempt}"})
            ).success
            await memory.writer.flush(scrub=False)
            grown = wal.stat().st_size
            try:
                await memory.flush()
            except DurabilityError as exc:
                assert "erasing deleted text" in str(exc)
            assert wal.stat().st_size == grown  # a failed erasure writes nothing
        assert wal.stat().st_size >= size
    finally:
        reader.close()
    await memory.flush()
    assert wal.stat().st_size == 0
    await memory.close()


def _row(n: int, user: int, text: str) -> StoredRow:
    return StoredRow(
        key=f"shortterm:user:{user}:{n}", scope="user", server_id=1, user_id=user, channel_id=n,
        persona_id=None, parent_channel_id=None, channel_name=None, server_name=None,
        channel_private=False, summary=text, categories={"mood": text} if n % 3 == 0 else {},
        turns_since_refresh=0, last_refreshed_turn=1,
        updated_at=float(n),
    )  # fmt: skip


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("save"), st.integers(0, 60), st.integers(1, 6), st.integers(5, 900)),
        st.tuples(st.just("purge"), st.integers(1, 6), st.none(), st.none()),
        st.tuples(st.just("clear"), st.integers(0, 60), st.none(), st.none()),
        st.tuples(st.just("expire"), st.integers(0, 60), st.none(), st.none()),
    ),
    min_size=20,
    max_size=150,
)


async def _keys_leave_no_copy(ops: list[tuple[str, int, int | None, int | None]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "keys.sqlite3")
        store = await SQLiteStore.open(path)
        seen: set[bytes] = set()
        try:
            for i, (kind, a, b, c) in enumerate(ops):
                if kind == "save":
                    assert b is not None and c is not None
                    shown = Lineage(frozenset({b}))
                    await store.run([SaveDistilled(_row(a, b, f"T{i}-" + "y" * c), lineage=shown)])
                elif kind == "purge":
                    await store.run([PurgeUser(a, None)])
                elif kind == "clear":
                    await store.run([DeleteChannel(a)])
                else:
                    await store.run([DeleteExpired(float(a), float(a) - 30)])
                rows = await store.execute("SELECT key FROM stm_keys")
                seen |= {bytes(k) for (k,) in rows if bytes(k) != DEAD_KEY}
            await store.run([Scrub()])
            live = {
                bytes(k)
                for (k,) in await store.execute(
                    "SELECT k.key FROM stm_keys k JOIN short_term_memories m ON m.key_slot = k.slot"
                )
            }
            data = file_bytes(path)
            for key in seen:
                assert data.count(key) == (1 if key in live else 0)
            dangling = await store.execute(
                "SELECT count(*) FROM stm_keys WHERE key != zeroblob(32) "
                "AND slot NOT IN (SELECT key_slot FROM short_term_memories "
                "WHERE key_slot IS NOT NULL)"
            )
            assert dangling == [(0,)]
        finally:
            await store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_a_destroyed_key_leaves_no_copy_in_the_files(
    ops: list[tuple[str, int, int | None, int | None]],
) -> None:
    """Whatever mix of saves (of any size, growing and shrinking rows), purges, clears and
    expiry: after erasure each live key is in the files exactly once, each destroyed key
    nowhere, and no key outlives its row."""
    asyncio.run(_keys_leave_no_copy(ops))


async def test_a_file_of_the_previous_version_is_encrypted_once(
    open_memory: Opener, db_path: Path, clock: Clock
) -> None:
    """A file written before encryption (schema 1, notes in the clear) is migrated at open:
    its notes still read back, and no plain copy of them is left in the files."""
    from stm.store._sqlite import MIGRATIONS, statements

    with contextlib.closing(sqlite3.connect(db_path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        for statement in statements(MIGRATIONS[0]):
            db.execute(statement)
        db.execute("PRAGMA user_version = 1")
        rng = random.Random(1)
        for n in range(200):
            db.execute(
                "INSERT INTO short_term_memories (key, scope, server_id, channel_id, "
                "categories, updated_at) VALUES (?, 'server', 100, ?, ?, ?)",
                (
                    f"shortterm:server:100:{n}",
                    n,
                    '{"mood": "LEGACY-CATEGORY"}' if n == 7 else "{}",
                    clock(),
                ),
            )
            # Rows that grow make pages split, which leaves stale copies of cells in the gaps.
            grown = rng.randrange(n + 1)
            db.execute(
                "UPDATE short_term_memories SET summary = ? WHERE channel_id = ?",
                (f"LEGACY-PLAIN-{grown} " + "z" * rng.randint(50, 600), grown),
            )
        db.execute("UPDATE short_term_memories SET summary = 'LEGACY-PLAIN-07 changed' "
                   "WHERE channel_id = 7")  # fmt: skip
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        (live,) = db.execute(
            "SELECT count(*) FROM short_term_memories WHERE summary IS NOT NULL"
        ).fetchone()
    assert file_bytes(db_path).count(b"LEGACY-PLAIN") > live  # stale copies are there
    memory = await open_memory()
    entry = await memory.get_entry("shortterm:server:100:7")
    assert entry is not None and entry.summary == "LEGACY-PLAIN-07 changed"
    assert entry.categories == {"mood": "LEGACY-CATEGORY"}
    await memory.close()
    data = file_bytes(db_path)
    assert b"LEGACY-PLAIN" not in data and b"LEGACY-CATEGORY" not in data


async def test_a_row_saved_several_times_in_one_batch_keeps_one_key(tmp_path: Path) -> None:
    """Keys are read once per batch: a row's later saves in the batch use the key its first
    save made, a save without content destroys it, and the next save makes a new one."""
    from dataclasses import replace

    store = await SQLiteStore.open(str(tmp_path / "batch.sqlite3"))
    try:
        a, b = _row(3, 1, "A1"), _row(4, 2, "B1")
        empty = replace(a, summary=None, categories={})
        batches: list[list[StoredRow]] = [
            [a, replace(a, summary="A2"), b, replace(a, summary="A3")],
            [replace(a, summary="A4"), replace(b, summary="B2"), empty, replace(a, summary="A5")],
            [empty, replace(b, summary="B3"), replace(a, summary="A6"), replace(b, summary="B4")],
        ]
        for rows in batches:
            await store.run([SaveDistilled(row) for row in rows])
            slots = await store.execute(
                "SELECT m.key, k.key FROM short_term_memories m JOIN stm_keys k "
                "ON k.slot = m.key_slot ORDER BY m.key"
            )
            assert len(slots) == 2 and all(bytes(k) != DEAD_KEY for _, k in slots)
            assert slots[0][1] != slots[1][1]
            live = await store.execute("SELECT count(*) FROM stm_keys WHERE key != zeroblob(32)")
            assert live == [(2,)]  # no key outlives its row's use of it
        stored_a, stored_b = await store.row(a.key), await store.row(b.key)
        assert stored_a is not None and stored_a.summary == "A6"
        assert stored_a.categories == {"mood": "A1"}
        assert stored_b is not None and stored_b.summary == "B4"
    finally:
        await store.close()


async def test_a_key_another_connection_destroyed_is_not_used_again(tmp_path: Path) -> None:
    """The writer remembers the keys of rows it upgraded; a delete by another connection
    (another process) makes it read them again, so the next save makes a new key."""
    path = str(tmp_path / "other.sqlite3")
    store = await SQLiteStore.open(path)
    try:
        a = _row(4, 1, "before")
        await store.run([SaveDistilled(a)])
        await store.run([SaveDistilled(a)])  # its key is remembered now
        with contextlib.closing(sqlite3.connect(path, isolation_level=None)) as other:
            other.execute("DELETE FROM short_term_memories WHERE key = ?", (a.key,))
        await store.run([SaveDistilled(_row(4, 1, "after"))])
        stored = await store.row(a.key)
        assert stored is not None and stored.summary == "after"
        live = await store.execute(
            "SELECT count(*) FROM stm_keys k JOIN short_term_memories m ON m.key_slot = k.slot "
            "WHERE k.key != zeroblob(32)"
        )
        assert live == [(1,)]
    finally:
        await store.close()
