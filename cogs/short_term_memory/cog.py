"""ShortTermMemoryCog: Discord events and slash commands in, ShortTermMemory calls out."""

from __future__ import annotations

import logging
from typing import Any

import discord
from discord import app_commands
from discord.ext import commands

from stm import (
    DurabilityError,
    GenerationFinished,
    ShortTermMemory,
    STMConfig,
    ToolRegistry,
    TurnContext,
)
from stm.keys import server_key, turn_keys, user_key
from stm.render import category_labels

from ..utils.checks import NotOwner, has_server_permission_or_owner, is_owner, server_only
from ..utils.context import turn_context_from_interaction
from ..utils.replies import reply
from .describe import describe_memory
from .settings import SettingsCommands

__all__ = ["CommandRefused", "ShortTermMemoryCog"]

log = logging.getLogger("cogs.short_term_memory")

REFRESH_COOLDOWN_SECONDS = 30.0


class CommandRefused(app_commands.AppCommandError):
    """A command that cannot do what was asked, for a reason the user should read."""


def _scope_label(ctx: TurnContext) -> str:
    user_k, server_k = turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id)
    return server_k or user_k


def _durability_note(exc: DurabilityError) -> str:
    log.error("short-term memory purge not yet durable: %s", exc)
    return (
        "\n**Warning:** it is gone from the bot's memory, but the database could not confirm "
        "the deletion yet. It keeps retrying; run the command again later to make sure."
    )


class ShortTermMemoryCog(SettingsCommands, name="ShortTermMemory"):
    """Short-term memory of conversations: capture, the upgrade tool and slash commands."""

    memory: ShortTermMemory

    def __init__(self, bot: commands.Bot, config: STMConfig | None = None) -> None:
        self.bot = bot
        self.config = config

    async def cog_load(self) -> None:
        config = self.config or getattr(self.bot, "stm_config", None) or STMConfig()
        self.config = config
        self.memory = await ShortTermMemory.open(config)
        tools = getattr(self.bot, "tools", None)
        if isinstance(tools, ToolRegistry):
            tools.register(self.memory.tool)

    async def cog_unload(self) -> None:
        tools = getattr(self.bot, "tools", None)
        if isinstance(tools, ToolRegistry) and tools.get(self.memory.tool.name) is self.memory.tool:
            tools.unregister(self.memory.tool.name)
        # close() drains pending writes and deletes, so unloading loses nothing.
        await self.memory.close()

    # -- capture --------------------------------------------------------------
    @commands.Cog.listener()
    async def on_generation_finished(self, event: GenerationFinished) -> None:
        """Stage 01: remember the turn the host just answered."""
        if not isinstance(event, GenerationFinished):
            log.warning("ignoring generation_finished event of type %s", type(event).__name__)
            return
        try:
            await self.memory.capture(event)
        except Exception:
            # The host's reply is already out; a memory failure must never reach it.
            log.exception("short-term memory capture failed for %s", _scope_label(event.context))

    # -- /refresh -------------------------------------------------------------
    @app_commands.command(name="refresh", description="Clear this channel's short-term memory.")
    @app_commands.checks.cooldown(1, REFRESH_COOLDOWN_SECONDS, key=lambda i: i.user.id)
    async def refresh(self, interaction: discord.Interaction[Any]) -> None:
        """Forget every scope and persona of this channel."""
        if interaction.channel_id is None:
            raise CommandRefused("This command needs a channel.")
        await self.memory.clear_short_term_memory_for_channel(interaction.channel_id)
        await reply(
            interaction,
            f"{interaction.user.mention} cleared the short-term memory of this channel.",
            ephemeral=False,
        )

    # -- /memory --------------------------------------------------------------
    memory_group = app_commands.Group(
        name="memory", description="See and control what the bot remembers about you."
    )

    @memory_group.command(name="show", description="See what the bot holds about you here.")
    async def memory_show(self, interaction: discord.Interaction[Any]) -> None:
        ctx = turn_context_from_interaction(interaction)
        own = await self.memory.get_entry(user_key(ctx.user_id, ctx.channel_id))
        shared = None
        if ctx.server_id is not None:
            shared = await self.memory.get_entry(server_key(ctx.server_id, ctx.channel_id))
        settings = await self.memory.get_server_settings(ctx.server_id)
        text = describe_memory(
            own,
            shared,
            opted_out=self.memory.is_opted_out(ctx.user_id),
            bot_name=ctx.bot_name,
            labels=category_labels(settings),
        )
        await reply(interaction, text)

    @memory_group.command(name="forget", description="Erase all short-term memory about you.")
    async def memory_forget(self, interaction: discord.Interaction[Any]) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await self.memory.clear_short_term_memory_for_user(interaction.user.id)
        text = "Done: the bot's short-term memory about you is erased, in every server and DM."
        try:
            await self.memory.flush()
        except DurabilityError as exc:
            text += _durability_note(exc)
        await reply(interaction, text)

    @memory_group.command(name="pause", description="Stop the bot remembering your messages.")
    async def memory_pause(self, interaction: discord.Interaction[Any]) -> None:
        await self.memory.set_user_opt_out(interaction.user.id, True)
        await reply(
            interaction,
            "Paused: the bot no longer remembers your new messages. What it already holds stays "
            "until it expires; `/memory forget` erases it now. `/memory resume` undoes this.",
        )

    @memory_group.command(name="resume", description="Let the bot remember your messages again.")
    async def memory_resume(self, interaction: discord.Interaction[Any]) -> None:
        await self.memory.set_user_opt_out(interaction.user.id, False)
        await reply(interaction, "Resumed: the bot remembers your conversations again.")

    # -- /purge-memory --------------------------------------------------------
    @app_commands.command(
        name="purge-memory", description="Erase a user's short-term memory in this server."
    )
    @app_commands.describe(
        user="Whose memory to erase",
        everywhere="Erase it in every server and DM (bot owner only)",
    )
    @app_commands.guild_only()
    @app_commands.default_permissions(administrator=True)
    @has_server_permission_or_owner("administrator")
    @server_only()
    async def purge_memory(
        self, interaction: discord.Interaction[Any], user: discord.User, everywhere: bool = False
    ) -> None:
        if everywhere and not await is_owner(interaction):
            raise NotOwner("`everywhere:True`")
        await interaction.response.defer(ephemeral=True, thinking=True)
        server_id = None if everywhere else interaction.guild_id
        await self.memory.clear_short_term_memory_for_user(user.id, server_id)
        where = "in every server and DM" if everywhere else "in this server"
        text = f"Done: short-term memory about {user.mention} is erased {where}."
        try:
            await self.memory.flush()
        except DurabilityError as exc:
            text += _durability_note(exc)
        await reply(interaction, text)

    # -- errors ---------------------------------------------------------------
    async def cog_app_command_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        if isinstance(error, app_commands.CommandInvokeError) and isinstance(
            error.original, ValueError
        ):
            # Settings and categories are validated by the library; its message names the rule.
            message = f"That was not accepted: {error.original}"
        elif isinstance(error, app_commands.CommandOnCooldown):
            message = f"Slow down: you can use this again in {error.retry_after:.0f} seconds."
        elif isinstance(error, app_commands.CheckFailure | CommandRefused):
            message = str(error) or "You cannot use this command here."
        elif isinstance(error, app_commands.TransformerError):
            message = f"That value for this option is not valid: {error.value!r}."
        else:
            command = interaction.command.qualified_name if interaction.command else "?"
            log.error("slash command /%s failed", command, exc_info=error)
            message = "Sorry, something went wrong on our side. It has been logged."
        try:
            await reply(interaction, message)
        except discord.HTTPException:
            log.exception("could not answer a failed slash command")
