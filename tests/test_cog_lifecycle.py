"""Loading and unloading the extension: memory opened, tool registered, writes drained."""

from __future__ import annotations

import gc
import importlib
import logging
import warnings
from pathlib import Path
from typing import Any

import discord
import pytest
from discord import app_commands
from discord.ext import commands
from discord_fakes import BotOpener, harness

from cogs.short_term_memory import (
    COG_NAME,
    COMMANDS,
    EXTENSION,
    CommandNameTaken,
    ShortTermMemoryCog,
)
from cogs.testing import subcommand
from host.demo import make_bot
from host.world import World
from stm import STMConfig, ToolRegistry
from stm._keys import server_key

# The tests that open their bot through ``open_bot`` (what unloading and reloading keep
# durable) run on both stores.
BOTH_STORES = True
SLOW_ON_POSTGRES = True  # the cog sits above the store: PostgreSQL in the full run


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


async def test_unloading_drains_pending_writes(open_bot: BotOpener):
    """What was written before unload is there after a reload on the same file."""
    async with open_bot() as h:
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
        assert sorted(c.name for c in memory.commands) == [
            "forget",
            "pause",
            "restore",
            "resume",
            "show",
        ]


class TestExplicitResources:
    """The cog takes its config and tool registry as arguments; setup(bot) says what it chose."""

    async def test_the_constructor_takes_config_and_tools(self, tmp_path: Path):
        bot = make_bot(STMConfig(database=str(tmp_path / "unused.sqlite3")))
        registry = ToolRegistry()
        config = STMConfig(database=str(tmp_path / "passed.sqlite3"))
        async with bot:
            await bot.add_cog(ShortTermMemoryCog(bot, config=config, tools=registry))
            cog: Any = bot.get_cog(COG_NAME)
            assert cog.memory.config.database == str(tmp_path / "passed.sqlite3")
            assert "update_short_term_memory" in registry
            assert "update_short_term_memory" not in bot.tools  # type: ignore[attr-defined]
            await bot.remove_cog(COG_NAME)
            assert "update_short_term_memory" not in registry
        assert not (tmp_path / "unused.sqlite3").exists()

    async def test_a_bot_tools_that_is_no_registry_is_reported_in_one_line(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ):
        bot = make_bot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
        bot.tools = {"weather": object()}  # type: ignore[attr-defined]
        with caplog.at_level(logging.INFO, logger="discord_stm"):
            async with bot:
                await bot.load_extension(EXTENSION)
        (line,) = [r for r in caplog.records if r.name == "discord_stm"]
        assert line.levelno == logging.WARNING
        message = line.getMessage()
        assert "bot.tools is a dict, not an stm.ToolRegistry" in message
        assert str(tmp_path / "stm.sqlite3") in message and "from bot.stm_config" in message

    async def test_a_missing_config_is_reported_with_the_absolute_database_path(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ):
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("STM_DATABASE", "relative/stm.sqlite3")
        bot = make_bot(STMConfig())
        del bot.stm_config  # type: ignore[attr-defined]
        with caplog.at_level(logging.INFO, logger="discord_stm"):
            async with bot:
                await bot.load_extension(EXTENSION)
        (line,) = [r for r in caplog.records if r.name == "discord_stm"]
        message = line.getMessage()
        assert str(tmp_path / "relative" / "stm.sqlite3") in message
        assert "STM_* environment" in message and "registered" in message

    async def test_a_bot_stm_config_that_is_no_config_is_reported(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
    ):
        monkeypatch.setenv("STM_DATABASE", str(tmp_path / "env.sqlite3"))
        bot = make_bot(STMConfig())
        bot.stm_config = {"database": "elsewhere.sqlite3"}  # type: ignore[attr-defined]
        with caplog.at_level(logging.INFO, logger="discord_stm"):
            async with bot:
                await bot.load_extension(EXTENSION)
        (line,) = [r for r in caplog.records if r.name == "discord_stm"]
        assert line.levelno == logging.WARNING
        assert "bot.stm_config is a dict, not an stm.STMConfig" in line.getMessage()
        assert str(tmp_path / "env.sqlite3") in line.getMessage()

    def test_the_constructor_refuses_resources_of_the_wrong_type(self, tmp_path: Path):
        bot = make_bot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
        with pytest.raises(TypeError, match=r"stm\.ToolRegistry"):
            ShortTermMemoryCog(bot, tools={})  # type: ignore[arg-type]
        with pytest.raises(TypeError, match=r"stm\.STMConfig"):
            ShortTermMemoryCog(bot, {"database": "x"})  # type: ignore[arg-type]


def _bot_with_own_commands(tmp_path: Path) -> commands.Bot:
    bot = make_bot(STMConfig(database=str(tmp_path / "stm.sqlite3")))

    @bot.tree.command(name="refresh", description="The bot's own refresh.")
    async def own_refresh(interaction: discord.Interaction) -> None:
        await interaction.response.send_message("the bot's own /refresh")

    return bot


class TestNextToExistingCommands:
    """A name clash refuses the load cleanly; renaming or leaving out commands avoids it."""

    async def test_a_clash_fails_the_load_and_leaves_nothing_open(self, tmp_path: Path):
        bot = _bot_with_own_commands(tmp_path)
        own = bot.tree.get_command("refresh")
        async with bot:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with pytest.raises(commands.ExtensionFailed) as failed:
                    await bot.load_extension(EXTENSION)
                gc.collect()
            # By name: discord.py imports the extension's modules afresh on each load.
            assert type(failed.value.original).__name__ == CommandNameTaken.__name__
            assert "/refresh" in str(failed.value.original)
            assert "command_names" in str(failed.value.original)
            assert not [w for w in caught if issubclass(w.category, ResourceWarning)]
            assert bot.get_cog(COG_NAME) is None
            assert bot.tree.get_command("refresh") is own
            assert bot.tree.get_command("memory") is None
            assert "update_short_term_memory" not in bot.tools  # type: ignore[attr-defined]

    async def test_a_failure_after_the_memory_opened_closes_it(self, tmp_path: Path):
        """If discord.py cannot add the commands after cog_load, the memory is closed."""
        bot = make_bot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
        cog = ShortTermMemoryCog(bot, tools=bot.tools)  # type: ignore[attr-defined]
        original = bot.tree.add_command
        calls = []

        def add_command(command: Any, **kwargs: Any) -> None:
            calls.append(command.name)
            if len(calls) == 2:  # the first command is in, the second is refused
                raise app_commands.CommandLimitReached(guild_id=None, limit=100)
            original(command, **kwargs)

        bot.tree.add_command = add_command  # type: ignore[method-assign]
        async with bot:
            with pytest.raises(app_commands.CommandLimitReached):
                await bot.add_cog(cog)
            assert cog.memory.closed
            assert bot.tree.get_command(calls[0]) is None
            assert "update_short_term_memory" not in bot.tools  # type: ignore[attr-defined]

    async def test_commands_can_be_renamed_or_left_out(self, tmp_path: Path):
        bot = _bot_with_own_commands(tmp_path)
        own = bot.tree.get_command("refresh")
        names = {"refresh": "memory-refresh", "purge-memory": None}
        async with bot:
            config = STMConfig(database=str(tmp_path / "stm.sqlite3"))
            cog = ShortTermMemoryCog(bot, config, tools=bot.tools, command_names=names)  # type: ignore[attr-defined]
            await bot.add_cog(cog)
            tree = bot.tree
            assert tree.get_command("refresh") is own
            assert tree.get_command("memory-refresh") is not None
            assert tree.get_command("purge-memory") is None
            assert tree.get_command("memory") is not None
            world = World(bot)
            alice, general = world.people["alice"], world.places["harbor/general"]
            await world.command("memory", subcommand("pause"), person=alice, place=general)
            replies = await world.command("memory-refresh", person=alice, place=general)
            assert "cleared the short-term memory" in replies[0].content
            # A second cog instance keeps the default names: the class was not changed.
            assert sorted(c.name for c in ShortTermMemoryCog(bot).get_app_commands()) == sorted(
                COMMANDS
            )

    async def test_unknown_command_names_are_refused(self, tmp_path: Path):
        bot = make_bot(STMConfig(database=str(tmp_path / "stm.sqlite3")))
        with pytest.raises(ValueError, match="refresh"):
            ShortTermMemoryCog(bot, command_names={"reset": "x"})


async def test_reload_keeps_durable_memory_and_drops_crude_messages(open_bot: BotOpener):
    """What the README says a reload does: notes, counters and opt-outs stay."""
    async with open_bot() as h:
        ctx = await h.say(h.alice, h.general, "crude words")
        assert (await h.memory.run_tool(ctx, {"summary": "Alice said hello"})).success
        await h.say(h.alice, h.general, "after the upgrade")
        await h.memory.set_user_opt_out(h.bob.id, True)
        await h.bot.reload_extension(EXTENSION)
        memory = h.bot.get_cog(COG_NAME).memory  # type: ignore[union-attr]
        assert memory is not h.memory and h.memory.closed
        assert memory.is_opted_out(h.bob.id)
        entry = await memory.get_entry(server_key(1100, h.general.id))
        assert entry is not None and entry.summary == "Alice said hello"
        assert entry.messages == []  # recent (crude) messages live in memory only
        assert "update_short_term_memory" in h.bot.tools  # type: ignore[attr-defined]


def test_the_extension_and_cog_names_have_one_definition():
    """Hosts and tests use EXTENSION and COG_NAME; no copy of either literal can drift."""
    root = Path(__file__).resolve().parent.parent
    assert EXTENSION == "cogs.short_term_memory"  # discord_stm.short_term_memory installed
    extension = importlib.import_module(EXTENSION)
    assert extension.ShortTermMemoryCog.__cog_name__ == COG_NAME
    copies = [
        f"{path.relative_to(root)}:{number}"
        for folder in ("host", "tests", "examples")
        for path in sorted((root / folder).rglob("*.py"))
        if path != Path(__file__).resolve()
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if '"cogs.short_term_memory"' in line or f'"{COG_NAME}"' in line
    ]
    assert copies == []
    guide = (root / "docs" / "guide.md").read_text()
    assert 'load_extension("discord_stm.short_term_memory")' in guide
