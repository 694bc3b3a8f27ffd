"""Deletion: /refresh and user purges evict at once, delete durably, never resurrect."""

from __future__ import annotations

import asyncio
from pathlib import Path

from helpers import Opener
from shredding import KeyWitness, plain_text, stored_rows, stored_text

from stm import ShortTermMemory, STMConfig
from stm.testing import Clock, ctx, faulty_memory, turn

# Each test that does not inspect the SQLite file runs on both stores.
BOTH_STORES = True


async def stored_keys(database: str) -> set[str]:
    """The key of every row, on either store."""
    return {row.key for row in await stored_rows(database)}


def file_bytes(db_path: object) -> bytes:
    data = b""
    for suffix in ("", "-wal", "-journal"):
        path = Path(f"{db_path}{suffix}")
        if path.exists():
            data += path.read_bytes()
    return data


async def remember(memory: ShortTermMemory, text: str, **where: object) -> None:
    c = ctx(**where)  # type: ignore[arg-type]
    await memory.capture(turn(c, f"crude {text}"))
    assert (await memory.run_tool(c, {"summary": text})).success


async def test_channel_clear_removes_every_scope_and_persona(
    memory: ShortTermMemory, store_database: str
) -> None:
    """/refresh: user and server scopes, all personas of the channel; other channels stay."""
    await remember(memory, "ALPHA-10")
    await remember(memory, "BETA-10", persona=3)
    await remember(memory, "C", user=2)
    await remember(memory, "KEEP", channel=11)
    await memory.flush()
    await memory.clear_short_term_memory_for_channel(10)
    # Evicted at once, before the durable delete.
    for key in (
        "shortterm:server:100:10",
        "shortterm:user:1:10",
        "shortterm:server:100:10:3",
        "shortterm:user:2:10",
    ):
        assert await memory.get_entry(key) is None
    assert "ALPHA-10" not in str(await memory.build_context(ctx(channel=12)))
    await memory.flush()
    assert await stored_keys(store_database) == {
        "shortterm:user:1:11",
        "shortterm:server:100:11",
    }


async def test_user_purge_semantics(memory: ShortTermMemory) -> None:
    """Own entries deleted; their turns removed everywhere; distilled content they
    contributed to dropped; other users' memory kept."""
    shared = ctx(user=1)
    await memory.capture(turn(shared, "ALICE-WORDS", "REPLY-TO-ALICE"))
    await memory.capture(turn(ctx(user=2), "BOB-WORDS", "REPLY-TO-BOB"))
    assert (await memory.run_tool(ctx(user=2), {"summary": "Alice and Bob chat"})).success
    # In another server: a channel of server 100 would show Alice's words from #10 and
    # so credit her (see test_provenance.py).
    await remember(memory, "BOB-ONLY", user=2, channel=20, server=200)
    await memory.clear_short_term_memory_for_user(1)
    server = await memory.get_entry("shortterm:server:100:10")
    assert server is not None
    assert [m.content for m in server.messages] == ["BOB-WORDS", "REPLY-TO-BOB"]
    assert server.summary is None  # Alice's words were in the window at the upgrade
    assert await memory.get_entry("shortterm:user:1:10") is None
    bob_elsewhere = await memory.get_entry("shortterm:server:200:20")
    assert bob_elsewhere is not None and bob_elsewhere.summary == "BOB-ONLY"
    bob_user = await memory.get_entry("shortterm:user:2:10")
    assert bob_user is not None and bob_user.summary is None


async def test_user_purge_within_one_server(memory: ShortTermMemory) -> None:
    """With server_id only that server's memory of the user goes; DMs and others stay."""
    await remember(memory, "IN-100")
    await remember(memory, "IN-200", server=200, channel=20)
    await remember(memory, "IN-DM", server=None, channel=30)
    await memory.clear_short_term_memory_for_user(1, server_id=100)
    assert await memory.get_entry("shortterm:server:100:10") is None or (
        (await memory.get_entry("shortterm:server:100:10")).summary is None  # type: ignore[union-attr]
    )
    assert await memory.get_entry("shortterm:user:1:10") is None
    e200 = await memory.get_entry("shortterm:server:200:20")
    dm = await memory.get_entry("shortterm:user:1:30")
    assert e200 is not None and e200.summary == "IN-200"
    assert dm is not None and dm.summary == "IN-DM"


async def test_purge_reaches_rows_not_in_the_cache(
    open_memory: Opener, store_kind: str, store_database: str
) -> None:
    """After a restart the purge still removes the user's rows and contributed summaries
    (and, on SQLite, whose files the test reads, every byte of them)."""
    first = await open_memory()
    await remember(first, "ROW-OF-USER-ONE")
    await remember(first, "ROW-OF-USER-TWO", user=2, channel=20, server=200)
    await first.close()
    second = await open_memory()
    await second.clear_short_term_memory_for_user(1)
    await second.flush()
    assert await stored_keys(store_database) == {
        "shortterm:user:2:20",
        "shortterm:server:200:20",
        "shortterm:server:100:10",
    }
    text = await stored_text(store_database)
    assert "ROW-OF-USER-ONE" not in text and "ROW-OF-USER-TWO" in text
    if store_kind == "sqlite":
        assert b"ROW-OF-USER-ONE" not in file_bytes(store_database)


async def test_purged_text_leaves_no_bytes_on_disk(
    memory: ShortTermMemory, db_path: object
) -> None:
    """After purge + flush the text is nowhere in the files, nor any key that encrypted it."""
    witness = KeyWitness(db_path)
    for i in range(30):
        await remember(memory, f"PURGE-NEEDLE-{i:03d} " + "pad " * 50, channel=1000 + i)
    await memory.flush()
    witness.look()
    assert "PURGE-NEEDLE-007" in plain_text(db_path)
    purged = witness.rows()
    assert witness.left_in_files(purged) == len(witness.keys(purged)) > 0
    await memory.clear_short_term_memory_for_user(1)
    await memory.flush()
    assert b"PURGE-NEEDLE" not in file_bytes(db_path)
    assert witness.left_in_files(purged) == 0


async def test_upgrade_racing_a_clear_does_not_come_back(
    config: STMConfig, clock: Clock, store_database: str
) -> None:
    """A clear issued while an upgrade is in flight wins in the cache and in the file."""
    memory, store = await faulty_memory(config, clock=clock)
    c = ctx()
    await memory.capture(turn(c, "x"))
    store.hold()
    upgrade = asyncio.create_task(memory.run_tool(c, {"summary": "RACING"}))
    await store.holding()  # the upgrade's commit is in flight
    await memory.clear_short_term_memory_for_channel(10)
    store.release()
    await upgrade
    await memory.flush()
    assert await memory.get_entry("shortterm:server:100:10") is None
    assert await stored_keys(store_database) == set()
    await memory.close()


async def test_hydration_racing_a_clear_does_not_resurrect(
    open_memory: Opener, config: STMConfig, clock: Clock
) -> None:
    """A row read just before a clear is not put back into the cache."""
    first = await open_memory()
    await remember(first, "OLD")
    await first.close()
    second, store = await faulty_memory(config, clock=clock)
    store.hold()
    reading = asyncio.create_task(second.build_context(ctx()))
    await store.holding()  # the row is being read
    await second.clear_short_term_memory_for_channel(10)
    store.release()
    context = await reading
    assert "OLD" not in str(context)
    assert await second.get_entry("shortterm:server:100:10") is None
    await second.close()


async def test_capture_after_clear_is_new_memory(memory: ShortTermMemory) -> None:
    """What is written after a delete is kept; what was before is not."""
    await remember(memory, "BEFORE")
    await memory.clear_short_term_memory_for_channel(10)
    await memory.capture(turn(ctx(), "AFTER"))
    await memory.flush()
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary is None
    assert [m.content for m in entry.messages] == ["AFTER", "ok"]


async def test_no_stale_copies_in_live_pages_after_a_purge(
    memory: ShortTermMemory, db_path: object
) -> None:
    """Rebalancing pages makes SQLite leave copies of moved cells in the unused middle of
    pages still in use (secure delete does not reach it), so copies of the purged rows'
    ciphertext may survive; none of their keys does, and the other user's key does."""
    witness = KeyWitness(db_path)
    for i in range(30):
        await remember(memory, f"STALE-NEEDLE-{i:03d} " + "pad " * 120, channel=1000 + i)
        await memory.flush()
        witness.look()
    await remember(memory, "OTHER-USER-KEEPS-THIS", user=2, channel=999, server=200)
    await memory.flush()
    witness.look()
    await memory.clear_short_term_memory_for_user(1)
    await memory.flush()
    assert b"STALE-NEEDLE" not in file_bytes(db_path)
    assert witness.left_in_files(witness.rows("user:1:")) == 0
    assert witness.left_in_files(witness.rows("user:2:")) == 1
    assert "OTHER-USER-KEEPS-THIS" in plain_text(db_path)
