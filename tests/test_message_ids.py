"""Captured messages carry their Discord message ids, in open and packed windows alike."""

from __future__ import annotations

from pathlib import Path

from discord_fakes import harness

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm._keys import user_key


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
        from cogs._utils.context import turn_context_from_message

        assert turn_context_from_message(message).message_id == message.id


async def test_the_bundled_bot_passes_both_ids_and_a_deleted_reply_goes(tmp_path: Path) -> None:
    """The bundled bot captures its turn with the user's message id and its reply's; when
    a moderator deletes the reply on Discord, it leaves the memory."""
    from cogs.short_term_memory import COG_NAME
    from cogs.testing import offline_bot
    from host.discord_bot import ChatBot
    from host.models import ScriptedModel
    from stm._keys import server_key

    bot = ChatBot(ScriptedModel(), stm_config=STMConfig(database=str(tmp_path / "m.sqlite3")))
    async with offline_bot(bot, bot_name="Helper") as offline:
        general = offline.server("Harbor", ["general"], guild_id=4100)["general"]
        ann = offline.person("Ann")
        (reply,) = await offline.say(ann, general, f"{offline.mention} hello there")
        memory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        entry = await memory.get_entry(server_key(4100, general.id))
        assert entry is not None
        user_message, answer = entry.messages
        assert user_message.content == "hello there" and user_message.message_id is not None
        assert answer.message_id == reply.message_id is not None
        await offline.gateway(
            "MESSAGE_DELETE",
            {"id": str(reply.message_id), "channel_id": str(general.id), "guild_id": "4100"},
        )
        entry = await memory.get_entry(server_key(4100, general.id))
        assert entry is not None and [m.content for m in entry.messages] == ["hello there"]
        await memory.flush()
