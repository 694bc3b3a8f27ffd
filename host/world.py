"""A small offline Discord world for the demo and the console: two servers, people, a DM."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from typing import Any

import discord
from discord.ext import commands

from cogs.short_term_memory import turn_context_from_message
from cogs.testing import (
    OfflineDiscord,
    Place,
    Reply,
    channel_payload,
    dm_channel_payload,
    guild_payload,
)
from cogs.testing import Person as OfflinePerson
from stm import TurnContext

__all__ = ["ADMIN", "OWNER_ID", "Person", "Place", "World", "relative_time"]

ADMIN = 1 << 3
MANAGE_SERVER = 1 << 5
OWNER_ID = 503


_MARKUP = re.compile(r"<(@!?|#)(\d+)>|<t:(-?\d+)(?::[tTdDfFR])?>")


def relative_time(moment: float, now: float) -> str:
    """``moment`` as a terminal reader would say it: "in 12 hours", "3 minutes ago"."""
    seconds = round(moment - now)
    size = abs(seconds)
    units = (("day", 86400), ("hour", 3600), ("minute", 60))
    unit, length = next(((u, n) for u, n in units if size >= n), ("second", 1))
    count = round(size / length)
    amount = f"{count} {unit}{'' if count == 1 else 's'}"
    return f"in {amount}" if seconds >= 0 else f"{amount} ago"


@dataclass(frozen=True)
class Person(OfflinePerson):
    """A member of the world, called by ``key`` in the console: ``/as alice``."""

    key: str = ""


class World:
    """Two servers (Harbor: #general, #games, private #staff; Lighthouse: #general) and DMs."""

    def __init__(self, bot: commands.Bot, *, bot_name: str = "Assistant") -> None:
        self.bot = bot
        self.offline = OfflineDiscord(bot, bot_name=bot_name)
        self.people = {
            p.key: p
            for p in (
                Person(501, "Alice", key="alice"),
                Person(502, "Bob", key="bob"),
                Person(OWNER_ID, "Carol", ADMIN, key="carol"),
                Person(504, "Dan", MANAGE_SERVER, key="dan"),
            )
        }
        harbor = [
            channel_payload(1101, "general", 1100),
            channel_payload(1102, "games", 1100),
            channel_payload(1103, "staff", 1100, private=True),
        ]
        lighthouse = [channel_payload(1201, "general", 1200)]
        self.offline.add_guild(guild_payload(1100, "Harbor", harbor, owner_id=OWNER_ID))
        self.offline.add_guild(guild_payload(1200, "Lighthouse", lighthouse, owner_id=OWNER_ID))
        self.places = {
            **{f"harbor/{c['name']}": Place(f"harbor/{c['name']}", c) for c in harbor},
            **{f"lighthouse/{c['name']}": Place(f"lighthouse/{c['name']}", c) for c in lighthouse},
        }

    def readable(self, text: str, now: float | None = None) -> str:
        """``text`` with Discord's markup (mentions, timestamps) as a terminal reader needs it."""
        clock = time.time() if now is None else now
        names = {p.id: p.name for p in self.people.values()}
        channels = {place.id: place.key for place in self.places.values()}

        def plain(match: re.Match[str]) -> str:
            kind, ident, stamp = match.groups()
            if stamp is not None:
                return relative_time(int(stamp), clock)
            if kind == "#":
                return "#" + channels.get(int(ident), ident)
            return "@" + names.get(int(ident), ident)

        return _MARKUP.sub(plain, text)

    def dm(self, person: Person) -> Place:
        """``person``'s DM with the bot."""
        return Place("dm", dm_channel_payload(9000 + person.id % 1000, person.payload))

    def message(self, person: Person, place: Place, text: str) -> discord.Message:
        """The ``discord.Message`` the gateway would deliver for ``person`` saying ``text``."""
        return self.offline.message(person, place, text)

    def context(
        self, person: Person, place: Place, text: str, *, persona_id: int | None = None
    ) -> TurnContext:
        """The ``TurnContext`` the cog's helper builds from that message."""
        return turn_context_from_message(self.message(person, place, text), persona_id=persona_id)

    async def command(
        self, name: str, *options: dict[str, Any], person: Person, place: Place, **extra: Any
    ) -> list[Reply]:
        """``person`` uses ``/name`` in ``place``; returns the bot's replies."""
        return await self.offline.command(name, *options, user=person, channel=place, **extra)
