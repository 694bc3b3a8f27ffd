"""Recall across channels: how much the cog's audience rule allows, against a member check.

The rule (``cogs/_utils/audience.py``) lets memory of channel X into a prompt of channel Y
only when whoever could view Y, with any set of roles, can view X. The brute-force check
asks discord.py's ``permissions_for`` for every member of the server: X may enter Y when
every member who can view Y can view X. The rule must never allow a pair the member check
refuses (that is checked here too); this counts how many of the pairs the member check
allows the rule allows as well, on a few server shapes built from gateway payloads, and
times one prompt's question.

    python -m benchmarks.audience
"""

from __future__ import annotations

import asyncio
import random
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import discord

from cogs._utils.audience import DiscordAudience
from cogs.testing._payloads import channel_payload, member_payload, user_payload

VIEW = 1 << 10
SEND = 1 << 11
ADMIN = 1 << 3
MANAGE_THREADS = 1 << 34
OWNER = 1
TEXT, VOICE, CATEGORY, STAGE, FORUM = 0, 2, 4, 13, 15
PUBLIC_THREAD, PRIVATE_THREAD = 11, 12


def role(role_id: int, name: str, permissions: int, position: int = 1) -> dict[str, Any]:
    """A role object of a GUILD_CREATE."""
    return {
        "id": str(role_id),
        "name": name,
        "permissions": str(permissions),
        "position": position,
        "color": 0,
        "hoist": False,
        "managed": False,
        "mentionable": False,
        "flags": 0,
    }


def overwrite(target: int, kind: int, allow: int = 0, deny: int = 0) -> dict[str, Any]:
    """A permission overwrite: ``kind`` 0 a role, 1 a member."""
    return {"id": str(target), "type": kind, "allow": str(allow), "deny": str(deny)}


def channel(
    channel_id: int,
    guild_id: int,
    kind: int = TEXT,
    overwrites: Iterable[dict[str, Any]] = (),
    parent: int | None = None,
) -> dict[str, Any]:
    """A guild channel or thread of a GUILD_CREATE (``cogs.testing.channel_payload``)."""
    return channel_payload(
        channel_id, f"c{channel_id}", guild_id, kind=kind, parent_id=parent, overwrites=overwrites
    )


@dataclass
class Server:
    """A server as payloads, with each member's roles and each private thread's members."""

    guild_id: int
    everyone: int  # @everyone's server-level permissions
    roles: list[dict[str, Any]] = field(default_factory=list)
    channels: list[dict[str, Any]] = field(default_factory=list)
    members: dict[int, list[int]] = field(default_factory=dict)  # member id -> role ids
    thread_members: dict[int, set[int]] = field(default_factory=dict)

    def payload(self) -> dict[str, Any]:
        """The GUILD_CREATE payload."""
        guild_channels = [c for c in self.channels if c["type"] not in (11, 12)]
        threads = [c for c in self.channels if c["type"] in (11, 12)]
        members = [
            {**member_payload(user_payload(m, f"m{m}")), "roles": [str(r) for r in roles]}
            for m, roles in self.members.items()
        ]
        return {
            "id": str(self.guild_id),
            "name": f"server {self.guild_id}",
            "owner_id": str(OWNER),
            "unavailable": False,
            "member_count": len(members),
            "roles": [role(self.guild_id, "@everyone", self.everyone, 0), *self.roles],
            "channels": guild_channels,
            "threads": threads,
            "members": members,
            "emojis": [],
            "stickers": [],
            "features": [],
            "preferred_locale": "en-US",
        }

    def talk_channels(self) -> list[int]:
        """The channels one can talk in (not categories)."""
        return [int(c["id"]) for c in self.channels if c["type"] != CATEGORY]


def load(client: discord.Client, server: Server) -> discord.Guild:
    """Deliver ``server``'s GUILD_CREATE to ``client``'s connection state."""
    client._connection.parse_guild_create(server.payload())
    guild = client.get_guild(server.guild_id)
    assert guild is not None
    return guild


def viewers(guild: discord.Guild, server: Server, channel_id: int) -> set[int]:
    """The members who can view a channel, by discord.py's ``permissions_for`` each (a
    private thread: those of its members who can view its parent, and whoever may manage
    threads there)."""
    found = guild.get_channel_or_thread(channel_id)
    assert found is not None
    out = set()
    for member in guild.members:
        perms = found.permissions_for(member)
        if not perms.view_channel:
            continue
        if isinstance(found, discord.Thread) and found.type is discord.ChannelType.private_thread:
            invited = member.id in server.thread_members.get(channel_id, set())
            if not (invited or perms.manage_threads or perms.administrator):
                continue
        out.add(member.id)
    return out


def community(guild_id: int, rng: random.Random, members: int = 300) -> Server:
    """A community server: read-only info, public chat synced to its category, muted role
    denied in chat, voice chat, a forum with posts, staff and moderator channels, an admin
    role, a private thread, a member given a channel."""
    g = guild_id
    muted, member, mod, staff, admin, bots = (g + i for i in range(1, 7))
    s = Server(g, VIEW | SEND)
    s.roles = [
        role(muted, "muted", 0),
        role(member, "member", VIEW | SEND),
        role(mod, "mod", VIEW | SEND | MANAGE_THREADS),
        role(staff, "staff", VIEW | SEND),
        role(admin, "admin", ADMIN),
        role(bots, "bots", VIEW | SEND),
    ]
    chat = [overwrite(muted, 0, deny=VIEW)]
    staff_only = [overwrite(g, 0, deny=VIEW), overwrite(staff, 0, allow=VIEW)]
    mod_only = [overwrite(g, 0, deny=VIEW), overwrite(mod, 0, allow=VIEW)]
    staff_and_mods = [*staff_only, overwrite(mod, 0, allow=VIEW)]
    n = g + 100
    s.channels = [
        channel(n + 1, g, CATEGORY),
        channel(n + 2, g, TEXT, [], n + 1),  # rules
        channel(n + 3, g, TEXT, [], n + 1),  # announcements
        channel(n + 10, g, CATEGORY, chat),
        *(channel(n + 11 + i, g, TEXT, chat, n + 10) for i in range(4)),  # synced chat
        channel(n + 15, g, VOICE, chat, n + 10),
        channel(n + 16, g, FORUM, chat, n + 10),
        channel(n + 17, g, PUBLIC_THREAD, parent=n + 16),  # forum posts
        channel(n + 18, g, PUBLIC_THREAD, parent=n + 16),
        channel(n + 19, g, PUBLIC_THREAD, parent=n + 11),
        channel(n + 20, g, PRIVATE_THREAD, parent=n + 11),
        channel(n + 30, g, CATEGORY, staff_and_mods),
        channel(n + 31, g, TEXT, staff_and_mods, n + 30),  # synced staff channels
        channel(n + 32, g, TEXT, staff_and_mods, n + 30),
        channel(n + 33, g, TEXT, mod_only, n + 30),  # the moderators' own
        channel(n + 34, g, TEXT, staff_only, n + 30),
        channel(n + 35, g, TEXT, [*mod_only, overwrite(500, 1, allow=VIEW)], n + 30),
        channel(n + 36, g, VOICE, staff_and_mods, n + 30),
    ]
    for i in range(members):
        user = 500 + i
        roles = [member] if rng.random() < 0.8 else []
        if rng.random() < 0.03:
            roles.append(muted)
        if rng.random() < 0.04:
            roles += [staff, mod] if rng.random() < 0.7 else [staff]
        if rng.random() < 0.01:
            roles.append(admin)
        s.members[user] = roles
    s.thread_members[n + 20] = {500, 501, 502}
    return s


def gated(guild_id: int, rng: random.Random, members: int = 300) -> Server:
    """A verification-gated server: @everyone sees only the welcome channel; the verified
    role sees the rest; a VIP lounge, a moderators' room, a channel hidden from newcomers."""
    g = guild_id
    verified, vip, mod, newcomer = (g + i for i in range(1, 5))
    s = Server(g, SEND)
    s.roles = [
        role(verified, "verified", VIEW | SEND),
        role(vip, "vip", 0),
        role(mod, "mod", VIEW | SEND),
        role(newcomer, "newcomer", 0),
    ]
    n = g + 100
    s.channels = [
        channel(n + 1, g, TEXT, [overwrite(g, 0, allow=VIEW)]),  # welcome
        channel(n + 2, g, TEXT),
        channel(n + 3, g, TEXT),
        channel(n + 4, g, TEXT, [overwrite(newcomer, 0, deny=VIEW)]),
        channel(n + 5, g, TEXT, [overwrite(verified, 0, deny=VIEW), overwrite(vip, 0, allow=VIEW)]),
        channel(n + 6, g, TEXT, [overwrite(verified, 0, deny=VIEW), overwrite(mod, 0, allow=VIEW)]),
        channel(n + 7, g, VOICE),
        channel(n + 8, g, PUBLIC_THREAD, parent=n + 2),
    ]
    for i in range(members):
        roles = [verified] if rng.random() < 0.85 else []
        if roles and rng.random() < 0.1:
            roles.append(newcomer)
        if roles and rng.random() < 0.05:
            roles.append(vip)
        if roles and rng.random() < 0.03:
            roles.append(mod)
        s.members[1000 + i] = roles
    return s


def small(guild_id: int, rng: random.Random, members: int = 40) -> Server:
    """A friends' server: a few public channels, one private room for two of them."""
    g = guild_id
    s = Server(g, VIEW | SEND)
    n = g + 100
    room = [
        overwrite(g, 0, deny=VIEW),
        overwrite(2000, 1, allow=VIEW),
        overwrite(2001, 1, allow=VIEW),
    ]
    s.channels = [
        channel(n + 1, g, TEXT),
        channel(n + 2, g, TEXT),
        channel(n + 3, g, VOICE),
        channel(n + 4, g, TEXT, room),
        channel(n + 5, g, PRIVATE_THREAD, parent=n + 1),
    ]
    s.members = {2000 + i: [] for i in range(members)}
    s.thread_members[n + 5] = {2000, 2002}
    return s


SHAPES = {"community": community, "gated": gated, "small": small}


def measure(shape: str, seed: int = 1) -> dict[str, Any]:
    """Pairs (Y, X) the member check allows, the rule allows, and the rule's time."""

    async def run() -> dict[str, Any]:
        client = discord.Client(intents=discord.Intents.all())
        try:
            server = SHAPES[shape](10_000 * (1 + list(SHAPES).index(shape)), random.Random(seed))
            guild = load(client, server)
            audience = DiscordAudience(client)
            places = server.talk_channels()
            seen = {c: viewers(guild, server, c) for c in places}
            brute = rule = 0
            for y in places:
                others = [x for x in places if x != y]
                allowed = audience.may_recall(guild.id, y, others)
                for x in others:
                    ok = seen[y] <= seen[x]
                    brute += ok
                    rule += x in allowed
                    if x in allowed and not ok:
                        raise AssertionError(f"{shape}: {x} recalled into {y} unsoundly")
            # One prompt's question, as the cog is asked it: three candidates, decided
            # before (the cache warm) and for the first time (a new audience each time).
            y, xs = places[4], places[:3]
            warm = _timed(lambda: audience.may_recall(guild.id, y, xs))
            cold = _timed(lambda: DiscordAudience(client).may_recall(guild.id, y, xs), 2000)
            return {
                "shape": shape,
                "channels": len(places),
                "members": len(server.members),
                "pairs": len(places) * (len(places) - 1),
                "member_check_allows": brute,
                "rule_allows": rule,
                "share": round(rule / brute, 3) if brute else 1.0,
                "warm_us": warm,
                "cold_us": cold,
            }
        finally:
            await client.close()

    return asyncio.run(run())


def _timed(call: Any, n: int = 20_000) -> float:
    times = []
    clock = time.perf_counter
    for _ in range(n):
        start = clock()
        call()
        times.append(clock() - start)
    return round(statistics.median(times) * 1e6, 2)


def main() -> list[dict[str, Any]]:
    out = []
    for shape in SHAPES:
        row = measure(shape)
        out.append(row)
        print(
            f"{row['shape']:10} {row['channels']:3} channels {row['members']:4} members: "
            f"member check allows {row['member_check_allows']:4} of {row['pairs']:4} pairs, "
            f"the rule {row['rule_allows']:4} ({row['share']:.1%}); one prompt's question "
            f"{row['warm_us']} µs decided before, {row['cold_us']} µs first time"
        )
    return out


if __name__ == "__main__":
    main()
