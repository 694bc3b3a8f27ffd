"""Found in review: the bundled bot's long replies and messages deleted on Discord."""

from __future__ import annotations

from pathlib import Path

from stm import STMConfig


async def test_deleting_any_part_of_a_long_reply_removes_it_from_memory(tmp_path: Path) -> None:
    """A reply longer than one Discord message is sent in parts, and the memory holds each
    part with its own id: a moderator who deletes the second part (the one that said
    something wrong) removes it from the bot's memory."""
    from cogs.short_term_memory import COG_NAME
    from cogs.testing import offline_bot
    from host.discord_bot import ChatBot
    from host.models import ScriptedModel
    from stm._keys import server_key

    bot = ChatBot(ScriptedModel(), stm_config=STMConfig(database=str(tmp_path / "m.sqlite3")))
    async with offline_bot(bot, bot_name="Helper") as offline:
        general = offline.server("Harbor", ["general"], guild_id=4100)["general"]
        ann = offline.person("Ann")
        text = "word " * 390 + "the tail that was wrong" * 3  # Nitro members send 4,000
        replies = await offline.say(ann, general, f"{offline.mention} {text}")
        assert len(replies) == 2 and "tail that was wrong" in replies[1].content
        memory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        await offline.gateway(
            "MESSAGE_DELETE",
            {"id": str(replies[1].message_id), "channel_id": str(general.id), "guild_id": "4100"},
        )
        entry = await memory.get_entry(server_key(4100, general.id))
        assert entry is not None
        answers = [m.content for m in entry.messages if m.role == "assistant"]
        assert not any(replies[1].content in a for a in answers), answers
        await memory.flush()
