"""Captured messages carry their Discord message ids, in open and packed windows alike."""

from __future__ import annotations

from pathlib import Path

from discord_fakes import harness

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm.keys import user_key


def turn(ctx: TurnContext, text: str, said: int | None, answered: int | None) -> GenerationFinished:
    return GenerationFinished(
        context=ctx,
        messages=[
            DialogueMessage(role="user", content=text, author_id=ctx.user_id, message_id=said),
            DialogueMessage(role="assistant", content="ok " + text, message_id=answered),
        ],
    )


async def test_ids_are_kept_in_open_and_packed_windows(tmp_path: Path) -> None:
    """The ids a capture was given come back from get_entry, also once the window is packed
    (one open window: the first channel's is packed when the second is captured)."""
    async with ShortTermMemory.open(STMConfig(database=str(tmp_path / "m.sqlite3"))) as memory:
        memory.cache.open_windows = 1
        first = TurnContext(user_id=7, channel_id=70)
        second = TurnContext(user_id=7, channel_id=71)
        await memory.capture(turn(first, "one", 1001, 1002))
        await memory.capture(turn(first, "two", None, 1004))
        await memory.capture(turn(second, "three", 1005, None))
        packed = memory.cache.peek(user_key(7, 70))
        assert packed is not None and packed.messages.packed_form
        entry = await memory.get_entry(user_key(7, 70))
        assert entry is not None
        assert [m.message_id for m in entry.messages] == [1001, 1002, None, 1004]
        assert packed.messages.message_ids() == {1001, 1002, 1004}
        other = await memory.get_entry(user_key(7, 71))
        assert other is not None
        assert [m.message_id for m in other.messages] == [1005, None]


async def test_turn_context_from_message_carries_the_message_id(tmp_path: Path) -> None:
    async with harness(tmp_path) as h:
        message = h.world.message(h.alice, h.general, "hello")
        ctx = h.world.context(h.alice, h.general, "hello")
        assert ctx.message_id is not None and ctx.message_id != message.id  # each its own
        from cogs.utils.context import turn_context_from_message

        assert turn_context_from_message(message).message_id == message.id
