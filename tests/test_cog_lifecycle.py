"""Loading and unloading the extension: memory opened, tool registered, writes drained."""

from __future__ import annotations

from pathlib import Path

import discord
from discord import app_commands
from discord_fakes import harness

from cogs.short_term_memory import COG_NAME, EXTENSION
from host.demo import make_bot
from stm import STMConfig


async def test_tool_is_registered_on_load_and_removed_on_unload(tmp_path: Path):
    async with harness(tmp_path) as h:
        tools = h.bot.tools  # type: ignore[attr-defined]
        assert "update_short_term_memory" in tools
        ctx = h.world.context(h.alice, h.general, "hello")
        assert [d["function"]["name"] for d in tools.definitions(ctx)] == [
            "update_short_term_memory"
        ]
        memory = h.memory
        await h.bot.unload_extension(EXTENSION)
        assert "update_short_term_memory" not in tools
        assert memory.closed


async def test_unloading_drains_pending_writes(tmp_path: Path):
    """What was written before unload is there after a reload on the same file."""
    async with harness(tmp_path) as h:
        await h.say(h.alice, h.general, "hello")
        ctx = h.world.context(h.alice, h.general, "hello")
        assert (await h.memory.run_tool(ctx, {"summary": "Alice greeted"})).success
        await h.memory.set_user_opt_out(h.bob.id, True)
        await h.bot.unload_extension(EXTENSION)
        await h.bot.load_extension(EXTENSION)
        memory = h.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        assert memory.is_opted_out(h.bob.id)
        entry = await memory.get_entry("shortterm:server:1100:1101")
        assert entry is not None and entry.summary == "Alice greeted"


async def test_config_comes_from_the_bot_or_the_environment(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("STM_DATABASE", str(tmp_path / "from-env.sqlite3"))
    bot = make_bot(STMConfig())
    del bot.stm_config  # type: ignore[attr-defined]
    async with bot:
        await bot.load_extension(EXTENSION)
        memory = bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        assert memory.config.database == str(tmp_path / "from-env.sqlite3")
    assert (tmp_path / "from-env.sqlite3").exists()


async def test_command_metadata_tells_discord_who_may_use_what(tmp_path: Path):
    async with harness(tmp_path) as h:
        tree = h.bot.tree
        purge = tree.get_command("purge-memory")
        settings = tree.get_command("memory-settings")
        refresh = tree.get_command("refresh")
        assert isinstance(purge, app_commands.Command)
        assert isinstance(settings, app_commands.Group)
        assert purge.guild_only and settings.guild_only
        assert purge.default_permissions == discord.Permissions(administrator=True)
        assert settings.default_permissions == discord.Permissions(manage_guild=True)
        assert refresh is not None and refresh.default_permissions is None
        memory = tree.get_command("memory")
        assert isinstance(memory, app_commands.Group)
        assert sorted(c.name for c in memory.commands) == ["forget", "pause", "resume", "show"]
