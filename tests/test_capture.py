"""Stage 01, passive capture: keys, window, counters, skips, and no round trips per turn."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from pathlib import Path

from helpers import Opener
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig
from stm.store._shred import readable
from stm.testing import ctx, turn

# Each test that does not inspect the SQLite file runs on both stores.
BOTH_STORES = True


async def test_server_turn_is_captured_under_both_keys(memory: ShortTermMemory) -> None:
    """A server turn lands in the user key and the server key."""
    await memory.capture(turn(ctx(), "hello there", "hi!"))
    for key in ("shortterm:user:1:10", "shortterm:server:100:10"):
        entry = await memory.get_entry(key)
        assert entry is not None
        assert [m.content for m in entry.messages] == ["hello there", "hi!"]


async def test_dm_turn_is_captured_only_under_the_user_key(memory: ShortTermMemory) -> None:
    """A DM has no server key; the persona suffix appears when a persona is set."""
    await memory.capture(turn(ctx(server=None, persona=7), "psst"))
    assert await memory.get_entry("shortterm:user:1:10:7") is not None
    assert await memory.get_entry("shortterm:user:1:10") is None
    assert memory.cache.keys_of_channel(10) == ["shortterm:user:1:10:7"]


async def test_window_keeps_the_newest_messages(open_memory: Opener) -> None:
    """Only the newest max_messages_per_channel messages are kept."""
    memory = await open_memory(max_messages_per_channel=3)
    for i in range(5):
        await memory.capture(turn(ctx(), f"q{i}", f"a{i}"))
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert [m.content for m in entry.messages] == ["a3", "q4", "a4"]


async def test_capture_carries_distilled_content_forward(memory: ShortTermMemory) -> None:
    """Passive capture never touches summary, categories or the refresh count."""
    c = ctx()
    await memory.capture(turn(c, "first"))
    assert (await memory.run_tool(c, {"summary": "Kept summary"})).success
    await memory.capture(turn(ctx(), "second"))
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert entry.summary == "Kept summary"
    assert entry.last_refreshed_turn == 1
    assert entry.turns_since_refresh == 1


async def test_every_scope_counts_the_turns_it_keeps(memory: ShortTermMemory) -> None:
    """A turn counts on every key it is kept under: in a server its user key and its
    server key say the same of the same turns; in a DM the user key counts."""
    for _ in range(3):
        await memory.capture(turn(ctx(), "x"))
        await memory.capture(turn(ctx(channel=20, server=None), "y"))
    server = await memory.get_entry("shortterm:server:100:10")
    user_in_server = await memory.get_entry("shortterm:user:1:10")
    dm = await memory.get_entry("shortterm:user:1:20")
    assert server is not None and user_in_server is not None and dm is not None
    assert (server.turns_since_refresh, user_in_server.turns_since_refresh) == (3, 3)
    assert dm.turns_since_refresh == 3


async def test_skipped_turns(memory: ShortTermMemory) -> None:
    """Stopped generations, empty turns, opted-out users and disabled servers are skipped."""
    await memory.capture(turn(ctx(), "stopped", stopped=True))
    await memory.capture(GenerationFinished(context=ctx(), messages=[]))
    await memory.capture(
        GenerationFinished(context=ctx(), messages=[DialogueMessage(role="user", content="   ")])
    )
    await memory.set_user_opt_out(2, True)
    await memory.capture(turn(ctx(user=2), "do not keep me"))
    await memory.update_server_settings(300, enabled=False)
    await memory.capture(turn(ctx(server=300, channel=30), "off"))
    assert len(memory.cache) == 0
    await memory.set_user_opt_out(2, False)
    await memory.capture(turn(ctx(user=2), "keep me now"))
    assert await memory.get_entry("shortterm:user:2:10") is not None


async def test_turn_path_makes_no_round_trips(open_memory: Opener) -> None:
    """Once a key is known, capture and build_context do not touch the database."""
    memory = await open_memory(write_behind_seconds=60)
    c = ctx()
    await memory.capture(turn(c, "warm"))
    await memory.build_context(c)
    before = memory.stats["round_trips"]
    for i in range(200):
        await memory.capture(turn(c, f"turn {i}"))
        await memory.build_context(c)
    assert memory.stats["round_trips"] == before


async def test_identity_rows_are_written_behind_in_one_batch(
    open_memory: Opener, db_path: object
) -> None:
    """Identity rows and counters reach the database in a batch, without crude text."""
    memory = await open_memory(write_behind_seconds=60)
    for channel in range(5):
        await memory.capture(turn(ctx(channel=channel), f"SECRET-CRUDE-{channel}"))
    await memory.build_context(ctx(channel=4))
    await memory.flush()
    # Ten new keys: their reads and identity rows share commits instead of one each.
    assert memory.stats["commits"] <= 2
    with sqlite3.connect(str(db_path)) as db:
        rows = db.execute(
            "SELECT key, turns_since_refresh, summary FROM short_term_memories ORDER BY key"
        ).fetchall()
    assert len(rows) == 10
    assert {r[0]: r[1] for r in rows}["shortterm:server:100:3"] == 1
    assert all(r[2] is None for r in rows)


async def test_crude_messages_never_reach_the_file(
    memory: ShortTermMemory, db_path: object
) -> None:
    """Crude messages exist only in memory: not in the database file nor its WAL."""
    await memory.capture(turn(ctx(), "CRUDE-NEEDLE-7781", "REPLY-NEEDLE-7781"))
    assert (await memory.run_tool(ctx(), {"summary": "distilled only"})).success
    await memory.flush()
    for suffix in ("", "-wal"):
        path = f"{db_path}{suffix}"
        if os.path.exists(path):
            assert b"NEEDLE-7781" not in Path(path).read_bytes()
    with sqlite3.connect(str(db_path)) as db:
        assert db.execute(
            f"SELECT count(*) FROM {readable(db)} WHERE summary = ?", ("distilled only",)
        ).fetchone() == (2,)


def batched(context: object, said: list[tuple[int, str]], reply: str) -> GenerationFinished:
    """One turn carrying several authors' messages (a host that batches a busy channel)."""
    return GenerationFinished(
        context=context,  # type: ignore[arg-type]
        messages=[
            *(DialogueMessage(role="user", content=text, author_id=a) for a, text in said),
            DialogueMessage(role="assistant", content=reply),
        ],
    )


async def test_a_purge_reaches_another_authors_message_in_a_turn(
    memory: ShortTermMemory,
) -> None:
    """Bob wrote a message inside Alice's turn: purging Bob removes it and the bot's reply
    written from a prompt that showed it, and drops the summary made from it, while
    Alice's own words stay."""
    alice = ctx(user=1)
    await memory.capture(batched(alice, [(1, "ALICE-ASKS"), (2, "BOB-INTERJECTS")], "REPLY"))
    assert (await memory.run_tool(alice, {"summary": "Bob said BOB-INTERJECTS"})).success
    # And a turn no upgrade followed: only the capture can have indexed Bob's message.
    await memory.capture(batched(ctx(user=1, channel=12), [(2, "BOB-AGAIN")], "REPLY-12"))
    await memory.clear_short_term_memory_for_user(2)
    for key in ("shortterm:server:100:12", "shortterm:user:1:12"):
        entry = await memory.get_entry(key)
        assert entry is None or [m.content for m in entry.messages] == []
    for key in ("shortterm:server:100:10", "shortterm:user:1:10"):
        entry = await memory.get_entry(key)
        assert entry is not None
        assert [m.content for m in entry.messages] == ["ALICE-ASKS"]
        assert entry.summary is None
    assert "BOB-INTERJECTS" not in str(await memory.build_context(ctx(user=3, channel=11)))


async def test_an_opted_out_authors_message_is_not_captured_in_anyones_turn(
    memory: ShortTermMemory,
) -> None:
    """Bob paused memory: his message inside Alice's turn is left out, the rest is kept."""
    await memory.set_user_opt_out(2, True)
    await memory.capture(batched(ctx(user=1), [(1, "ALICE"), (2, "BOB-PAUSED")], "REPLY"))
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert [m.content for m in entry.messages] == ["ALICE", "REPLY"]
    assert memory.cache.keys_of_user(2) == []


@settings(max_examples=100, deadline=None, database=None, derandomize=True)
@given(
    turns=st.lists(
        st.tuples(st.sampled_from((1, 2, 3)), st.lists(st.sampled_from((1, 2, 3)), max_size=3)),
        min_size=1,
        max_size=5,
    ),
    paused=st.sets(st.sampled_from((1, 2, 3))),
)
def test_opted_out_authors_are_left_out_of_any_turn(
    turns: list[tuple[int, list[int]]], paused: set[int]
) -> None:
    """Any turns with any authors, any users paused: no paused author's message and no
    turn of a paused user is captured; every other message is."""

    async def play() -> None:
        config = STMConfig(database=":memory:", max_messages_per_channel=1000)
        async with ShortTermMemory.open(config) as memory:
            for user in paused:
                await memory.set_user_opt_out(user, True)
            expected: list[str] = []
            for n, (user, authors) in enumerate(turns):
                said = [(a, f"w{a}t{user}n{n}{i}") for i, a in enumerate(authors)]
                await memory.capture(batched(ctx(user=user), said, f"reply{n}"))
                if user not in paused:
                    expected += [text for a, text in said if a not in paused] + [f"reply{n}"]
            entry = await memory.get_entry("shortterm:server:100:10")
            held = [m.content for m in entry.messages] if entry else []
            assert held == expected
            for user in paused:
                assert memory.cache.keys_of_user(user) == []

    asyncio.run(play())


async def test_a_context_changed_after_a_turn_is_keyed_by_its_new_ids(
    memory: ShortTermMemory,
) -> None:
    """The turn's keys are made once and kept on its context: a host that reuses the context
    for another channel, server or user has them made again from the new ids."""
    c = ctx()
    await memory.capture(turn(c, "first"))
    await memory.build_context(c)
    c.channel_id = 11
    await memory.capture(turn(c, "second"))
    c.server_id = None
    await memory.capture(turn(c, "third"))
    c.user_id = 2
    await memory.capture(turn(c, "fourth"))
    expected = {
        "shortterm:server:100:10": "first",
        "shortterm:server:100:11": "second",
        "shortterm:user:1:11": "third",
        "shortterm:user:2:11": "fourth",
    }
    for key, text in expected.items():
        entry = await memory.get_entry(key)
        assert entry is not None, key
        assert [m.content for m in entry.messages if m.role == "user"][-1] == text, key
    # The user key of the DM turn (server None) holds the server turn's words too: same
    # user, same channel; the server key of channel 11 never saw the DM turn.
    server_11 = await memory.get_entry("shortterm:server:100:11")
    assert server_11 is not None and "third" not in [m.content for m in server_11.messages]
