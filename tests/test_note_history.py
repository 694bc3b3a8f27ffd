"""Note history: an entry keeps its last few versions of notes, shows them on request,
brings one back as an ordered shared change, and loses every one of them to each erasure
that reaches the notes (a purge, a channel clear, expiry, a message deleted on Discord)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from dataclasses import replace
from typing import Any

import pytest
from shredding import KeyWitness, file_bytes
from test_postgres_erasure import _connect

from stm import ShortTermMemory, STMConfig
from stm.store._base import Guard, LoadRows, NoteVersion, Overtaken, Saved, SaveDistilled
from stm.testing import Clock, ctx, turn

BOTH_STORES = True

SERVER_KEY = "shortterm:server:100:10"
USER_KEY = "shortterm:user:1:10"


async def _upgrade(
    memory: ShortTermMemory, text: str, user: int = 1, channel: int = 10, server: int = 100
) -> None:
    context = ctx(user, channel, server)
    await memory.build_context(context)
    result = await memory.run_tool(context, {"summary": text})
    assert result.success, result.message
    await memory.capture(turn(context, f"said {text}", "ok"))


async def _held(memory: ShortTermMemory) -> int:
    """Version rows in the store, whatever their row."""
    rows = await memory.store.execute("SELECT count(*) FROM stm_note_versions")
    return int(rows[0][0])


def _texts(history: list[NoteVersion]) -> list[str | None]:
    return [version.summary for version in history]


async def test_history_keeps_the_last_versions_newest_first_with_who_and_when(
    store_database: str,
) -> None:
    """The current notes and ``note_history`` earlier versions are kept, each with when
    and whose turn wrote it; older ones are pruned."""
    clock = Clock(1_000_000.0)
    config = STMConfig(database=store_database, note_history=2)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        for n, user in ((1, 1), (2, 2), (3, 1), (4, 2)):
            clock.advance(60)
            await _upgrade(memory, f"notes {n}", user=user)
        await memory.flush()
        history = await memory.history(SERVER_KEY)
        assert _texts(history) == ["notes 4", "notes 3", "notes 2"]
        assert [v.written_by for v in history] == [2, 1, 2]
        assert [v.current for v in history] == [True, False, False]
        assert history[0].written_at > history[1].written_at > history[2].written_at
        assert all(v.pin is not None for v in history)
        # The user key keeps only the turns of its own user.
        assert _texts(await memory.history(USER_KEY)) == ["notes 3", "notes 1"]


async def test_history_off_records_nothing(store_database: str) -> None:
    config = STMConfig(database=store_database, note_history=0)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "one")
        await _upgrade(memory, "two")
        await memory.flush()
        assert await memory.history(SERVER_KEY) == []
        assert await _held(memory) == 0
        assert not await memory.restore_notes(SERVER_KEY, 1)


async def test_a_restore_is_what_the_next_prompt_shows_and_is_itself_a_version(
    store_database: str,
) -> None:
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "the facts that matter")
        await _upgrade(memory, "a joke rewrote everything")
        await memory.flush()
        good = (await memory.history(SERVER_KEY))[1]
        assert await memory.restore_notes(SERVER_KEY, good.version, by=7)
        prompt = str(await memory.build_context(ctx(1, 10)))
        assert "the facts that matter" in prompt and "a joke" not in prompt
        entry = await memory.get_entry(SERVER_KEY)
        assert entry is not None and entry.summary == "the facts that matter"
        history = await memory.history(SERVER_KEY)
        assert history[0].restored_from == good.version and history[0].written_by == 7
        assert history[0].pin == (await memory.history(SERVER_KEY))[1].pin
        # A version the history does not hold brings nothing back.
        assert not await memory.restore_notes(SERVER_KEY, 10_000)
    async with ShortTermMemory.open(config) as memory:
        entry = await memory.get_entry(SERVER_KEY)
        assert entry is not None and entry.summary == "the facts that matter"


async def test_a_restore_refuses_an_upgrade_whose_turn_began_before_it(
    store_database: str,
) -> None:
    """Restore first, upgrade second: a turn that began before the restore was written
    from the notes it replaced, so its upgrade of that key is refused (here, and in
    another process through the feed)."""
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "good")
        await _upgrade(memory, "bad")
        await memory.flush()
        old = (await memory.history(SERVER_KEY))[1].version
        context = ctx(1, 10)
        await memory.build_context(context)  # the turn begins
        assert await memory.restore_notes(SERVER_KEY, old)
        result = await memory.run_tool(context, {"summary": "written from the bad notes"})
        assert not result.success
        entry = await memory.get_entry(SERVER_KEY)
        assert entry is not None and entry.summary == "good"
        # A turn that begins after the restore upgrades as usual.
        await _upgrade(memory, "better")
        assert (await memory.history(SERVER_KEY))[0].summary == "better"


async def test_the_store_refuses_an_upgrade_guarded_from_before_a_restore(
    store_database: str,
) -> None:
    """The check every process's upgrade passes in the writing transaction: a ``restore``
    change after the guard's position, of a key the upgrade writes, refuses it."""
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "good")
        await _upgrade(memory, "bad")
        await memory.flush()
        store = memory.store
        before = await store.current_position()
        assert await memory.restore_notes(SERVER_KEY, (await memory.history(SERVER_KEY))[1].version)
        [[row]] = await store.run([LoadRows((SERVER_KEY,), 0.0, 0.0)])

        def guard(after: int) -> Guard:
            return Guard(after, frozenset(), frozenset(), 100, own_origin="elsewhere")

        stale = SaveDistilled(replace(row, summary="from the bad notes"), guard(before))
        assert isinstance((await store.run([stale]))[0], Overtaken)
        fresh = SaveDistilled(
            replace(row, summary="from the good notes"), guard(await store.current_position())
        )
        assert isinstance((await store.run([fresh]))[0], Saved)


async def test_another_process_honours_a_restore(store_database: str) -> None:
    config = STMConfig(database=store_database, note_history=3, coherence_seconds=0.2)
    async with (
        ShortTermMemory.open(config) as here,
        ShortTermMemory.open(config) as there,
    ):
        await _upgrade(here, "good")
        await _upgrade(here, "bad")
        await here.flush()
        context = ctx(1, 10)
        assert "bad" in str(await there.build_context(context))
        old = (await here.history(SERVER_KEY))[1].version
        assert await here.restore_notes(SERVER_KEY, old)
        await there.follower.catch_up()
        await there.flush()
        refused = await there.run_tool(context, {"summary": "from the bad notes"})
        assert not refused.success
        prompt = str(await there.build_context(ctx(1, 10)))
        assert "good" in prompt and "bad" not in prompt


async def _erased(memory: ShortTermMemory, key: str, versions: list[int]) -> None:
    assert await memory.history(key) == []
    for version in versions:
        assert not await memory.restore_notes(key, version)


async def test_a_purge_erases_every_version_and_none_comes_back(store_database: str) -> None:
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "alice said one", user=1)
        await _upgrade(memory, "alice said two", user=1)
        await _upgrade(memory, "in another server", user=2, channel=11, server=200)
        await memory.flush()
        versions = [v.version for v in await memory.history(SERVER_KEY)]
        assert len(versions) == 2
        await memory.purge(1)
        await _erased(memory, SERVER_KEY, versions)
        # Notes the purge does not reach keep their history.
        assert _texts(await memory.history("shortterm:server:200:11")) == ["in another server"]


async def test_a_restored_version_keeps_its_provenance(store_database: str) -> None:
    """Notes brought back from a version Alice's turn wrote are cleared by her purge, even
    when the notes they replaced were written later by someone else."""
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "alice's words", user=1)
        await memory.capture(turn(ctx(2, 10), "bob", "ok"))
        await _upgrade(memory, "bob's version", user=2)
        await memory.flush()
        alice = (await memory.history(SERVER_KEY))[1]
        assert alice.summary == "alice's words"
        assert await memory.restore_notes(SERVER_KEY, alice.version)
        await memory.purge(1)
        entry = await memory.get_entry(SERVER_KEY)
        assert entry is None or not entry.summary
        await _erased(memory, SERVER_KEY, [alice.version])


async def test_a_channel_clear_erases_every_version(store_database: str) -> None:
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "one")
        await _upgrade(memory, "two")
        await memory.flush()
        versions = [v.version for v in await memory.history(SERVER_KEY)]
        await memory.clear_short_term_memory_for_channel(10)
        await memory.flush()
        await _erased(memory, SERVER_KEY, versions)
        assert await _held(memory) == 0


async def test_expiry_erases_every_version(store_database: str) -> None:
    clock = Clock(1_000_000.0)
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        await _upgrade(memory, "one")
        await _upgrade(memory, "two")
        await memory.flush()
        versions = [v.version for v in await memory.history(SERVER_KEY)]
        clock.advance(hours=config.summary_ttl_hours + 1)
        await memory.run_janitor()
        await memory.flush()
        await _erased(memory, SERVER_KEY, versions)
        assert await _held(memory) == 0


async def test_a_message_deleted_on_discord_erases_the_earlier_versions(
    store_database: str,
) -> None:
    """The current notes are kept and marked for rewriting, as before; the earlier
    versions, which may hold the message and cannot be rewritten, go."""
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        context = ctx(1, 10, message_id=555)
        await memory.build_context(context)
        await memory.capture(turn(context, "a secret", "ok"))
        await _upgrade(memory, "holds a secret")
        await _upgrade(memory, "still holds it")
        await memory.flush()
        versions = [v.version for v in await memory.history(SERVER_KEY)]
        await memory.forget_messages(10, [555])
        await memory.flush()
        await _erased(memory, SERVER_KEY, versions)
        # Other channels' histories are not touched.
        await _upgrade(memory, "elsewhere", channel=11)
        await memory.forget_messages(10, [556])
        await memory.flush()
        assert _texts(await memory.history("shortterm:server:100:11")) == ["elsewhere"]


async def test_a_user_export_includes_the_history_of_their_own_entries(
    store_database: str,
) -> None:
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "first of mine")
        await _upgrade(memory, "second of mine")
        await memory.flush()
        held = await memory.store.holdings_of_user(1, config.erasure)
        assert [row.key for row in held.own] == [USER_KEY]
        assert _texts(held.history[USER_KEY]) == ["second of mine", "first of mine"]


# -- bytes -----------------------------------------------------------------------------------
async def _version_cipher(memory: ShortTermMemory) -> list[Any]:
    rows = await memory.store.execute("SELECT summary FROM stm_note_versions")
    return [row[0] for row in rows]


@pytest.mark.parametrize("erase", ["purge", "clear", "expire"])
async def test_no_key_of_an_erased_version_is_left(
    store_kind: str, store_database: str, erase: str
) -> None:
    """The key that sealed every version of the erased notes is gone from SQLite's files
    (and PostgreSQL's key table), and so are the version rows; another channel's notes
    keep theirs."""
    clock = Clock(1_000_000.0)
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config, clock=clock) as memory:
        for text in ("version one", "version two", "version three"):
            await _upgrade(memory, text)
        await memory.flush()
        clock.advance(hours=config.summary_ttl_hours - 1)
        await _upgrade(memory, "kept elsewhere", user=2, channel=11, server=200)
        await memory.flush()
        assert len(await _version_cipher(memory)) == 3 + 3 + 1 + 1
        erased = {SERVER_KEY, USER_KEY}
        kept = {"shortterm:server:200:11", "shortterm:user:2:11"}
        if store_kind == "sqlite":
            witness = KeyWitness(store_database)
            witness.look()
            assert witness.left_in_files(erased) == len(witness.keys(erased)) == 2
        else:
            conn = await _connect(store_database)
            before = dict(
                await conn.fetch(
                    "SELECT m.key, k.key FROM short_term_memories m "
                    "JOIN stm_keys k ON k.slot = m.key_slot"
                )
            )
        if erase == "purge":
            await memory.purge(1)
        elif erase == "clear":
            await memory.clear_short_term_memory_for_channel(10)
        else:
            clock.advance(hours=2)
            await memory.run_janitor()
        await memory.flush()
        assert len(await _version_cipher(memory)) == 2  # the other channel's
    if store_kind == "sqlite":
        assert witness.left_in_files(erased) == 0
        data = file_bytes(store_database)
        assert all(key in data for key in witness.keys(kept))
        with sqlite3.connect(store_database) as db:
            assert db.execute("SELECT count(*) FROM stm_note_versions").fetchone()[0] == 2
        return
    try:
        table = {bytes(k) for (k,) in await conn.fetch("SELECT key FROM stm_keys")}
        assert not table & {bytes(before[key]) for key in erased}
        assert all(bytes(before[key]) in table for key in kept)
    finally:
        await conn.close()


def test_a_restore_is_journaled_and_replayed_as_it_was(tmp_path: Any) -> None:
    """A restore the database could not take yet is kept in the journal (key and version,
    never text) and replayed as the same change; a record naming no scope key is not."""
    from stm._journal import Journal, Pending
    from stm.store._base import RestoreNotes

    journal = Journal(tmp_path / "pending")
    restore = RestoreNotes(SERVER_KEY, 7, 501, 1_000.5, 3, expected=9)
    older = RestoreNotes(SERVER_KEY, 7, None, 1_000.5, 3)  # without the row's version
    journal.append([Pending(journal.new_id(), restore), Pending(journal.new_id(), older)])
    assert [p.op for p in journal.load()] == [restore, older]
    # Ids, times and counts only: the record has exactly these fields, no text.
    line = next(line for line in journal.path.read_bytes().splitlines() if line)
    fields = set(json.loads(line.split(b" ", 1)[1]))
    assert b"notes" not in journal.path.read_bytes()
    assert {"op", "key", "version", "by", "at", "history", "expected"} <= fields
    assert not fields & {"summary", "categories", "text"}
    bad = Journal(tmp_path / "bad")
    bad.append([Pending(bad.new_id(), RestoreNotes("not a key", 7, None, 1.0, 3))])
    assert bad.load() == []


async def test_a_restore_applied_twice_or_after_newer_notes_changes_nothing(
    store_database: str,
) -> None:
    """A restore is made against the row's version when asked: replayed from the journal
    after it committed (a crash before the journal heard), or committed after newer notes
    came, it brings nothing back and the newer notes stay."""
    from stm.store._base import Restored, RestoreNotes

    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "good notes")
        await _upgrade(memory, "bad notes")
        await memory.flush()
        history = await memory.history(SERVER_KEY)
        good, current = history[1], history[0]
        op = RestoreNotes(SERVER_KEY, good.version, None, 1.0, 3, expected=current.version)
        (first,) = await memory.store.run([op])
        assert isinstance(first, Restored)
        assert await memory.store.run([op]) == [None]  # the replay
        await _upgrade(memory, "newer notes")
        await memory.flush()
        assert await memory.store.run([op]) == [None]  # late, after newer notes
        history = await memory.history(SERVER_KEY)
        assert history[0].summary == "newer notes" and history[0].current
        assert [v.restored_from for v in history].count(good.version) == 1


async def test_a_restore_the_database_took_late_is_what_this_process_shows(
    store_database: str,
) -> None:
    """A restore that was not durable at once (DurabilityError, retried behind the turn)
    is read back into this process's cache when it commits: the prompt shows the restored
    notes, though this process skips its own changes in the feed."""
    from stm import DurabilityError
    from stm.testing import faulty_memory

    config = STMConfig(database=store_database, note_history=3)
    memory, store = await faulty_memory(config)
    async with memory:
        await _upgrade(memory, "the facts that matter")
        await _upgrade(memory, "a joke rewrote everything")
        await memory.flush()
        good = (await memory.history(SERVER_KEY))[1]
        store.hold()
        restoring = asyncio.create_task(memory.restore_notes(SERVER_KEY, good.version))
        await store.holding()  # it reads the notes as they are first
        store.release()
        store.hold()
        await store.holding()  # then the restore's own batch: the database is away
        store.broken = True
        store.release()
        with pytest.raises(DurabilityError):
            await restoring
        store.broken = False
        await memory.flush()  # the retry commits it
        await memory._background.gather()  # and the notes here are read again
        entry = await memory.get_entry(SERVER_KEY)
        assert entry is not None and entry.summary == "the facts that matter"
        prompt = str(await memory.build_context(ctx(1, 10)))
        assert "the facts that matter" in prompt and "a joke" not in prompt


async def test_history_turned_off_hides_and_then_erases_what_it_kept(
    store_database: str,
) -> None:
    """With ``STM_NOTE_HISTORY=0`` the versions kept before are neither shown nor
    restorable, and each key's next upgrade erases them from the database."""
    config = STMConfig(database=store_database, note_history=3)
    async with ShortTermMemory.open(config) as memory:
        await _upgrade(memory, "first")
        await _upgrade(memory, "second")
        await memory.flush()
        old = (await memory.history(SERVER_KEY))[1].version
        assert await _held(memory) == 4  # two versions of the server's key, two of the user's
    off = STMConfig(database=store_database, note_history=0)
    async with ShortTermMemory.open(off) as memory:
        assert await memory.history(SERVER_KEY) == []
        assert not await memory.restore_notes(SERVER_KEY, old)
        await _upgrade(memory, "third")
        await memory.flush()
        assert await _held(memory) == 0
