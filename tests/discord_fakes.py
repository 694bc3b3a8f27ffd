"""Test helpers: a not logged-in bot with the extension loaded, in a small offline world."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

from discord.ext import commands

from cogs.short_term_memory import COG_NAME, EXTENSION, ShortTermMemoryCog
from cogs.testing import Reply
from host.demo import make_bot, settle
from host.world import World
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext

__all__ = ["BotOpener", "Harness", "harness"]


class Harness:
    """A loaded bot, its cog and the world it lives in."""

    def __init__(self, bot: commands.Bot, world: World) -> None:
        self.bot = bot
        self.world = world
        # Not isinstance: discord.py re-imports an extension's modules on every load.
        cog = bot.get_cog(COG_NAME)
        assert cog is not None
        self.cog: Any = cog
        self.memory: ShortTermMemory = cog.memory  # type: ignore[attr-defined]
        people, places = world.people, world.places
        self.alice, self.bob, self.carol, self.dan = (
            people["alice"],
            people["bob"],
            people["carol"],
            people["dan"],
        )
        self.general, self.games = places["harbor/general"], places["harbor/games"]
        self.elsewhere = places["lighthouse/general"]

    async def say(self, person: Any, place: Any, text: str, reply: str = "ok") -> TurnContext:
        """Dispatch a finished turn the way a host does, and let the cog capture it."""
        ctx = self.world.context(person, place, text)
        event = GenerationFinished(
            context=ctx,
            messages=[
                DialogueMessage(role="user", content=text, author_id=person.id),
                DialogueMessage(role="assistant", content=reply),
            ],
        )
        self.bot.dispatch("generation_finished", event)
        await settle()
        return ctx

    async def run(
        self, name: str, *options: dict[str, Any], person: Any, place: Any, **extra: Any
    ) -> list[Reply]:
        """Use a slash command and return the replies."""
        return await self.world.command(name, *options, person=person, place=place, **extra)

    async def click(
        self, reply: Reply, button: str, *, person: Any, permissions: int | None = None
    ) -> list[Reply]:
        """``person`` presses ``button`` on the message ``reply`` is (with ``permissions``
        in the press's payload: their own unless given); returns the replies."""
        return await self.world.offline.click(reply, button, user=person, permissions=permissions)

    async def confirmed(
        self, name: str, *options: dict[str, Any], person: Any, place: Any, **extra: Any
    ) -> tuple[Reply, list[Reply]]:
        """Use a purge command and press Confirm on its preview: (the preview, the replies
        to the press)."""
        (preview,) = await self.run(name, *options, person=person, place=place, **extra)
        assert preview.buttons == ["Confirm", "Cancel"], preview
        return preview, await self.click(preview, "Confirm", person=person)


@asynccontextmanager
async def harness(
    tmp_path: Path, *, cog_options: dict[str, Any] | None = None, **settings: Any
) -> AsyncIterator[Harness]:
    """A bot over a fresh SQLite file in ``tmp_path`` (or the ``database`` given); closed
    (memory drained) on exit.

    With ``cog_options`` the cog is built with them (``ShortTermMemoryCog(bot, config,
    tools=..., **cog_options)``) instead of loaded as the extension."""
    settings.setdefault("database", str(tmp_path / "stm.sqlite3"))
    config = STMConfig(**settings)
    bot = make_bot(config)
    async with bot:
        if cog_options is None:
            await bot.load_extension(EXTENSION)
        else:
            tools = bot.tools  # type: ignore[attr-defined]
            await bot.add_cog(ShortTermMemoryCog(bot, config, tools=tools, **cog_options))
        yield Harness(bot, World(bot))


# Opens a bot with the cog over a database of the test's store (conftest's ``open_bot``).
BotOpener = Callable[..., AbstractAsyncContextManager[Harness]]
