"""The sample bot, tested offline with discord_stm.testing: no token, no network.

Messages and slash commands arrive as gateway payloads; what the bot sends comes back
as replies. Run from this folder: ``python -m pytest``.
"""

from __future__ import annotations

from pathlib import Path

from discord_stm.short_term_memory import COG_NAME, turn_context_from_message
from discord_stm.testing import ADMINISTRATOR, offline_bot, option, subcommand

from bot import SampleBot
from stm import STMConfig


def sample_bot(tmp_path: Path) -> SampleBot:
    return SampleBot(STMConfig(database=str(tmp_path / "memory.sqlite3")))


async def test_a_mention_gets_an_answer_and_is_remembered(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path), bot_name="Sample") as discord:
        general = discord.server("Harbor", ["general"])["general"]
        ann = discord.person("Ann")
        (reply,) = await discord.say(ann, general, f"{discord.mention} we plan a trip to Lisbon")
        assert reply.kind == "message" and reply.channel_id == general.id
        assert reply.content.startswith("You said: we plan a trip to Lisbon")
        (shown,) = await discord.command("memory", subcommand("show"), user=ann, channel=general)
        assert shown.ephemeral and "we plan a trip to Lisbon" in shown.content
        # The bot's own lines carry its name, not a placeholder.
        assert "Sample" in shown.content and "Assistant" not in shown.content


async def test_a_message_without_a_mention_is_not_answered(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path)) as discord:
        general = discord.server("Harbor")["general"]
        assert await discord.say(discord.person("Ann"), general, "just chatting") == []


async def test_another_channel_of_the_server_recalls_the_upgraded_notes(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path), bot_name="Sample") as discord:
        channels = discord.server("Harbor", ["general", "games"])
        ann = discord.person("Ann")
        await discord.say(ann, channels["general"], f"{discord.mention} we plan a trip to Lisbon")
        # What the model would do when nudged: call the memory's tool for this channel.
        ctx = turn_context_from_message(discord.message(ann, channels["general"], ""))
        result = await discord.bot.tools.execute(  # type: ignore[attr-defined]
            "update_short_term_memory", ctx, '{"summary": "Ann plans a Lisbon trip"}'
        )
        assert result.success, result.message
        (reply,) = await discord.say(ann, channels["games"], f"{discord.mention} what was it?")
        assert "(0 memory note(s)" not in reply.content
        memory = discord.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        games = turn_context_from_message(discord.message(ann, channels["games"], ""))
        assert "Ann plans a Lisbon trip" in str(await memory.build_context(games))


async def test_an_admin_purges_a_member_and_the_owner_purges_everywhere(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path)) as discord:
        general = discord.server("Harbor")["general"]
        ann, admin = discord.person("Ann"), discord.person("Mod", permissions=ADMINISTRATOR)
        await discord.say(ann, general, f"{discord.mention} remember my cat Miso")
        target = option("user", str(ann.id), 6)
        (refused,) = await discord.command(
            "purge-memory", target, user=discord.person("Bob"), channel=general,
            resolved_users=[ann],
        )  # fmt: skip
        assert "Administrator" in refused.content
        # A purge first shows what it would erase; nothing goes until Confirm is pressed.
        (preview,) = await discord.command(
            "purge-memory", target, user=admin, channel=general, resolved_users=[ann]
        )
        assert preview.buttons == ["Confirm", "Cancel"]
        (_, done) = await discord.click(preview, "Confirm", user=admin)
        assert done.content.startswith("Done") and "in this server" in done.content
        everywhere = option("everywhere", True, 5)
        (not_owner,) = await discord.command(
            "purge-memory", target, everywhere, user=admin, channel=general, resolved_users=[ann]
        )
        assert "owner" in not_owner.content and not_owner.buttons == []
        (preview,) = await discord.command(
            "purge-memory", target, everywhere, user=discord.owner, channel=general,
            resolved_users=[ann],
        )  # fmt: skip
        (_, owner) = await discord.click(preview, "Confirm", user=discord.owner)
        assert "in every server and DM" in owner.content
        (shown,) = await discord.command("memory", subcommand("show"), user=ann, channel=general)
        assert "Miso" not in shown.content


async def test_a_dm_is_answered_without_a_mention(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path)) as discord:
        ann = discord.person("Ann")
        (reply,) = await discord.say(ann, discord.dm(ann), "hello there")
        assert reply.content.startswith("You said: hello there")


async def test_messages_deleted_on_discord_leave_the_memory(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path), bot_name="Sample") as discord:
        channels = discord.server("Harbor", ["general", "games"])
        ann = discord.person("Ann")
        (reply,) = await discord.say(ann, channels["general"], f"{discord.mention} my PIN is 4321")
        games = turn_context_from_message(discord.message(ann, channels["games"], ""))
        memory = discord.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        assert 'Ann: "my PIN is 4321"' in str(await memory.build_context(games))
        await discord.delete(discord.said[-1])  # Ann deletes her message on Discord
        recalled = str(await memory.build_context(games))
        assert "Ann:" not in recalled and "You said: my PIN" in recalled
        await discord.delete(reply)  # and the bot's reply, which quoted it
        assert "4321" not in str(await memory.build_context(games))


async def test_a_message_edited_on_discord_is_edited_in_the_memory(tmp_path: Path):
    async with offline_bot(sample_bot(tmp_path), bot_name="Sample") as discord:
        channels = discord.server("Harbor", ["general", "games"])
        ann = discord.person("Ann")
        await discord.say(ann, channels["general"], f"{discord.mention} we meet at 6")
        await discord.edit(discord.said[-1], f"{discord.mention} we meet at 7")
        games = turn_context_from_message(discord.message(ann, channels["games"], ""))
        memory = discord.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        recalled = str(await memory.build_context(games))
        assert 'Ann: "we meet at 7"' in recalled and 'Ann: "we meet at 6"' not in recalled
