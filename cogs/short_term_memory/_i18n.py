"""What the cog says to people, in their language: one catalogue per language, and the
``Translator`` that gives Discord the commands' localized names and descriptions.

The catalogues are plain JSON files in ``locales/`` (``en.json``, ``ja.json``), one
per language, which translators edit without touching code: ``commands`` holds each
command's ``name`` and ``description`` (and its options') by the command's English
path (``"memory show"``), ``replies`` every text the cog answers with, as
``str.format`` templates. A key missing from a language falls back to English.
"""

from __future__ import annotations

import functools
import json
import logging
import string
from collections.abc import Mapping
from importlib import resources
from typing import Any

import discord
from discord import app_commands

__all__ = [
    "DEFAULT_LANGUAGE",
    "LANGUAGES",
    "CommandTranslator",
    "Refused",
    "Texts",
    "catalogue",
    "language_of",
    "texts_for",
]

log = logging.getLogger("discord_stm")

DEFAULT_LANGUAGE = "en"
LANGUAGES = ("en", "ja")


@functools.cache
def catalogue(language: str) -> dict[str, Any]:
    """The catalogue of ``language`` as stored (``{"commands": ..., "replies": ...}``)."""
    if language not in LANGUAGES:
        raise ValueError(f"no catalogue for {language!r}: one of {', '.join(LANGUAGES)}")
    raw = resources.files(__package__).joinpath("locales", f"{language}.json").read_text("utf-8")
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


def language_of(locale: object) -> str:
    """The shipped language for a Discord locale (``ja``, ``en-US``, a ``discord.Locale``),
    English for any other."""
    value = locale.value if isinstance(locale, discord.Locale) else str(locale or "")
    base = value.split("-")[0].lower()
    return base if base in LANGUAGES else DEFAULT_LANGUAGE


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name}


class Texts:
    """The replies of one language: ``texts("refresh.done", who=...)``."""

    def __init__(self, language: str) -> None:
        self.language = language
        self._replies: dict[str, str] = catalogue(language)["replies"]
        self._english: dict[str, str] = catalogue(DEFAULT_LANGUAGE)["replies"]

    def __call__(self, key: str, /, **values: object) -> str:
        template = self._replies.get(key)
        if template is None:
            template = self._english[key]  # a key the code uses but English lacks: a bug
        return template.format(**values)

    def has(self, key: str) -> bool:
        """True when the catalogues have ``key``."""
        return key in self._replies or key in self._english

    def count(self, key: str, n: int, /, **values: object) -> str:
        """The ``key.one`` or ``key.other`` form for ``n`` (languages without plurals give
        both the same text)."""
        return self(f"{key}.{'one' if n == 1 else 'other'}", n=n, **values)


class Refused(app_commands.AppCommandError):
    """A command refused for a reason the user should read: the catalogue's ``key``,
    filled with ``values``, in the user's language."""

    def __init__(self, key: str, /, **values: object) -> None:
        super().__init__(key)
        self.key = key
        self.values = values


@functools.cache
def texts_for(locale: object) -> Texts:
    """The replies for a Discord locale (English where the language is not shipped)."""
    return Texts(language_of(locale))


def _key(context: app_commands.TranslationContextTypes) -> tuple[str, str, str | None] | None:
    """(the command's English path, the field, the option) a string is translated for."""
    location, data = context.location, context.data
    where = app_commands.TranslationContextLocation
    if isinstance(data, app_commands.Command | app_commands.Group):
        if location in (where.command_name, where.group_name):
            return data.qualified_name, "name", None
        if location in (where.command_description, where.group_description):
            return data.qualified_name, "description", None
    if isinstance(data, app_commands.Parameter):
        field = {where.parameter_name: "name", where.parameter_description: "description"}
        if location in field:
            return data.command.qualified_name, field[location], data.name
    return None


class CommandTranslator(app_commands.Translator):
    """Localized names and descriptions of the cog's commands, from the catalogues.

    The cog installs one in ``cog_load`` when the bot's tree has no translator; a bot
    with its own asks this one first (``await translator.translate(...)``) for the
    cog's commands. A command the bot renamed keeps the bot's name in every language
    (``renamed``: its name -> the cog's name for it); its description is translated.
    """

    def __init__(self, renamed: Mapping[str, str] | None = None) -> None:
        super().__init__()
        self.renamed = dict(renamed or {})

    async def translate(
        self,
        string: app_commands.locale_str,
        locale: discord.Locale,
        context: app_commands.TranslationContextTypes,
    ) -> str | None:
        language = language_of(locale)
        if language == DEFAULT_LANGUAGE:
            return None  # the commands are written in English
        found = _key(context)
        if found is None:
            return None
        path, field, option = found
        head, space, rest = path.partition(" ")
        path = self.renamed.get(head, head) + space + rest
        entry = catalogue(language)["commands"].get(path)
        english = catalogue(DEFAULT_LANGUAGE)["commands"].get(path)
        if entry is None or english is None:
            return None
        if option is not None:
            entry = entry.get("options", {}).get(option)
            english = english.get("options", {}).get(option)
            if entry is None or english is None:
                return None
        # Only what the cog wrote: a name or description the bot changed stays as it is
        # (a renamed command keeps its first name as the string to translate).
        if english.get(field) != string.message:
            return None
        data = context.data
        if field == "name" and option is None and getattr(data, "name", None) != string.message:
            return None
        translated = entry.get(field)
        return translated if isinstance(translated, str) and translated else None
