"""Overtaken turns: a deletion of anything a turn's prompt showed, or of its own scope, made
while the turn runs, refuses its upgrade and keeps its capture from bringing words back."""

from __future__ import annotations

from pathlib import Path

from conftest import ctx, turn

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig

GENERAL, RANDOM = 10, 11
ALICE, BOB, CAROL = 1, 2, 3


def opened(tmp_path: Path) -> object:
    return ShortTermMemory.open(STMConfig(database=str(tmp_path / "stm.sqlite3")))


async def shown_from_random(memory: ShortTermMemory) -> object:
    """Alice speaks in #random; Bob's turn in #general begins and its prompt shows her."""
    await memory.capture(turn(ctx(user=ALICE, channel=RANDOM), "ALICE-WORDS"))
    bob = ctx(user=BOB, channel=GENERAL)
    assert "ALICE-WORDS" in str(await memory.build_context(bob))
    return bob


async def everywhere(memory: ShortTermMemory) -> str:
    parts = []
    for entry in list(memory.cache):
        parts.extend(m.content for m in entry.messages)
        parts.append(entry.summary or "")
    for user in (ALICE, BOB, CAROL):
        for channel in (GENERAL, RANDOM):
            parts.append(str(await memory.build_context(ctx(user=user, channel=channel))))
    return "\n".join(parts)


async def test_a_refresh_of_a_channel_the_prompt_showed_refuses_the_upgrade(
    tmp_path: Path,
) -> None:
    """/refresh of #random during Bob's turn in #general: his summary could restore it."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_channel(RANDOM)
        result = await memory.run_tool(bob, {"summary": "Alice said ALICE-WORDS"})
        assert not result.success and "Nothing was saved" in result.message
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_a_purge_of_a_user_the_prompt_showed_refuses_the_upgrade(tmp_path: Path) -> None:
    """Purging Alice during Bob's turn, whose prompt showed her words."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_user(ALICE)
        result = await memory.run_tool(bob, {"summary": "Alice said ALICE-WORDS"})
        assert not result.success
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_a_purge_that_changed_the_turns_own_window_refuses_the_upgrade(
    tmp_path: Path,
) -> None:
    """Carol's message is in #general's window (the model sees it in the channel's history);
    purging her during Bob's turn there refuses his summary of it."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        await memory.capture(turn(ctx(user=CAROL, channel=GENERAL), "CAROL-WORDS"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_user(CAROL)
        result = await memory.run_tool(bob, {"summary": "Carol said CAROL-WORDS"})
        assert not result.success
        assert "CAROL-WORDS" not in await everywhere(memory)


async def test_a_purge_of_someone_the_turn_never_showed_does_not_refuse_it(
    tmp_path: Path,
) -> None:
    """Precision: a purge in the server of a user whose words the turn did not show (their
    channel is private, so never recalled) leaves the turn's upgrade alone."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        private = ctx(user=CAROL, channel=12, channel_is_private=True)
        await memory.capture(turn(private, "carol in private"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_user(CAROL)
        result = await memory.run_tool(bob, {"summary": "BOB-SUMMARY"})
        assert result.success, result.message


async def test_a_capture_of_a_turn_begun_before_its_users_purge_is_dropped(
    tmp_path: Path,
) -> None:
    """Alice's turn began (its prompt was built), she is purged, then the host dispatches the
    turn's messages: they are hers, and must not come back."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        alice = ctx(user=ALICE, channel=GENERAL)
        await memory.build_context(alice)
        await memory.clear_short_term_memory_for_user(ALICE)
        await memory.capture(turn(alice, "ALICE-LATE", "REPLY-TO-ALICE"))
        text = await everywhere(memory)
        assert "ALICE-LATE" not in text and "REPLY-TO-ALICE" not in text


async def test_a_capture_of_a_turn_begun_before_its_channels_refresh_is_dropped(
    tmp_path: Path,
) -> None:
    """The turn's words predate the /refresh of its channel."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_channel(GENERAL)
        await memory.capture(turn(bob, "BEFORE-REFRESH"))
        assert "BEFORE-REFRESH" not in await everywhere(memory)
        # A turn that begins after the refresh is new memory.
        await memory.capture(turn(ctx(user=BOB, channel=GENERAL), "AFTER-REFRESH"))
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is not None and entry.messages[0].content == "AFTER-REFRESH"


async def test_a_reply_quoting_recalled_words_purged_during_the_turn_is_not_captured(
    tmp_path: Path,
) -> None:
    """Bob's prompt showed Alice's words; the bot's reply repeats them; Alice is purged before
    the capture: the reply must not carry them back into #general."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_user(ALICE, server_id=100)
        await memory.capture(
            GenerationFinished(
                context=bob,  # type: ignore[arg-type]
                messages=[
                    DialogueMessage(role="user", content="what did alice say?", author_id=BOB),
                    DialogueMessage(role="assistant", content="She said ALICE-WORDS"),
                ],
            )
        )
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_a_capture_overtaken_by_an_unrelated_delete_is_kept(tmp_path: Path) -> None:
    """A /refresh of a channel the turn never showed does not cost the turn its capture."""
    async with opened(tmp_path) as memory:  # type: ignore[attr-defined]
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_channel(RANDOM)
        await memory.capture(turn(bob, "BOB-KEPT"))
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is not None and entry.messages[0].content == "BOB-KEPT"
