"""Database faults: a locked, full, read-only, corrupt or too-new database.

Each case either refuses to start with a clear StoreError, or keeps running
with honest answers: run_tool says the memory was not saved (never a false
success), captures keep working in memory, nothing acknowledged is lost, and
deletes are retried until durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from helpers import Opener

from stm import DurabilityError, SchemaVersionError, ShortTermMemory, StoreError
from stm.store._shred import readable
from stm.store._sqlite import SQLiteStore
from stm.testing import ctx, turn

NOT_SAVED = "Nothing was s"  # "saved" or "stored", as the tool words it

LOCK_HOLDER = """
import sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
db.execute("ROLLBACK")
"""


def summaries(db_path: Path) -> dict[str, str | None]:
    with contextlib.closing(sqlite3.connect(str(db_path))) as db:
        return dict(db.execute(f"SELECT key, summary FROM {readable(db)}").fetchall())


async def remember(memory: ShortTermMemory, text: str, channel: int = 10) -> None:
    c = ctx(channel=channel)
    await memory.capture(turn(c, f"said {text}"))
    result = await memory.run_tool(c, {"summary": text})
    assert result.success, result.message


@contextlib.asynccontextmanager
async def write_lock(db_path: Path) -> AsyncIterator[None]:
    """Another process holds the database's write lock until the block ends."""
    holder = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        LOCK_HOLDER,
        str(db_path),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdin is not None
    try:
        assert (await holder.stdout.readline()).strip() == b"locked"
        yield
    finally:
        holder.stdin.write(b"release\n")
        await holder.stdin.drain()
        assert await holder.wait() == 0


@pytest.mark.process
async def test_locked_database(open_memory: Opener, db_path: Path) -> None:
    """Another process holds the write lock past busy_timeout_ms: start-up still works, the
    upgrade is refused as not saved, captures go on in memory, a clear is retried until
    the lock goes, and what was acknowledged before is still there after."""
    first = await open_memory(busy_timeout_ms=50)
    await remember(first, "ACKED-BEFORE-LOCK")
    await remember(first, "CLEAR-ME", channel=11)
    await first.close()
    async with write_lock(db_path):
        memory = await open_memory(busy_timeout_ms=50)
        c = ctx()
        result = await memory.run_tool(c, {"summary": "WRITTEN-WHILE-LOCKED"})
        assert not result.success and NOT_SAVED in result.message
        assert not c.disable_short_term_memory_update
        await memory.capture(turn(ctx(channel=12), "CAPTURED-WHILE-LOCKED"))
        entry = await memory.get_entry("shortterm:server:100:12")
        assert entry is not None and entry.messages[0].content == "CAPTURED-WHILE-LOCKED"
        await memory.clear_short_term_memory_for_channel(11)
        assert "CLEAR-ME" not in str(await memory.build_context(ctx(channel=13)))
        with pytest.raises(DurabilityError, match="clearing channel 11"):
            await memory.flush()
    await memory.flush()
    stored = summaries(db_path)
    assert stored["shortterm:server:100:10"] == "ACKED-BEFORE-LOCK"
    assert not any(key.endswith(":11") for key in stored)
    assert "WRITTEN-WHILE-LOCKED" not in stored.values()
    result = await memory.run_tool(ctx(), {"summary": "AFTER-LOCK"})
    assert result.success, result.message
    # The entry first captured during the lock is read again, not stuck unusable.
    result = await memory.run_tool(ctx(channel=12), {"summary": "CHANNEL-12-AFTER-LOCK"})
    assert result.success, result.message
    await memory.close()
    assert summaries(db_path)["shortterm:server:100:10"] == "AFTER-LOCK"


async def test_full_disk(open_memory: Opener, db_path: Path) -> None:
    """With the file capped (max_page_count), upgrades that need room are refused as not
    saved, earlier ones stay, captures and deletes keep working, and after room is made
    the memory works again."""
    memory = await open_memory()
    await remember(memory, "ACKED-BEFORE-FULL")
    # Cleared while the file is full, below (written before: the first upgrade that
    # fills the file may be the first one after the cap, with its note history).
    await remember(memory, "CLEARED-WHILE-FULL", channel=20)
    await memory.flush()
    store = memory.store
    pages = (await store.execute("PRAGMA page_count"))[0][0]  # type: ignore[attr-defined]
    await store.execute(f"PRAGMA max_page_count = {pages}")  # type: ignore[attr-defined]
    acked: dict[str, str] = {}
    refused = None
    for channel in range(21, 120):
        text = f"FILL-{channel} " + "f" * 1400
        c = ctx(channel=channel)
        await memory.capture(turn(c, "fill"))
        result = await memory.run_tool(c, {"summary": text})
        if not result.success:
            refused = (channel, text, result.message)
            break
        acked[f"shortterm:server:100:{channel}"] = text
    assert refused is not None, "the capped file never filled up"
    channel, text, message = refused
    assert NOT_SAVED in message and "full" in message
    await memory.capture(turn(ctx(channel=channel), "CAPTURED-WHILE-FULL"))
    entry = await memory.get_entry(f"shortterm:server:100:{channel}")
    assert entry is not None and entry.messages[-2].content == "CAPTURED-WHILE-FULL"
    assert entry.summary is None
    # A delete needs no new page: it goes through even while the file is full.
    await memory.clear_short_term_memory_for_channel(20)
    acked.pop("shortterm:server:100:20", None)
    with contextlib.suppress(DurabilityError):
        await memory.flush()  # write-behind of new rows may still not fit
    await store.execute("PRAGMA max_page_count = 1073741823")  # type: ignore[attr-defined]
    await memory.flush()
    result = await memory.run_tool(ctx(channel=channel), {"summary": "AFTER-FULL"})
    assert result.success, result.message
    await memory.close()
    stored = summaries(db_path)
    assert stored["shortterm:server:100:10"] == "ACKED-BEFORE-FULL"
    for key, value in acked.items():
        assert stored[key] == value
    assert text not in stored.values()
    assert not any(key.endswith(":20") for key in stored)
    assert stored[f"shortterm:server:100:{channel}"] == "AFTER-FULL"


@contextlib.contextmanager
def read_only(path: Path) -> Iterator[None]:
    """Make the file unwritable; as root, permission bits do not stop writes, so the
    file is made immutable instead."""
    if os.geteuid() == 0:
        done = subprocess.run(["chattr", "+i", str(path)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.fail(f"cannot make {path} immutable (chattr +i): {done.stderr.strip()}")
        undo = ["chattr", "-i", str(path)]
    else:
        path.chmod(0o444)
        undo = ["chmod", "644", str(path)]
    try:
        yield
    finally:
        subprocess.run(undo, check=True)


async def test_a_database_that_cannot_be_opened_leaves_no_thread_running(tmp_path: Path) -> None:
    """A failed open returns once its connection's worker thread is gone: a thread still
    running when the event loop closes fails on it (an unhandled error in the thread)."""

    def workers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if "_connection_worker_thread" in t.name}

    before = workers()
    for _ in range(5):
        with pytest.raises(StoreError):
            await SQLiteStore.open(str(tmp_path))  # a folder: sqlite cannot open it
        assert workers() <= before


@pytest.mark.process
async def test_read_only_file_fails_at_start_up(open_memory: Opener, db_path: Path) -> None:
    """A database file that cannot be written is refused at start-up, naming the file."""
    first = await open_memory()
    await remember(first, "KEPT")
    await first.close()
    with read_only(db_path), pytest.raises(StoreError, match=db_path.name) as raised:
        await open_memory()
    assert "readonly" in str(raised.value).replace("-", "").replace(" ", "")
    again = await open_memory()
    assert (await again.get_entry("shortterm:server:100:10")).summary == "KEPT"  # type: ignore[union-attr]


async def test_database_turned_read_only_at_run_time(open_memory: Opener, db_path: Path) -> None:
    """Writes refused at run time: the upgrade says it was not saved, captures go on, the
    clear is retried and lands once writes work again."""
    memory = await open_memory()
    await remember(memory, "ACKED")
    await remember(memory, "CLEAR-ME", channel=11)
    store = memory.store
    await store.execute("PRAGMA query_only = ON")  # type: ignore[attr-defined]
    result = await memory.run_tool(ctx(), {"summary": "NOT-WRITABLE"})
    assert not result.success and NOT_SAVED in result.message
    await memory.capture(turn(ctx(), "CAPTURED"))
    assert (await memory.get_entry("shortterm:server:100:10")).messages[-2].content == "CAPTURED"  # type: ignore[union-attr]
    await memory.clear_short_term_memory_for_channel(11)
    with pytest.raises(DurabilityError, match="clearing channel 11"):
        await memory.flush()
    await store.execute("PRAGMA query_only = OFF")  # type: ignore[attr-defined]
    await memory.close()
    stored = summaries(db_path)
    assert stored["shortterm:server:100:10"] == "ACKED"
    assert not any(key.endswith(":11") for key in stored)


async def test_file_that_is_not_a_database(open_memory: Opener, db_path: Path) -> None:
    """Garbage in place of the database: start-up fails with StoreError naming the file."""
    db_path.write_bytes(b"this is not a database, just some text\n" * 200)
    with pytest.raises(StoreError, match=db_path.name):
        await open_memory()


async def test_database_with_corrupt_pages(open_memory: Opener, db_path: Path) -> None:
    """Valid header, garbage pages: start-up fails with StoreError (not a raw sqlite3 error)
    or, if it starts, no upgrade is ever acknowledged falsely."""
    first = await open_memory()
    for channel in range(10, 40):
        await remember(first, f"ROW-{channel} " + "r" * 900, channel=channel)
    await first.close()
    data = bytearray(db_path.read_bytes())
    page = int.from_bytes(data[16:18], "big") or 65536
    for offset in range(page, len(data), page):
        data[offset : offset + page] = bytes((i * 7 + 3) % 251 for i in range(page))
    db_path.write_bytes(bytes(data))
    try:
        memory = await open_memory()
    except StoreError as exc:
        assert db_path.name in str(exc)
        return
    result = await memory.run_tool(ctx(), {"summary": "ON-CORRUPT"})
    assert not result.success and NOT_SAVED in result.message
    with contextlib.suppress(DurabilityError):
        await memory.close()


async def test_database_from_a_newer_schema(open_memory: Opener, db_path: Path) -> None:
    """A file written by a newer version is refused with SchemaVersionError, untouched."""
    first = await open_memory()
    await remember(first, "FROM-THE-FUTURE")
    await first.close()
    with contextlib.closing(sqlite3.connect(str(db_path))) as db:
        db.execute("PRAGMA user_version = 99")
    before = db_path.read_bytes()
    with pytest.raises(SchemaVersionError, match="newer") as raised:
        await open_memory()
    assert db_path.name in str(raised.value) and "99" in str(raised.value)
    assert db_path.read_bytes() == before


@pytest.mark.process
async def test_pending_purge_survives_a_restart(open_memory: Opener, db_path: Path) -> None:
    """A purge that cannot be committed (another process holds the write lock) is kept in
    the pending journal when close() gives up; the next open applies it before serving
    anything, so nothing of the user is served or stored."""
    memory = await open_memory(busy_timeout_ms=50)
    await remember(memory, "PURGED-SUMMARY")
    await remember(memory, "OTHER-CHANNEL", channel=11)
    await memory.flush()
    journal = Path(f"{db_path}-stm-pending")
    async with write_lock(db_path):
        await memory.clear_short_term_memory_for_user(1)
        with pytest.raises(DurabilityError, match="purging user 1"):
            await memory.close()
        assert journal.exists()
    assert "PURGED-SUMMARY" in summaries(db_path).values()  # not committed before the restart
    again = await open_memory()
    for channel in (10, 11, 12):
        assert "PURGED" not in str(await again.build_context(ctx(channel=channel)))
    assert await again.get_entry("shortterm:user:1:10") is None
    await again.flush()
    assert not journal.exists()
    stored = summaries(db_path)
    assert set(stored.values()) == {None}  # shared rows stay, without what user 1 shaped
    assert not any(key.startswith("shortterm:user:1:") for key in stored)
    await again.close()
    assert not journal.exists()


async def test_committed_deletes_leave_no_journal(open_memory: Opener, db_path: Path) -> None:
    """The journal is only written when a delete cannot be committed: a purge that lands
    costs no file of its own."""
    memory = await open_memory()
    await remember(memory, "X")
    await memory.clear_short_term_memory_for_user(1)
    await memory.clear_short_term_memory_for_channel(10)
    await memory.flush()
    assert not Path(f"{db_path}-stm-pending").exists()
    await memory.close()


@pytest.mark.process
async def test_cancelling_a_caller_returns_while_the_lock_is_held(
    open_memory: Opener, db_path: Path
) -> None:
    """With a long busy timeout, callers waiting on the locked file (a cold read in
    build_context, run_tool, flush, get_entry) return at once when cancelled, long before
    the lock goes; the memory still works after. (What a cancelled caller queued may still
    commit: it was not answered either way.)"""
    first = await open_memory()
    await remember(first, "KEPT")
    await first.close()
    memory = await open_memory(busy_timeout_ms=120_000)
    async with write_lock(db_path):
        started = memory.writer.round_trips
        await memory.clear_short_term_memory_for_channel(11)
        while True:  # until the clear waits for the lock (nothing signals it: it is a thread)
            if memory.writer.round_trips > started:
                break
            await asyncio.sleep(0.01)
        for call in (
            memory.build_context(ctx(channel=30, server=300)),
            memory.run_tool(ctx(), {"summary": "CANCELLED"}),
            memory.flush(),
            memory.get_entry("shortterm:server:300:31"),
        ):
            task = asyncio.ensure_future(call)
            await asyncio.sleep(0.05)  # it waits behind the clear: nothing can end it but this
            task.cancel()
            # Not awaited under a timeout: a cancellation that the timeout's own would
            # end must not pass for a prompt one.
            done, _ = await asyncio.wait({task}, timeout=30)
            assert task in done and task.cancelled(), "a cancelled caller kept waiting"
    await memory.flush()
    result = await memory.run_tool(ctx(), {"summary": "AFTER"})
    assert result.success, result.message
    await memory.close()
    assert summaries(db_path)["shortterm:server:100:10"] == "AFTER"


async def test_the_look_for_unfinished_purges_is_quiet_while_the_store_fails(
    memory: ShortTermMemory, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Every process looks for purges others left unfinished every 30 s; while the store
    cannot answer, a look neither fails nor logs a warning each time (the writer and the
    follower say the store is failing), and takes nothing over."""

    async def failing() -> list[int]:
        raise StoreError("short-term memory database is locked")

    monkeypatch.setattr(memory.store, "pending_sweeps", failing)
    with caplog.at_level("WARNING", logger="stm"):
        for _ in range(3):
            await memory._adopt_abandoned()
    assert not memory.writer.sweeping()
    assert [r.getMessage() for r in caplog.records] == []
