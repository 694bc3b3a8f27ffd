"""ShortTermMemoryCog: Discord events and slash commands in, ShortTermMemory calls out."""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import discord
from discord import app_commands
from discord.ext import commands

from stm import (
    DurabilityError,
    GenerationFinished,
    InvalidInput,
    PurgeAlert,
    PurgeImpact,
    ShortTermMemory,
    STMConfig,
    TokenCounter,
    ToolRegistry,
    TurnContext,
    redact_url,
)
from stm._keys import server_key, turn_keys, user_key
from stm._purgewatch import describe_alert
from stm._render import category_labels
from stm.store import is_postgres_url

from .._utils.audience import DiscordAudience
from .._utils.checks import (
    Check,
    has_server_permission_or_owner,
    owner_only,
    server_only,
    server_permission_or_owner,
    still_allowed,
    who_may,
)
from .._utils.context import channel_privacy, turn_context_from_interaction
from .._utils.replies import NO_PINGS, reply
from ._confirm import CONFIRM_SECONDS, Confirmation
from ._describe import (
    ENGLISH,
    Confirmed,
    describe_forget_done,
    describe_forget_preview,
    describe_history,
    describe_memory,
    describe_purge_done,
    describe_purge_preview,
    describe_refusal,
    describe_restore_current,
    describe_restore_done,
    describe_restore_pending,
    describe_restore_preview,
    describe_where,
)
from ._entries import entries_shown_to
from ._i18n import CommandTranslator, Refused, Texts, texts_for
from ._listeners import DiscordEvents
from ._settings import SettingsCommands

__all__ = [
    "COG_NAME",
    "COMMANDS",
    "EXTENSION",
    "CommandNameTaken",
    "CommandRefused",
    "ShortTermMemoryCog",
]

# One definition of the names a host looks the cog up by. The extension's dotted name
# follows where the package lives: `cogs.short_term_memory` in the repository,
# `discord_stm.short_term_memory` once installed from the wheel.
EXTENSION = __name__.rpartition(".")[0]
COG_NAME = "ShortTermMemory"
# The cog's top-level slash commands, by their default names.
COMMANDS = ("refresh", "memory", "purge-memory", "memory-settings")

log = logging.getLogger("discord_stm")

REFRESH_COOLDOWN_SECONDS = 30.0
# A purge is cheap and shares its scrub with others, but each one waits for everything
# queued before it: one member repeating it must not keep the writer busy for everyone.
FORGET_COOLDOWN_SECONDS = 10.0
APOLOGY = ENGLISH("error.apology")


class CommandRefused(Refused):
    """A command that cannot do what was asked, for a reason the user should read (a key
    of the catalogue, in the user's language)."""


class CommandNameTaken(discord.ClientException):
    """The bot already has a slash command under a name the cog would register."""


def _per_bot_and_user(interaction: discord.Interaction[Any]) -> tuple[object, int]:
    """A command's cooldown bucket: the member, in this bot. The buckets of a decorated
    command are shared by every instance of the cog in the process, so two bots (or a bot
    restarted in one process) must not slow each other's members down. (The bot itself,
    not its id, which a later bot may reuse; discord.py drops a bucket once it expires.)"""
    return interaction.client, interaction.user.id


def _scope_label(ctx: TurnContext) -> str:
    user_k, server_k = turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id)
    return server_k or user_k


def _not_yet_durable(exc: DurabilityError, done: str, what: str, texts: Texts) -> str:
    """The answer to a purge the database could not confirm yet: ``done`` (what the
    command answers once durable) with a warning, or, when the purge could not be saved
    for a restart either, only a warning that promises nothing."""
    log.error("short-term memory %s not yet durable: %s", what, exc)
    if exc.at_risk:
        return texts("durability.at_risk")
    return texts("durability.retrying", done=done)


def _where(interaction: discord.Interaction[Any]) -> str:
    return (
        f"user {interaction.user.id}, channel {interaction.channel_id}, "
        f"server {interaction.guild_id or 'none (DM)'}"
    )


def _database_label(config: STMConfig) -> str:
    if config.database == ":memory:":
        return ":memory: (nothing survives a restart)"
    if is_postgres_url(config.database):
        return redact_url(config.database)
    return os.path.abspath(config.database)


class ShortTermMemoryCog(DiscordEvents, SettingsCommands, name=COG_NAME):
    """Short-term memory of conversations: capture, the upgrade tool and slash commands.

    ``config`` defaults to ``STMConfig()`` (the ``STM_*`` environment). ``tools``, when
    given, gets the ``update_short_term_memory`` tool while the cog is loaded.
    ``command_names`` renames top-level commands (``{"refresh": "forget-channel"}``) or
    leaves them out (``{"purge-memory": None}``); keys are the names in ``COMMANDS``.
    ``confirm_seconds``: how long ``/memory forget`` and ``/purge-memory`` wait for their
    Confirm button before nothing happens. ``token_counter``: the model's tokenizer (text
    to a count) for the token budget; without it the budget counts with an estimate.
    """

    memory: ShortTermMemory

    def __init__(
        self,
        bot: commands.Bot,
        config: STMConfig | None = None,
        *,
        tools: ToolRegistry | None = None,
        command_names: Mapping[str, str | None] | None = None,
        confirm_seconds: float = CONFIRM_SECONDS,
        token_counter: TokenCounter | None = None,
    ) -> None:
        if config is not None and not isinstance(config, STMConfig):
            raise TypeError(f"config must be an stm.STMConfig, not {type(config).__name__}")
        if tools is not None and not isinstance(tools, ToolRegistry):
            raise TypeError(f"tools must be an stm.ToolRegistry, not {type(tools).__name__}")
        self.bot = bot
        self.config = config
        self.tools = tools
        self._config_source = "passed to the cog" if config is not None else None
        # What setup(bot) found wrong on the bot, said in the load's log line (a warning).
        self._load_note = ""
        self._misconfigured = False
        self.names = self._apply_command_names(command_names or {})
        # An interaction's token lets the bot edit its answer for 15 minutes.
        if not 0 < confirm_seconds <= 14 * 60:
            raise ValueError("confirm_seconds must be more than 0 and at most 840 (14 minutes)")
        self.confirm_seconds = float(confirm_seconds)
        if token_counter is not None and not callable(token_counter):
            raise TypeError("token_counter must be a callable from text to a token count")
        self.token_counter = token_counter
        self._confirmations: weakref.WeakSet[Confirmation] = weakref.WeakSet()
        self._translator: CommandTranslator | None = None
        # Who may read which channel, from discord.py's cache: the memory's audience.
        self.audience = DiscordAudience(bot)

    def _apply_command_names(self, wanted: Mapping[str, str | None]) -> dict[str, str | None]:
        unknown = set(wanted) - set(COMMANDS)
        if unknown:
            raise ValueError(
                f"command_names: unknown command(s) {', '.join(sorted(unknown))}; "
                f"the cog's commands are {', '.join(COMMANDS)}"
            )
        names: dict[str, str | None] = {name: name for name in COMMANDS}
        kept = []
        # discord.py gives each cog instance its own copies of the commands, so renaming
        # them here leaves the class and other instances alone.
        for command in self.__cog_app_commands__:
            if command.parent is not None:
                kept.append(command)
                continue
            new = wanted.get(command.name, command.name)
            names[command.name] = new
            if new is None:
                continue
            command.name = app_commands.commands.validate_name(new)
            kept.append(command)
        self.__cog_app_commands__ = kept
        return names

    def command_mention(self, command: str, sub: str = "") -> str | None:
        """How to write one of the cog's commands in a reply (``/memory forget``), or None."""
        name = self.names.get(command)
        if name is None:
            return None
        return f"`/{name} {sub}`" if sub else f"`/{name}`"

    # -- lifecycle ------------------------------------------------------------
    async def cog_load(self) -> None:
        tree = self.bot.tree
        taken = [
            command.name
            for command in self.__cog_app_commands__
            if command.parent is None and tree.get_command(command.name) is not None
        ]
        if taken:
            # Checked before anything is opened, so a refused load leaves nothing behind.
            listed = ", ".join(f"/{name}" for name in taken)
            raise CommandNameTaken(
                f"the bot already has {listed}: rename the cog's command with "
                f"ShortTermMemoryCog(bot, command_names={{{taken[0]!r}: 'new-name'}}) "
                f"or leave it out with {{{taken[0]!r}: None}}"
            )
        if self.config is None:
            self.config = STMConfig()
            self._config_source = (
                self._config_source or "from the STM_* environment (no config was passed)"
            )
        self.memory = await ShortTermMemory.open(
            self.config,
            on_purge_alert=self._purge_alert,
            channel_is_private=channel_privacy(self.bot),
            token_counter=self.token_counter,
            # Other channels' memory only where everyone present can read it, as Discord
            # says at each prompt (cogs/_utils/audience.py).
            audience=self.audience,
        )
        try:
            self.start_departures()
            if self.tools is not None:
                self.tools.register(self.memory.tool)
            # The commands' names and descriptions in every shipped language, unless the
            # bot translates its commands itself (it may ask a CommandTranslator first).
            if tree.translator is None:
                renamed = {new: old for old, new in self.names.items() if new and new != old}
                self._translator = CommandTranslator(renamed)
                await tree.set_translator(self._translator)
        except BaseException:
            await self.memory.close()
            raise
        if self._load_note:
            tool_note = self._load_note
        elif self.tools is not None:
            tool_note = f"tool {self.memory.tool.name} registered"
        else:
            tool_note = (
                f"no ToolRegistry was passed, so the model cannot call {self.memory.tool.name} "
                "(pass tools=ToolRegistry())"
            )
        level = logging.WARNING if self._misconfigured else logging.INFO
        log.log(
            level,
            "short-term memory: database %s, settings %s; %s",
            _database_label(self.config),
            self._config_source,
            tool_note,
        )

    async def cog_unload(self) -> None:
        # A confirmation pressed after this would reach a closed memory: nothing is done.
        for confirmation in list(self._confirmations):
            confirmation.stop()
        translator, self._translator = self._translator, None
        if translator is not None and self.bot.tree.translator is translator:
            await self.bot.tree.set_translator(None)
        memory = getattr(self, "memory", None)
        if memory is None or memory.closed:
            return
        name, tools = memory.tool.name, self.tools
        if tools is not None and tools.get(name) is memory.tool:
            tools.unregister(name)
        # close() drains pending writes and deletes, so unloading loses nothing.
        await memory.close()

    async def _inject(self, bot: Any, override: bool, guild: Any, guilds: Any) -> Any:
        # discord.py adds the slash commands after cog_load and leaves the memory open
        # if that fails (another extension took a name since, the 100-command limit).
        try:
            return await super()._inject(bot, override, guild, guilds)
        except BaseException:
            for command in self.__cog_app_commands__:
                if command.parent is None and bot.tree.get_command(command.name) is command:
                    bot.tree.remove_command(command.name)
            for name, method_name in self.__cog_listeners__:
                bot.remove_listener(getattr(self, method_name), name)
            await self.cog_unload()
            raise

    # -- capture --------------------------------------------------------------
    @commands.Cog.listener()
    async def on_generation_finished(self, event: GenerationFinished) -> None:
        """Stage 01: remember the turn the host just answered."""
        if not isinstance(event, GenerationFinished):
            log.warning("ignoring a generation_finished event of type %s", type(event).__name__)
            return
        try:
            await self.memory.capture(event)
        except Exception:
            # The host's reply is already out; a memory failure must never reach it.
            log.exception("short-term memory capture failed for %s", _scope_label(event.context))

    # -- /refresh -------------------------------------------------------------
    @app_commands.command(name="refresh", description="Clear this channel's short-term memory.")
    @app_commands.checks.cooldown(1, REFRESH_COOLDOWN_SECONDS, key=_per_bot_and_user)
    async def refresh(self, interaction: discord.Interaction[Any]) -> None:
        """Forget every scope and persona of this channel."""
        if interaction.channel_id is None:
            raise CommandRefused("error.needs_channel")
        await self.memory.clear_short_term_memory_for_channel(interaction.channel_id)
        texts = texts_for(interaction.locale)
        await reply(
            interaction, texts("refresh.done", who=interaction.user.mention), ephemeral=False
        )

    # -- /memory --------------------------------------------------------------
    memory_group = app_commands.Group(
        name="memory", description="See and control what the bot remembers about you."
    )

    @memory_group.command(name="show", description="See what the bot holds about you here.")
    @app_commands.describe(history="Also show earlier versions of the notes and what changed")
    async def memory_show(
        self, interaction: discord.Interaction[Any], history: bool = False
    ) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        ctx = turn_context_from_interaction(interaction)
        own, shared = await entries_shown_to(self.memory, ctx)
        texts = texts_for(interaction.locale)
        # The history of the same entries the asker may see: their own and the channel's
        # shared notes, never another member's.
        sections = []
        if history:
            for entry in own:
                versions = await self.memory.history(entry.key)
                sections.append((texts("history.own_title"), versions))
            for entry in shared:
                versions = await self.memory.history(entry.key)
                sections.append((texts("history.shared_title"), versions))
        settings = await self.memory.get_server_settings(ctx.server_id)
        text = describe_memory(
            own,
            shared,
            opted_out=self.memory.is_opted_out(ctx.user_id),
            bot_name=ctx.bot_name,
            labels=category_labels(settings),
            forget=self.command_mention("memory", "forget"),
            resume=self.command_mention("memory", "resume"),
            texts=texts_for(interaction.locale),
            where=describe_where(
                self._shown_in(ctx), bot_name=ctx.bot_name, texts=texts_for(interaction.locale)
            ),
        )
        if sections:
            text += "\n" + describe_history(sections, texts)
        await reply(interaction, text)

    @memory_group.command(
        name="restore", description="Bring back an earlier version of notes here."
    )
    @app_commands.describe(
        version="The version's number, from /memory show history:True",
        shared="The channel's shared notes (Manage Server) instead of yours",
    )
    async def memory_restore(
        self,
        interaction: discord.Interaction[Any],
        version: app_commands.Range[int, 0, 2**53],
        shared: bool = False,
    ) -> None:
        """A member brings back their own notes here; with ``shared``, members with Manage
        Server (or the bot's owner) bring back the channel's shared notes. Asks first."""
        also: tuple[Check, ...] = ()
        if shared:
            if interaction.guild_id is None:
                raise CommandRefused("error.server_only")
            also = (server_permission_or_owner("manage_guild"),)
            await still_allowed(interaction, also)
        await interaction.response.defer(ephemeral=True, thinking=True)
        ctx = turn_context_from_interaction(interaction)
        texts = texts_for(interaction.locale)
        if shared:
            assert ctx.server_id is not None
            key = server_key(ctx.server_id, ctx.channel_id)
        else:
            key = user_key(ctx.user_id, ctx.channel_id)
        found = {v.version: v for v in await self.memory.history(key)}.get(version)
        if found is None or found.current:
            answer = (
                describe_restore_done(False, version, texts)
                if found is None
                else describe_restore_current(version, texts)
            )
            await reply(interaction, answer)
            return
        asker = interaction.user.id

        async def restore() -> str:
            try:
                done = await self.memory.restore_notes(key, version, by=asker)
            except DurabilityError as exc:
                log.error("short-term memory restore of %s not yet durable: %s", key, exc)
                return describe_restore_pending(bool(exc.at_risk), version, texts)
            return describe_restore_done(done, version, texts)

        preview = describe_restore_preview(
            found, shared=shared, seconds=self.confirm_seconds, texts=texts
        )
        await self._confirm(interaction, preview, restore, texts, also=also, kind="restore")

    def _shown_in(self, ctx: TurnContext) -> list[str] | None:
        """Mentions of the channels where this channel's memory may be shown now (None in a
        DM)."""
        if ctx.server_id is None:
            return None
        found = self.audience.shown_in(ctx.server_id, ctx.channel_id)
        return [f"<#{channel_id}>" for channel_id in found]

    @memory_group.command(name="forget", description="Erase all short-term memory about you.")
    @app_commands.checks.cooldown(1, FORGET_COOLDOWN_SECONDS, key=_per_bot_and_user)
    async def memory_forget(self, interaction: discord.Interaction[Any]) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        user_id = interaction.user.id
        texts = texts_for(interaction.locale)
        impact = await self.memory.preview_purge(user_id)

        async def purge() -> str:
            try:
                done: PurgeImpact | None = await self.memory.purge(user_id)
            except DurabilityError as exc:
                what = f"purge of user {user_id} everywhere"
                return _not_yet_durable(exc, describe_forget_done(None, texts=texts), what, texts)
            return describe_forget_done(done, texts=texts)

        preview = describe_forget_preview(
            impact, here=interaction.guild_id, seconds=self.confirm_seconds, texts=texts
        )
        await self._confirm(interaction, preview, purge, texts)

    @memory_group.command(name="pause", description="Stop the bot remembering your messages.")
    async def memory_pause(self, interaction: discord.Interaction[Any]) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await self.memory.set_user_opt_out(interaction.user.id, True)
        forget = self.command_mention("memory", "forget")
        resume = self.command_mention("memory", "resume")
        texts = texts_for(interaction.locale)
        await reply(interaction, texts("pause.done", forget=forget, resume=resume))

    @memory_group.command(name="resume", description="Let the bot remember your messages again.")
    async def memory_resume(self, interaction: discord.Interaction[Any]) -> None:
        await interaction.response.defer(ephemeral=True, thinking=True)
        await self.memory.set_user_opt_out(interaction.user.id, False)
        await reply(interaction, texts_for(interaction.locale)("resume.done"))

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
        # Only the owner may reach beyond this server: checked now, and again on Confirm.
        also = (owner_only("`everywhere:True`"),) if everywhere else ()
        await still_allowed(interaction, also)
        await interaction.response.defer(ephemeral=True, thinking=True)
        server_id = None if everywhere else interaction.guild_id
        texts = texts_for(interaction.locale)
        impact = await self.memory.preview_purge(user.id, server_id)
        asker = interaction.user.id

        async def purge() -> str:
            try:
                done: PurgeImpact | None = await self.memory.purge(
                    user.id, server_id, requested_by=asker
                )
            except DurabilityError as exc:
                where = "everywhere" if server_id is None else f"in server {server_id}"
                text = describe_purge_done(
                    None, member=user.mention, everywhere=everywhere, texts=texts
                )
                return _not_yet_durable(exc, text, f"purge of user {user.id} {where}", texts)
            return describe_purge_done(
                done, member=user.mention, everywhere=everywhere, texts=texts
            )

        assert interaction.guild_id is not None  # server_only
        preview = describe_purge_preview(
            impact,
            member=user.mention,
            here=interaction.guild_id,
            everywhere=everywhere,
            seconds=self.confirm_seconds,
            texts=texts,
        )
        await self._confirm(interaction, preview, purge, texts, also=also)

    async def _confirm(
        self,
        interaction: discord.Interaction[Any],
        preview: str,
        act: Callable[[], Awaitable[str]],
        texts: Texts,
        *,
        also: tuple[Check, ...] = (),
        kind: Confirmed = "purge",
    ) -> None:
        """Answer with ``preview`` and the Confirm / Cancel buttons; ``act`` (a ``kind``) on
        Confirm.

        Confirm runs again the checks that admitted the command (those that say who may
        use it) and ``also`` (checks the command made of its options), against the press:
        permissions lost while the buttons waited refuse it, as they would the command."""
        view = Confirmation(
            interaction.user.id,
            act,
            admits=(*who_may(interaction.command), *also),
            apology=texts("error.apology"),
            kind=kind,
            timeout=self.confirm_seconds,
            texts=texts,
        )
        self._confirmations.add(view)
        view.message = await interaction.followup.send(
            preview, view=view, ephemeral=True, wait=True, allowed_mentions=NO_PINGS
        )

    def _purge_alert(self, alert: PurgeAlert) -> None:
        """A purge cleared too much of a server's memory, or repeats: tell the admins."""
        guild = self.bot.get_guild(alert.server_id)
        member = guild.get_member(alert.member) if guild is not None else None
        name = member or self.bot.get_user(alert.member)
        log.warning(
            "%s",
            describe_alert(
                alert, member=str(name) if name else "", server=guild.name if guild else ""
            ),
        )

    # -- errors ---------------------------------------------------------------
    async def cog_app_command_error(
        self, interaction: discord.Interaction[Any], error: app_commands.AppCommandError
    ) -> None:
        texts = texts_for(interaction.locale)
        original = getattr(error, "original", None)
        if isinstance(original, Refused):
            error = original
        if isinstance(error, app_commands.CommandInvokeError) and isinstance(
            original, InvalidInput
        ):
            # Written by the library (in English) for the person who chose the value.
            message = texts("error.not_accepted", detail=original)
        elif isinstance(error, app_commands.CommandInvokeError) and isinstance(
            original, DurabilityError
        ):
            # A setting or an opt-out in force here that the database did not take yet:
            # it is retried and journaled like a purge.
            log.error(
                "short-term memory change not yet durable (%s): %s", _where(interaction), original
            )
            key = "durability.change_at_risk" if original.at_risk else "durability.change_pending"
            message = texts(key)
        elif isinstance(error, app_commands.CommandOnCooldown):
            message = texts("error.cooldown", seconds=error.retry_after)
        elif isinstance(error, Refused):
            message = texts(error.key, **error.values)
        elif isinstance(error, app_commands.CheckFailure):
            message = describe_refusal(error, texts)
        elif isinstance(error, app_commands.TransformerError):
            message = texts("error.bad_value", value=repr(error.value))
        else:
            command = interaction.command.qualified_name if interaction.command else "?"
            log.error("slash command /%s failed (%s)", command, _where(interaction), exc_info=error)
            message = texts("error.apology")
        try:
            await reply(interaction, message)
        except discord.HTTPException:
            log.exception("could not answer a failed slash command (%s)", _where(interaction))
