"""The cog's audience rule against discord.py's own permissions, on random servers.

Each example is a server built from a GUILD_CREATE payload (roles with and without View
Channel or Administrator, categories and channels synced to them or not, @everyone, role
and member overwrites, text, voice, stage and forum channels, public and private threads,
members with random sets of roles) and delivered through discord.py's connection state.
For every pair of channels the rule lets memory of X into a prompt of Y, no member who
can view Y (``permissions_for``, and for a private thread its membership) cannot view X.
The same runs end to end, through a memory on each store: what a prompt shows of other
channels is exactly what the rule allows.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import discord
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.strategies import DrawFn, composite

from benchmarks.audience import (
    ADMIN,
    CATEGORY,
    FORUM,
    MANAGE_THREADS,
    PRIVATE_THREAD,
    PUBLIC_THREAD,
    SEND,
    STAGE,
    TEXT,
    VIEW,
    VOICE,
    Server,
    channel,
    load,
    overwrite,
    role,
    viewers,
)
from cogs._utils.audience import DiscordAudience
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext

BOTH_STORES = True
SLOW_ON_POSTGRES = True
_guild_ids = itertools.count(1 << 40, 1 << 20)

bits = st.sampled_from([(0, 0), (VIEW, 0), (0, VIEW), (VIEW, VIEW)])


@composite
def servers(draw: DrawFn) -> Server:
    """A random server (ids unique across examples, so that one client holds them all)."""
    g = next(_guild_ids)
    everyone = draw(st.sampled_from([VIEW | SEND, VIEW | SEND, SEND, VIEW | ADMIN]))
    server = Server(g, everyone)
    role_ids = [g + 1 + i for i in range(draw(st.integers(0, 4)))]
    for r in role_ids:
        perms = draw(st.sampled_from([0, VIEW, VIEW, VIEW | MANAGE_THREADS, ADMIN, SEND]))
        server.roles.append(role(r, f"r{r}", perms))
    member_ids = [g + 100 + i for i in range(draw(st.integers(1, 6)))]
    for m in member_ids:
        server.members[m] = (
            draw(st.lists(st.sampled_from(role_ids), unique=True)) if role_ids else []
        )

    def overwrites() -> list[dict[str, Any]]:
        made = []
        allow, deny = draw(bits)
        if allow or deny:
            made.append(overwrite(g, 0, allow, deny))
        for r in draw(st.lists(st.sampled_from(role_ids), unique=True)) if role_ids else []:
            made.append(overwrite(r, 0, *draw(bits)))
        for m in draw(st.lists(st.sampled_from(member_ids), unique=True, max_size=2)):
            made.append(overwrite(m, 1, *draw(bits)))
        return made

    ids = itertools.count(g + 1000)
    categories = []
    for _ in range(draw(st.integers(0, 2))):
        category = channel(next(ids), g, CATEGORY, overwrites())
        categories.append(category)
        server.channels.append(category)
    texts = []
    for _ in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from([TEXT, TEXT, VOICE, STAGE, FORUM]))
        parent = draw(st.sampled_from([None, *categories]))
        synced = parent is not None and draw(st.booleans())
        rules = list(parent["permission_overwrites"]) if synced else overwrites()
        made = channel(next(ids), g, kind, rules, int(parent["id"]) if parent else None)
        server.channels.append(made)
        if kind in (TEXT, FORUM):
            texts.append(made)
    for _ in range(draw(st.integers(0, 3)) if texts else 0):
        parent = draw(st.sampled_from(texts))
        private = parent["type"] == TEXT and draw(st.booleans())
        thread = channel(
            next(ids), g, PRIVATE_THREAD if private else PUBLIC_THREAD, parent=int(parent["id"])
        )
        server.channels.append(thread)
        if private:
            server.thread_members[int(thread["id"])] = set(
                draw(st.lists(st.sampled_from(member_ids), unique=True))
            )
    return server


def check(client: discord.Client, audience: DiscordAudience, server: Server) -> dict[int, set[int]]:
    """Every pair the rule allows is allowed by every member; returns what it allows."""
    guild = load(client, server)
    try:
        places = server.talk_channels()
        seen = {c: viewers(guild, server, c) for c in places}
        allows: dict[int, set[int]] = {}
        for y in places:
            others = [x for x in places if x != y]
            allows[y] = set(audience.may_recall(guild.id, y, others))
            for x in allows[y]:
                hidden = seen[y] - seen[x]
                assert not hidden, (
                    f"memory of {x} recalled into {y}, where members {hidden} cannot read it"
                )
            # Exact in the common shapes: a channel whoever is in the server views, and one
            # with the same overwrites (synced to one category), are recalled.
            for x in others:
                found = guild.get_channel(x)
                target = guild.get_channel(y)
                if found is None or target is None:
                    continue  # threads: their parents decide
                if _raw(found) == _raw(target) or (
                    not found._overwrites and server.everyone & VIEW
                ):
                    assert x in allows[y], f"{x} not recalled into {y}"
        return allows
    finally:
        client._connection._remove_guild(guild)


def _raw(place: Any) -> list[tuple[int, int, int, int]]:
    """A channel's overwrites as Discord sent them (``overwrites`` reads an allow and a
    deny of the same permission as a deny; ``permissions_for`` lets the allow win)."""
    return sorted((o.id, o.type, o.allow, o.deny) for o in place._overwrites)


@settings(max_examples=300, deadline=None, database=None)
@given(server=servers())
def test_never_recalled_in_front_of_a_member_who_cannot_read_it(server: Server) -> None:
    client = discord.Client(intents=discord.Intents.all())
    check(client, DiscordAudience(client), server)


def test_through_the_memory_on_each_store(config: STMConfig) -> None:
    """End to end: a turn in every channel, then a prompt in every channel shows exactly
    the other channels the rule allows (one memory on the test's store, one server per
    example)."""

    async def run(examples: list[Server]) -> None:
        client = discord.Client(intents=discord.Intents.all())
        audience = DiscordAudience(client)
        cfg = config.model_copy(update={"max_other_channels": 20})
        async with ShortTermMemory.open(cfg, audience=audience) as memory:
            for server in examples:
                await _play(memory, client, audience, server)

    collected: list[Server] = []

    @settings(max_examples=25, deadline=None, database=None)
    @given(server=servers())
    def gather(server: Server) -> None:
        collected.append(server)

    gather()
    asyncio.run(run(collected))


async def _play(
    memory: ShortTermMemory, client: discord.Client, audience: DiscordAudience, server: Server
) -> None:
    places = server.talk_channels()
    guild = load(client, server)

    def ctx(channel_id: int) -> TurnContext:
        return TurnContext(
            user_id=7, channel_id=channel_id, server_id=server.guild_id, user_text="hi"
        )

    try:
        for c in places:
            said = DialogueMessage(role="user", content=f"words{c}", author_id=7)
            await memory.capture(GenerationFinished(context=ctx(c), messages=[said]))
        seen = {c: viewers(guild, server, c) for c in places}
        for y in places:
            shown = str(await memory.build_context(ctx(y)))
            recalled = {x for x in places if x != y and f"words{x}" in shown}
            assert recalled == set(audience.may_recall(server.guild_id, y, places)) - {y}
            for x in recalled:
                assert seen[y] <= seen[x], f"{x} shown in {y}"
    finally:
        client._connection._remove_guild(guild)
