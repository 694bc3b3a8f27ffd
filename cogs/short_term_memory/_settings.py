"""``/memory-settings``: per-server settings for members with Manage Server."""

from __future__ import annotations

from typing import Any, Literal

import discord
from discord import app_commands
from discord.ext import commands
from pydantic import TypeAdapter, ValidationError

from stm import Category, ServerSettings, ShortTermMemory, STMConfig
from stm._config import MAX_CONTEXT_TOKEN_BUDGET, RenderMode
from stm._frames import model_language
from stm._models import Language
from stm._settings import invalid_input

from .._utils.checks import has_server_permission_or_owner, server_only
from .._utils.formatting import truncate
from .._utils.replies import reply
from ._describe import describe_recent_purges, describe_settings
from ._i18n import Refused, texts_for

__all__ = ["SettingsCommands"]


def _bounds(model: type, name: str) -> tuple[int, int]:
    """The least and greatest value (for text, length) ``model`` accepts for ``name``: the
    command's option takes the same, read from the model rather than written again."""
    rules = TypeAdapter(model).json_schema()["properties"][name]
    low = rules.get("minimum", rules.get("minLength", 0))
    high = rules.get("maximum", rules.get("maxLength"))
    assert high is not None, f"{model.__name__}.{name} has no upper bound"
    return low, high


_CADENCE = _bounds(ServerSettings, "refresh_cadence")
_CRUDE_COUNT = _bounds(ServerSettings, "crude_message_count")
_LABEL = _bounds(Category, "label")
_DESCRIPTION = _bounds(Category, "description")


def _server_id(interaction: discord.Interaction[Any]) -> int:
    if interaction.guild_id is None:
        raise app_commands.NoPrivateMessage()
    return interaction.guild_id


def _find(categories: tuple[Category, ...], label: str) -> int:
    wanted = label.strip().casefold()
    for index, category in enumerate(categories):
        if category.label.casefold() == wanted:
            return index
    known = ", ".join(c.label for c in categories)
    raise Refused("settings.no_category", label=repr(label), known=known)


def _category(label: str, description: str) -> Category:
    try:
        return Category(label.strip(), description.strip())
    except ValidationError as exc:
        raise invalid_input(exc) from None


def _model_language(settings: ServerSettings, interaction: discord.Interaction[Any]) -> str:
    """The language the model reads in this server (as the library chooses it)."""
    locale = interaction.guild_locale
    return model_language(settings, locale.value if locale is not None else None).language


async def _defer(interaction: discord.Interaction[Any]) -> None:
    # Every settings command waits on the database: answer Discord's 3-second deadline first.
    await interaction.response.defer(ephemeral=True, thinking=True)


class SettingsCommands(commands.Cog):
    """The ``/memory-settings`` group; the base of the cog, which provides ``memory``."""

    memory: ShortTermMemory
    config: STMConfig | None

    settings_group = app_commands.Group(
        name="memory-settings",
        description="Configure short-term memory in this server.",
        guild_only=True,
        default_permissions=discord.Permissions(manage_guild=True),
    )
    categories_group = app_commands.Group(
        name="categories",
        description="The fields the bot's notes are kept in.",
        parent=settings_group,
    )

    async def _show(self, interaction: discord.Interaction[Any], settings: ServerSettings) -> None:
        limit = self.memory.config.max_categories
        budget = self.memory.token_budget(settings)
        texts = texts_for(interaction.locale)
        language = _model_language(settings, interaction)
        text = describe_settings(
            settings,
            limit,
            budget=budget,
            language=language,
            texts=texts,
            tool_tokens=self.memory.tool_tokens(settings, language),
        )
        await reply(interaction, text)

    async def _show_current(self, interaction: discord.Interaction[Any]) -> None:
        await self._show(
            interaction, await self.memory.get_server_settings(_server_id(interaction))
        )

    async def _update(self, interaction: discord.Interaction[Any], **changes: Any) -> None:
        settings = await self.memory.update_server_settings(_server_id(interaction), **changes)
        await self._show(interaction, settings)

    @settings_group.command(name="show", description="Show this server's memory settings.")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_show(self, interaction: discord.Interaction[Any]) -> None:
        await _defer(interaction)
        server_id = _server_id(interaction)
        settings = await self.memory.get_server_settings(server_id)
        texts = texts_for(interaction.locale)
        language = _model_language(settings, interaction)
        text = describe_settings(
            settings,
            self.memory.config.max_categories,
            budget=self.memory.token_budget(settings),
            language=language,
            texts=texts,
            tool_tokens=self.memory.tool_tokens(settings, language),
        )
        recent = describe_recent_purges(self.memory.recent_purges(server_id), texts=texts)
        await reply(interaction, f"{text}\n{recent}")

    @settings_group.command(name="render-mode", description="How other channels are recalled.")
    @app_commands.describe(mode="crude_summary adds recent messages; supersede shows notes only")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_render_mode(
        self, interaction: discord.Interaction[Any], mode: RenderMode
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, render_mode=mode)

    @settings_group.command(name="cadence", description="Turns before the bot updates its notes.")
    @app_commands.describe(turns="Turns between updates of the notes")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_cadence(
        self,
        interaction: discord.Interaction[Any],
        turns: app_commands.Range[int, _CADENCE[0], _CADENCE[1]],
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, refresh_cadence=turns)

    @settings_group.command(
        name="crude-count", description="Recent messages shown per other channel."
    )
    @app_commands.describe(count="Recent messages per other channel")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_crude_count(
        self,
        interaction: discord.Interaction[Any],
        count: app_commands.Range[int, _CRUDE_COUNT[0], _CRUDE_COUNT[1]],
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, crude_message_count=count)

    @settings_group.command(
        name="token-budget", description="Most tokens memory may add to each prompt here."
    )
    @app_commands.describe(tokens="0 returns to the bot's default; at most the bot's own budget")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_token_budget(
        self,
        interaction: discord.Interaction[Any],
        tokens: app_commands.Range[int, 0, MAX_CONTEXT_TOKEN_BUDGET],
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, context_token_budget=tokens or None)

    @settings_group.command(
        name="language", description="The language of the text the model reads around memory."
    )
    @app_commands.describe(language="auto follows the server's language")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_language(
        self, interaction: discord.Interaction[Any], language: Literal["auto", Language]
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, language=None if language == "auto" else language)

    @settings_group.command(name="enabled", description="Turn short-term memory on or off here.")
    @app_commands.describe(enabled="On or off")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def settings_enabled(self, interaction: discord.Interaction[Any], enabled: bool) -> None:
        await _defer(interaction)
        await self._update(interaction, enabled=enabled)

    @settings_group.command(
        name="purge-leavers", description="Erase members' memory when they leave or are banned."
    )
    @app_commands.describe(purge="Erase it as /purge-memory does (off by default)")
    @has_server_permission_or_owner("administrator")
    @server_only()
    async def settings_purge_leavers(
        self, interaction: discord.Interaction[Any], purge: bool
    ) -> None:
        await _defer(interaction)
        await self._update(interaction, purge_leavers=purge)

    # -- categories -----------------------------------------------------------
    async def _set_categories(
        self, interaction: discord.Interaction[Any], categories: list[Category]
    ) -> None:
        settings = await self.memory.set_categories(_server_id(interaction), categories)
        await self._show(interaction, settings)

    async def _custom_categories(self, interaction: discord.Interaction[Any]) -> list[Category]:
        settings = await self.memory.get_server_settings(_server_id(interaction))
        # The default category stands for "no categories": adding one replaces it.
        return [] if settings.summary_mode else list(settings.categories)

    async def _label_autocomplete(
        self, interaction: discord.Interaction[Any], current: str
    ) -> list[app_commands.Choice[str]]:
        if interaction.guild_id is None:
            return []
        settings = await self.memory.get_server_settings(interaction.guild_id)
        return [
            app_commands.Choice(name=truncate(c.label, 100), value=c.label)
            for c in settings.categories
            if current.casefold() in c.label.casefold()
        ][:25]

    @categories_group.command(name="list", description="List this server's categories.")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def categories_list(self, interaction: discord.Interaction[Any]) -> None:
        await _defer(interaction)
        await self._show_current(interaction)

    @categories_group.command(name="add", description="Add a category to the bot's notes.")
    @app_commands.describe(label="Its name", description="What the bot should keep in it")
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def categories_add(
        self,
        interaction: discord.Interaction[Any],
        label: app_commands.Range[str, _LABEL[0], _LABEL[1]],
        description: app_commands.Range[str, _DESCRIPTION[0], _DESCRIPTION[1]] = "",
    ) -> None:
        await _defer(interaction)
        categories = await self._custom_categories(interaction)
        if any(c.label.casefold() == label.strip().casefold() for c in categories):
            raise Refused("settings.category_exists", label=repr(label))
        categories.append(_category(label, description))
        await self._set_categories(interaction, categories)

    @categories_group.command(name="edit", description="Rename or redescribe a category.")
    @app_commands.describe(
        label="The category to change", new_label="Its new name", description="Its new description"
    )
    @app_commands.autocomplete(label=_label_autocomplete)
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def categories_edit(
        self,
        interaction: discord.Interaction[Any],
        label: str,
        new_label: app_commands.Range[str, _LABEL[0], _LABEL[1]] | None = None,
        description: app_commands.Range[str, _DESCRIPTION[0], _DESCRIPTION[1]] | None = None,
    ) -> None:
        await _defer(interaction)
        settings = await self.memory.get_server_settings(_server_id(interaction))
        categories = list(settings.categories)
        index = _find(settings.categories, label)
        old = categories[index]
        categories[index] = _category(
            new_label or old.label, old.description if description is None else description
        )
        await self._set_categories(interaction, categories)

    @categories_group.command(name="remove", description="Remove a category.")
    @app_commands.describe(label="The category to remove")
    @app_commands.autocomplete(label=_label_autocomplete)
    @has_server_permission_or_owner("manage_guild")
    @server_only()
    async def categories_remove(self, interaction: discord.Interaction[Any], label: str) -> None:
        await _defer(interaction)
        settings = await self.memory.get_server_settings(_server_id(interaction))
        categories = list(settings.categories)
        del categories[_find(settings.categories, label)]
        await self._set_categories(interaction, categories)
