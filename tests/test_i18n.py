"""Localized commands and replies: one catalogue per language, complete, and used by every
reply; a Japanese client sees Japanese command names and reads Japanese replies."""

from __future__ import annotations

import re
import string
import sys
from pathlib import Path
from typing import Any

import discord
import pytest
from discord import app_commands
from discord_fakes import Harness, harness

import cogs.short_term_memory._i18n as i18n
from cogs.short_term_memory._i18n import (
    LANGUAGES,
    CommandTranslator,
    catalogue,
    language_of,
    texts_for,
)
from cogs.testing import Reply, option, subcommand
from host.world import ADMIN

# Discord's rule for a command or option name, in any language.
NAME = re.compile(r"^[-_\w]{1,32}$")


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def command_entries(language: str) -> dict[str, dict[str, str]]:
    """Every (command path, option) of a catalogue: its name and description."""
    out = {}
    for path, entry in catalogue(language)["commands"].items():
        out[path] = {"name": entry["name"], "description": entry["description"]}
        for name, opt in entry.get("options", {}).items():
            out[f"{path} :{name}"] = opt
    return out


class TestCatalogues:
    @pytest.mark.parametrize("language", LANGUAGES)
    def test_every_key_exists_in_every_language(self, language: str) -> None:
        """Each shipped language has every reply and every command, option, name and
        description that English has, and no other; each reply fills the same fields."""
        english, other = catalogue("en"), catalogue(language)
        assert set(other["replies"]) == set(english["replies"])
        for key, template in english["replies"].items():
            assert fields(other["replies"][key]) == fields(template), (language, key)
            assert other["replies"][key].strip(), (language, key)
        assert command_entries(language).keys() == command_entries("en").keys()
        for path, entry in command_entries(language).items():
            assert set(entry) == {"name", "description"}, path
            assert NAME.match(entry["name"]) and entry["name"] == entry["name"].lower(), path
            assert 1 <= len(entry["description"]) <= 100, path

    def test_sibling_names_differ_in_every_language(self) -> None:
        """Two commands (or options) of one parent never share a translated name."""
        for language in LANGUAGES:
            seen: dict[tuple[str, str], str] = {}
            for path, entry in command_entries(language).items():
                parent = path.rsplit(" ", 1)[0] if " " in path else ""
                key = (parent, entry["name"])
                assert key not in seen, (language, path, seen.get(key))
                seen[key] = path

    def test_locales_map_to_shipped_languages(self) -> None:
        """Discord's locales choose a shipped language; the others read English."""
        assert language_of(discord.Locale.japanese) == "ja"
        assert language_of("ja") == "ja"
        assert language_of(discord.Locale.american_english) == "en"
        assert language_of(discord.Locale.french) == "en"
        assert language_of(None) == "en"
        assert texts_for("ja")("purge.confirm") == "確認"


async def test_every_registered_command_is_in_the_catalogue(tmp_path: Path) -> None:
    """Each command, group and option the cog registers has its English name and
    description in the catalogue, as written in the code (so translators see all)."""
    english = catalogue("en")["commands"]
    async with harness(tmp_path) as h:
        stack: list[Any] = list(h.cog.__cog_app_commands__)
        seen = set()
        while stack:
            command = stack.pop()
            path = command.qualified_name
            seen.add(path)
            assert english[path]["name"] == command.name, path
            assert english[path]["description"] == command.description, path
            if isinstance(command, app_commands.Group):
                stack += command.commands
                continue
            for parameter in command.parameters:
                entry = english[path]["options"][parameter.name]
                assert entry == {"name": parameter.name, "description": parameter.description}
        assert seen == set(english)


async def test_a_japanese_client_sees_japanese_commands_and_replies(tmp_path: Path) -> None:
    """Through gateway payloads: the commands the bot would sync carry Japanese names and
    descriptions, and an interaction with ``locale: ja`` is answered in Japanese."""
    async with harness(tmp_path) as h:
        tree = h.bot.tree
        translator = tree.translator
        # By name: discord.py imports an extension's modules afresh on every load.
        assert type(translator).__name__ == CommandTranslator.__name__
        payloads = {
            c.name: await c.get_translated_payload(tree, translator) for c in tree.get_commands()
        }
        memory = payloads["memory"]
        assert memory["name_localizations"]["ja"] == "メモリー"
        show = next(o for o in memory["options"] if o["name"] == "show")
        assert show["name_localizations"]["ja"] == "表示"
        assert show["description_localizations"]["ja"].startswith("ここでボットが")
        purge = payloads["purge-memory"]
        user = next(o for o in purge["options"] if o["name"] == "user")
        assert user["name_localizations"]["ja"] == "ユーザー"
        assert "en-US" not in memory.get("name_localizations", {})

        # The server's preferred locale reaches the library with every turn.
        assert h.world.context(h.alice, h.general, "hi").server_locale == "en-US"
        await h.say(h.alice, h.general, "hello")
        (shown,) = await run(h, "memory", subcommand("show"), person=h.alice, locale="ja")
        assert "保持している内容" in shown.content and "What" not in shown.content
        (english,) = await run(h, "memory", subcommand("show"), person=h.alice, locale="en-US")
        assert english.content.startswith("**What")
        (preview,) = await run(h, "memory", subcommand("forget"), person=h.alice, locale="ja")
        assert preview.buttons == ["確認", "キャンセル"]
        answers = await click(h, preview, "確認", person=h.alice, locale="ja")
        assert answers[0].content == "消去中…"  # then edited to what was done
        assert h.world.offline.current(preview).content.startswith("完了")


async def test_a_renamed_command_keeps_the_bots_name(tmp_path: Path) -> None:
    """A command the bot renamed is not given the catalogue's translation."""
    async with harness(tmp_path, cog_options={"command_names": {"refresh": "forget-here"}}) as h:
        tree = h.bot.tree
        command = tree.get_command("forget-here")
        assert command is not None
        translator = tree.translator
        assert translator is not None
        payload = await command.get_translated_payload(tree, translator)
        assert "ja" not in payload.get("name_localizations", {})
        assert (
            payload["description_localizations"]["ja"] == "このチャンネルの短期記憶を消去します。"
        )


async def run(h: Harness, name: str, *options: dict, person: Any, locale: str, **extra: Any):
    place = extra.pop("place", h.general)
    payload = h.world.offline.interaction_payload(
        name, *options, user=person, channel=place, **extra
    )
    payload["locale"] = locale
    return await h.world.offline.deliver(payload)


async def click(h: Harness, reply: Reply, button: str, *, person: Any, locale: str):
    payload = h.world.offline.component_payload(reply, button, user=person)
    payload["locale"] = locale
    return await h.world.offline.deliver(payload)


# -- every reply comes from the catalogue ---------------------------------------------
MARKED = re.compile(r"⟪[^⟪⟫]*⟫")


def pseudo() -> dict[str, Any]:
    """The English catalogue with every reply marked ⟪like this⟫, as the Japanese one."""
    english = catalogue("en")
    return {**english, "replies": {k: f"⟪{v}⟫" for k, v in english["replies"].items()}}


def unmarked(text: str) -> str:
    """What of a reply did not come from the catalogue (memory text shown as data aside)."""
    while MARKED.search(text):
        text = MARKED.sub("", text)
    lines = [line for line in text.splitlines() if not line.startswith(">")]
    lines = [line for line in lines if not re.fullmatch(r"\*\*[^*]+\*\*", line)]
    return "".join(lines).strip()


async def test_every_reply_path_uses_the_catalogue(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the Japanese catalogue replaced by marked English, every reply of every command,
    button and refusal is made of marked text only (and memory shown as data)."""
    marked = pseudo()
    async with harness(tmp_path) as h:
        # The module the loaded extension uses (discord.py imports it afresh on load).
        loaded = sys.modules[i18n.__name__]
        real = loaded.catalogue

        def fake(language: str) -> dict[str, Any]:
            return marked if language == "ja" else real(language)

        monkeypatch.setattr(loaded, "catalogue", fake)
        loaded.texts_for.cache_clear()
        try:
            await check_every_path(h, marked)
        finally:
            loaded.texts_for.cache_clear()


async def check_every_path(h: Harness, marked: dict[str, Any]) -> None:
    replies: list[Reply] = []

    async def use(name: str, *options: dict, person: Any = None, **extra: Any) -> list[Reply]:
        got = await run(h, name, *options, person=person or h.dan, locale="ja", **extra)
        replies.extend(got)
        return got

    async def press(reply: Reply, button: str, person: Any) -> None:
        replies.extend(await click(h, reply, button, person=person, locale="ja"))

    await h.say(h.alice, h.general, "hello")
    settings = "memory-settings"
    await use(settings, subcommand("show"))
    await use(settings, subcommand("render-mode", option("mode", "supersede", 3)))
    await use(settings, subcommand("cadence", option("turns", 3, 4)))
    await use(settings, subcommand("cadence", option("turns", 0, 4)))  # refused by the library
    await use(settings, subcommand("crude-count", option("count", 2, 4)))
    await use(settings, subcommand("token-budget", option("tokens", 900, 4)))
    await use(settings, subcommand("enabled", option("enabled", True, 5)))
    await use(settings, subcommand("purge-leavers", option("purge", False, 5)), permissions=ADMIN)
    await use(settings, subcommand("language", option("language", "ja", 3)))
    await use(settings, subcommand("language", option("language", "auto", 3)))
    group = {"type": 2, "name": "categories"}
    await use(settings, {**group, "options": [subcommand("list")]})
    add = subcommand("add", option("label", "Mood", 3), option("description", "how", 3))
    await use(settings, {**group, "options": [add]})
    await use(settings, {**group, "options": [add]})  # already there
    edit = subcommand("edit", option("label", "Mood", 3), option("new_label", "Feel", 3))
    await use(settings, {**group, "options": [edit]})
    missing = subcommand("remove", option("label", "Nope", 3))
    await use(settings, {**group, "options": [missing]})
    await use(settings, {**group, "options": [subcommand("remove", option("label", "Feel", 3))]})
    await use(settings, subcommand("show"), person=h.alice)  # no permission
    await use(settings, subcommand("show"), place=h.world.dm(h.dan))  # servers only
    await use("memory", subcommand("show"), person=h.alice)
    await use("memory", subcommand("pause"), person=h.alice)
    await use("memory", subcommand("show"), person=h.alice)
    await use("memory", subcommand("resume"), person=h.alice)
    await use("refresh", person=h.bob)
    await use("refresh", person=h.bob)  # cooldown
    await h.say(h.alice, h.general, "again")
    (preview,) = await use("memory", subcommand("forget"), person=h.alice)
    await press(preview, marked["replies"]["purge.confirm"], h.bob)  # not theirs
    await press(preview, marked["replies"]["purge.cancel"], h.alice)
    bob = {"resolved_users": [h.bob]}
    target = option("user", str(h.bob.id), 6)
    await use("purge-memory", target, person=h.alice, **bob)  # not an admin
    await use(
        "purge-memory", target, option("everywhere", True, 5), person=h.dan,
        permissions=ADMIN, **bob,
    )  # fmt: skip
    (preview,) = await use("purge-memory", target, person=h.dan, permissions=ADMIN, **bob)
    await press(preview, marked["replies"]["purge.confirm"], h.dan)
    assert len(replies) >= 25
    for reply in replies:
        current = h.world.offline.current(reply)
        for text in {reply.content, current.content}:
            assert text and unmarked(text) == "", text
        for label in current.buttons:
            assert unmarked(label) == "", label
