"""``/memory-settings``: Manage Server (or the owner) only, validated, and effective."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from discord_fakes import BotOpener

from cogs.testing import option, subcommand
from stm._keys import server_key

BOTH_STORES = True  # the settings live in the store
SLOW_ON_POSTGRES = True  # the cog sits above the store: PostgreSQL in the full run


def only(replies: list) -> str:
    assert len(replies) == 1 and replies[0].ephemeral, replies
    return replies[0].content


def setting(name: str, field: str, value: object, kind: int) -> dict:
    return subcommand(name, option(field, value, kind))


def categories(action: str, *options: dict) -> dict:
    return subcommand("categories", subcommand(action, *options), group=True)


class TestWhoMayChangeSettings:
    async def test_a_member_is_refused(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(
                await h.run(
                    "memory-settings",
                    setting("cadence", "turns", 2, 4),
                    person=h.alice,
                    place=h.general,
                )
            )
            assert "Manage Server" in text
            assert (await h.memory.get_server_settings(1100)).refresh_cadence == 5

    async def test_manage_server_admin_and_owner_may(self, open_bot: BotOpener):
        async with open_bot() as h:
            owner = replace(h.carol, permissions=0)
            for value, person in ((2, h.dan), (3, h.carol), (4, owner)):
                text = only(
                    await h.run(
                        "memory-settings",
                        setting("cadence", "turns", value, 4),
                        person=person,
                        place=h.general,
                    )
                )
                assert f"every {value} turns" in text
            assert (await h.memory.get_server_settings(1100)).refresh_cadence == 4
            assert (await h.memory.get_server_settings(1200)).refresh_cadence == 5

    async def test_refused_in_a_dm(self, open_bot: BotOpener):
        async with open_bot() as h:
            dm = h.world.dm(h.carol)
            text = only(
                await h.run("memory-settings", subcommand("show"), person=h.carol, place=dm)
            )
            assert "only be used in a server" in text


class TestSettings:
    async def test_render_mode_crude_count_and_show(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.run(
                "memory-settings",
                setting("render-mode", "mode", "supersede", 3),
                person=h.dan,
                place=h.general,
            )
            await h.run(
                "memory-settings",
                setting("crude-count", "count", 2, 4),
                person=h.dan,
                place=h.general,
            )
            settings = await h.memory.get_server_settings(1100)
            assert settings.render_mode == "supersede" and settings.crude_message_count == 2
            text = only(
                await h.run("memory-settings", subcommand("show"), person=h.dan, place=h.general)
            )
            assert "`supersede`" in text and "per other channel: 2" in text

    async def test_a_bad_value_is_answered_clearly_and_changes_nothing(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(
                await h.run(
                    "memory-settings",
                    setting("render-mode", "mode", "everything", 3),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert text.startswith("That was not accepted")
            text = only(
                await h.run(
                    "memory-settings",
                    setting("cadence", "turns", 0, 4),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert text.startswith("That was not accepted")
            settings = await h.memory.get_server_settings(1100)
            assert settings.render_mode == "crude_summary" and settings.refresh_cadence == 5

    async def test_token_budget_is_set_shown_and_returned_to_the_default(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(
                await h.run(
                    "memory-settings",
                    setting("token-budget", "tokens", 1200, 4),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert "each prompt: 1,200" in text
            settings = await h.memory.get_server_settings(1100)
            assert settings.context_token_budget == 1200
            await h.say(h.alice, h.general, "hello")
            context = await h.memory.build_context(h.world.context(h.alice, h.general, "hi"))
            assert context.tokens is not None and context.tokens <= 1200
            text = only(
                await h.run(
                    "memory-settings",
                    setting("token-budget", "tokens", 0, 4),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert "each prompt: no limit" in text
            assert (await h.memory.get_server_settings(1100)).context_token_budget is None

    async def test_a_budget_smaller_than_the_tool_is_pointed_out(self, open_bot: BotOpener):
        """A budget the tool's definition does not fit in leaves the model no tool: the
        answer says so, as long as the budget stays that small."""
        async with open_bot() as h:
            small = only(
                await h.run(
                    "memory-settings",
                    setting("token-budget", "tokens", 1, 4),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert "smaller than the memory tool itself" in small
            roomy = only(
                await h.run(
                    "memory-settings",
                    setting("token-budget", "tokens", 5000, 4),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert "smaller than the memory tool" not in roomy

    async def test_off_means_nothing_is_captured(self, open_bot: BotOpener):
        async with open_bot() as h:
            text = only(
                await h.run(
                    "memory-settings",
                    setting("enabled", "enabled", False, 5),
                    person=h.dan,
                    place=h.general,
                )
            )
            assert "**off**" in text
            await h.say(h.alice, h.general, "not kept")
            assert await h.memory.get_entry(server_key(1100, h.general.id)) is None
            await h.say(h.alice, h.elsewhere, "kept in the other server")
            assert await h.memory.get_entry(server_key(1200, h.elsewhere.id)) is not None


class TestCategories:
    async def test_add_edit_remove_and_list(self, open_bot: BotOpener):
        async with open_bot() as h:

            async def run(action: str, *options: dict) -> str:
                return only(
                    await h.run(
                        "memory-settings",
                        categories(action, *options),
                        person=h.dan,
                        place=h.general,
                    )
                )

            text = await run("add", option("label", "Mood", 3), option("description", "Feel", 3))
            assert "Categories (1/5)" in text and "**Mood**: Feel" in text
            await run("add", option("label", "Plans", 3))
            text = await run(
                "edit", option("label", "mood", 3), option("new_label", "Atmosphere", 3)
            )
            assert "**Atmosphere**: Feel" in text
            text = await run("remove", option("label", "Plans", 3))
            assert "Plans" not in text
            assert "Atmosphere" in await run("list")
            labels = [c.label for c in (await h.memory.get_server_settings(1100)).categories]
            assert labels == ["Atmosphere"]
            # The tool now writes categories.
            ctx = h.world.context(h.alice, h.general, "hi")
            schema = h.memory.tool_schema(ctx)
            assert schema is not None
            assert "atmosphere" in schema["function"]["parameters"]["properties"]
            # Removing the last one restores the default summary category.
            await run("remove", option("label", "Atmosphere", 3))
            assert (await h.memory.get_server_settings(1100)).summary_mode

    async def test_at_most_the_configured_number(self, open_bot: BotOpener):
        async with open_bot(max_categories=2) as h:
            for label in ("One", "Two", "Three"):
                text = only(
                    await h.run(
                        "memory-settings",
                        categories("add", option("label", label, 3)),
                        person=h.dan,
                        place=h.general,
                    )
                )
            assert text.startswith("That was not accepted") and "at most 2" in text
            assert len((await h.memory.get_server_settings(1100)).categories) == 2

    async def test_unknown_or_duplicate_labels_are_refused(self, open_bot: BotOpener):
        async with open_bot() as h:
            await h.run(
                "memory-settings",
                categories("add", option("label", "Mood", 3)),
                person=h.dan,
                place=h.general,
            )
            for action, label in (("add", "mood"), ("remove", "Nope"), ("edit", "Nope")):
                text = only(
                    await h.run(
                        "memory-settings",
                        categories(action, option("label", label, 3)),
                        person=h.dan,
                        place=h.general,
                    )
                )
                assert text.startswith("That was not accepted"), text


_NUMBERS = [
    ("settings_cadence", "turns", "refresh_cadence"),
    ("settings_crude_count", "count", "crude_message_count"),
    ("settings_token_budget", "tokens", "context_token_budget"),
]
_TEXTS = [
    ("categories_add", "label", "label"),
    ("categories_add", "description", "description"),
    ("categories_edit", "new_label", "label"),
    ("categories_edit", "description", "description"),
]


def _option(command: str, name: str) -> object:
    from cogs.short_term_memory._settings import SettingsCommands

    return next(p for p in getattr(SettingsCommands, command).parameters if p.name == name)


@pytest.mark.parametrize(("command", "name", "field"), _NUMBERS)
def test_a_number_option_takes_exactly_what_the_settings_accept(
    command: str, name: str, field: str
) -> None:
    """Discord offers exactly the values the server's settings accept: both ends are
    accepted, one past either end is refused, so a bound changed in the library reaches
    the command."""
    from pydantic import ValidationError

    from stm import ServerSettings

    option = _option(command, name)
    low, high = option.min_value, option.max_value  # type: ignore[attr-defined]
    ServerSettings(**{field: low})
    ServerSettings(**{field: high})
    for outside in (low - 1, high + 1):
        with pytest.raises(ValidationError):
            ServerSettings(**{field: outside})


@pytest.mark.parametrize(("command", "name", "field"), _TEXTS)
def test_a_text_option_takes_exactly_the_lengths_a_category_accepts(
    command: str, name: str, field: str
) -> None:
    """The same for a category's label and description, by length."""
    from stm import Category

    option = _option(command, name)
    low, high = option.min_value, option.max_value  # type: ignore[attr-defined]

    def category(text: str) -> Category:
        return Category(text or "x", "") if field == "label" else Category("x", text)

    category("y" * max(low, 1))
    category("y" * high)
    with pytest.raises(ValueError):
        category("y" * (high + 1))
    if low > 0:
        with pytest.raises(ValueError):
            Category("y" * (low - 1), "")


def test_the_language_option_offers_every_language_the_settings_take() -> None:
    """``auto`` and each language ``ServerSettings`` accepts, each with the library's
    locale file: a language added to the library reaches the command."""
    from typing import get_args

    import stm
    from stm import ServerSettings
    from stm._models import Language

    choices = [choice.value for choice in _option("settings_language", "language").choices]  # type: ignore[attr-defined]
    assert choices == ["auto", *get_args(Language)]
    locales = Path(stm.__file__).parent / "locales"
    for language in choices[1:]:
        assert ServerSettings(language=language).language == language
        assert (locales / f"{language}.json").is_file()
