"""Purge leaves no trace: the user's text is gone from the cache, every row and the file bytes.

The needles are written many times over the same rows first, so that old page
images (in the WAL, in freed pages, in overflow pages, in the unused middle of
rebalanced pages) would still hold them. Distilled text is stored encrypted
under a key per row, so the files must hold neither the text nor any key that
ever encrypted it (``shredding.KeyWitness`` records each key while it is live).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from helpers import Opener
from shredding import KeyWitness, file_bytes, plain_text

from stm import DurabilityError, ShortTermMemory
from stm.testing import ctx, turn

USERS = (1, 2)
CHANNELS = (10, 11, 12)


def row_text(db_path: Path) -> str:
    """Every text column of every table, as one string."""
    with sqlite3.connect(str(db_path)) as db:
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        parts = []
        for table in tables:
            for row in db.execute(f"SELECT * FROM {table}"):
                parts.extend(str(value) for value in row)
    return "\n".join(parts)


def needle(user: int, channel: int, version: int, size: int) -> str:
    # Sizes above a page force overflow pages; small ones stay in the row's cell.
    return f"NEEDLE-U{user}-C{channel}-V{version:03d} " + "x" * size


async def cached_text(memory: ShortTermMemory) -> str:
    parts = []
    for entry in memory.cache:
        parts.extend(m.content for m in entry.messages)
        parts.append(entry.summary or "")
        parts.extend(entry.categories.values())
    for user in USERS:
        for channel in CHANNELS:
            parts.append(str(await memory.build_context(ctx(user=user, channel=channel))))
            parts.append(str(await memory.build_context(ctx(user=user, channel=99))))
    return "\n".join(parts)


async def write_many_versions(
    memory: ShortTermMemory, versions: int, witness: KeyWitness | None = None
) -> None:
    """Both users talk and upgrade the same rows over and over; user 1 in channels 10-11 only,
    user 2 alone in channel 12 of another server (where no prompt shows user 1's words), so
    user 2's memory there must survive user 1's purge."""
    for version in range(versions):
        size = 5000 if version % 3 == 0 else 40
        for user, channel, server in ((1, 10, 100), (1, 11, 100), (2, 12, 200)):
            c = ctx(user=user, channel=channel, server=server)
            await memory.capture(turn(c, needle(user, channel, version, 10), "ok"))
            result = await memory.run_tool(c, {"summary": needle(user, channel, version, size)})
            assert result.success, result.message
        await memory.flush()
        if witness is not None:
            witness.look()


async def test_user_purge_leaves_no_bytes_after_many_versions(
    open_memory: Opener, db_path: Path
) -> None:
    """After many rewrites of the same rows, a purge + flush leaves none of the user's
    versions in the cache, the rows, the file or its WAL; nor after a restart."""
    memory = await open_memory()
    witness = KeyWitness(db_path)
    await write_many_versions(memory, 40, witness)
    assert "NEEDLE-U1-C10-V039" in plain_text(db_path)
    purged = witness.rows(":10") + witness.rows(":11")
    assert witness.left_in_files(purged) > 0
    await memory.clear_short_term_memory_for_user(1)
    await memory.flush()
    assert "NEEDLE-U1" not in await cached_text(memory)
    assert "NEEDLE-U1" not in row_text(db_path) + plain_text(db_path)
    assert b"NEEDLE-U1" not in file_bytes(db_path)
    assert witness.left_in_files(purged) == 0
    # The other user's memory is untouched: the purge is not a wipe.
    assert "NEEDLE-U2-C12-V039" in plain_text(db_path)
    assert witness.left_in_files(witness.rows(":12")) > 0
    await memory.close()
    assert b"NEEDLE-U1" not in file_bytes(db_path)
    assert witness.left_in_files(purged) == 0
    again = await open_memory()
    assert "NEEDLE-U1" not in await cached_text(again)
    assert b"NEEDLE-U1" not in file_bytes(db_path)


async def test_purge_after_restart_leaves_no_bytes(open_memory: Opener, db_path: Path) -> None:
    """A purge of rows that are only on disk (nothing cached) still scrubs every version."""
    first = await open_memory()
    witness = KeyWitness(db_path)
    await write_many_versions(first, 25, witness)
    await first.close()
    second = await open_memory()
    await second.clear_short_term_memory_for_user(1, server_id=100)
    await second.flush()
    assert "NEEDLE-U1" not in await cached_text(second)
    assert "NEEDLE-U1" not in row_text(db_path) + plain_text(db_path)
    assert b"NEEDLE-U1" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows(":10") + witness.rows(":11")) == 0


async def test_channel_clear_leaves_no_bytes(open_memory: Opener, db_path: Path) -> None:
    """/refresh scrubs every version of the channel's memory, any user, from the file."""
    memory = await open_memory()
    witness = KeyWitness(db_path)
    await write_many_versions(memory, 25, witness)
    await memory.clear_short_term_memory_for_channel(10)
    await memory.flush()
    assert "-C10-" not in await cached_text(memory)
    assert "-C10-" not in row_text(db_path) + plain_text(db_path)
    assert b"-C10-" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows(":10")) == 0
    assert "NEEDLE-U1-C11-V024" in plain_text(db_path)
    await memory.close()
    again = await open_memory()
    assert "-C10-" not in await cached_text(again)
    assert b"-C10-" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows(":10")) == 0


async def test_scrub_waits_for_a_reader_to_let_go_of_the_wal(
    open_memory: Opener, db_path: Path
) -> None:
    """Another connection reading an old snapshot keeps deleted text in the WAL: flush()
    reports the scrub as not durable instead of claiming success, and it lands once the
    reader is gone."""
    memory = await open_memory(busy_timeout_ms=100)
    witness = KeyWitness(db_path)
    await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(ctx(), {"summary": "READER-HELD-NEEDLE"})).success
    await memory.flush()
    witness.look()
    reader = sqlite3.connect(db_path)
    try:
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM short_term_memories").fetchone()
        await memory.clear_short_term_memory_for_user(1)
        with pytest.raises(DurabilityError, match="erasing deleted text"):
            await memory.flush()
        assert witness.left_in_files(witness.rows()) > 0  # the WAL still holds the keys
    finally:
        reader.close()
    await memory.flush()
    assert b"READER-HELD-NEEDLE" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows()) == 0
