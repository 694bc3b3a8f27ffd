"""One call records a turn: ``stm.exchange`` builds the exchange from the turn's context,
and ``record_turn`` takes the reply's texts and ids from the messages Discord holds and
hands the event to the cog's capture listener."""

from __future__ import annotations

from pathlib import Path

import discord
import pytest
from discord.ext import commands

from cogs._utils.context import turn_context_from_message
from cogs.short_term_memory import COG_NAME, ShortTermMemoryCog, record_turn
from cogs.testing import offline_bot
from stm import GenerationFinished, STMConfig, TurnContext, exchange
from stm._keys import server_key
from stm.testing import ctx, turn


def test_the_exchange_takes_ids_and_names_from_the_context() -> None:
    context = TurnContext(
        user_id=5, channel_id=50, server_id=500, user_name="Ann", bot_name="Helper",
        user_text="hello", message_id=777,
    )  # fmt: skip
    event = exchange(context, "hi Ann", reply_id=778)
    user, bot = event.messages
    assert (user.role, user.content, user.author_id, user.speaker_name, user.message_id) == (
        "user", "hello", 5, "Ann", 777,
    )  # fmt: skip
    assert (bot.role, bot.content, bot.author_id, bot.speaker_name, bot.message_id) == (
        "assistant", "hi Ann", None, "Helper", 778,
    )  # fmt: skip
    assert event.context is context and event.stopped is False


def test_a_reply_in_parts_keeps_each_parts_id_and_names_can_be_given() -> None:
    event = exchange(
        ctx(user_text="x"), [("part one", 1), ("part two", 2)], user_text="said", user_name="A",
        bot_name="B", stopped=True,
    )  # fmt: skip
    assert [(m.content, m.message_id, m.speaker_name) for m in event.messages] == [
        ("said", None, "A"), ("part one", 1, "B"), ("part two", 2, "B"),
    ]  # fmt: skip
    assert event.stopped


@pytest.mark.parametrize(
    ("reply", "options"),
    [
        ([("a", 1)], {"reply_id": 2}),  # an id for the whole and ids per part
        ([("a",)], {}),
        ({"a": 1}, {}),
        (b"bytes", {}),
        ([("a", "not an id")], {}),
        ("a", {"reply_id": -1}),
    ],
)
def test_a_malformed_exchange_is_refused(reply: object, options: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        exchange(ctx(), reply, **options)  # type: ignore[arg-type]


def test_the_test_helper_builds_its_turns_the_same_way() -> None:
    event = turn(ctx(user=3, message_id=30), "hello", reply="ok")
    assert [m.speaker_name for m in event.messages] == ["user3", "Bot"]
    assert event.messages[0].message_id == 30


class SplitBot(commands.Bot):
    """Answers every message in two parts, and records the turn with ``record_turn``."""

    def __init__(self, config: STMConfig) -> None:
        super().__init__(command_prefix="!", intents=discord.Intents.default())
        self.config = config
        self.recorded: list[GenerationFinished] = []

    async def setup_hook(self) -> None:
        await self.add_cog(ShortTermMemoryCog(self, self.config))

    async def on_message(self, message: discord.Message) -> None:
        if message.author.bot:
            return
        turn_ctx = turn_context_from_message(message)
        first = await message.reply("first half")
        second = await message.channel.send("second half")
        self.recorded.append(record_turn(self, turn_ctx, [first, second]))


async def test_record_turn_captures_both_messages_with_their_ids(tmp_path: Path) -> None:
    bot = SplitBot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
    async with offline_bot(bot, bot_name="Split") as offline:
        general = offline.server("Harbor", ["general"])["general"]
        ann = offline.person("Ann")
        first, second = await offline.say(ann, general, "hello there")
        (event,) = bot.recorded
        assert [(m.content, m.message_id) for m in event.messages] == [
            ("hello there", offline.said[-1].id),
            ("first half", first.message_id),
            ("second half", second.message_id),
        ]
        assert [m.speaker_name for m in event.messages] == ["Ann", "Split", "Split"]
        memory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        entry = await memory.get_entry(server_key(general.guild_id or 0, general.id))
        assert entry is not None and len(entry.messages) == 3
        await offline.delete(second)  # the second part deleted on Discord
        entry = await memory.get_entry(server_key(general.guild_id or 0, general.id))
        assert entry is not None
        assert [m.content for m in entry.messages] == ["hello there", "first half"]


async def test_record_turn_with_nothing_sent_remembers_nothing(tmp_path: Path) -> None:
    bot = SplitBot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
    async with offline_bot(bot) as offline:
        general = offline.server("Harbor", ["general"])["general"]
        message = offline.message(offline.person("Ann"), general, "hello")
        event = record_turn(bot, turn_context_from_message(message), [])
        await offline.settle()
        assert event.stopped
        memory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        assert await memory.get_entry(server_key(general.guild_id or 0, general.id)) is None
        with pytest.raises(TypeError):
            record_turn(bot, turn_context_from_message(message), ["not a message"])  # type: ignore[list-item]
