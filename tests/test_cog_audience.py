"""Other channels' memory, through the cog, only where everyone present can read it: decided
from Discord's permissions at each prompt, following channel, role and thread changes
delivered as gateway events (docs/data.md, "Where a channel's memory may appear")."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_fakes import Harness, harness

from benchmarks.audience import ADMIN, SEND, VIEW, overwrite, role
from cogs.short_term_memory._describe import describe_where
from cogs.testing import Place, channel_payload, subcommand
from stm import DialogueMessage, GenerationFinished, TurnContext
from stm._keys import server_key

HARBOR = 1100
GENERAL, GAMES = 1101, 1102
MOD, STAFF = 1190, 1191


@pytest.fixture
async def bot(tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(tmp_path) as h:
        yield h


async def shown_in(h: Harness, place: Any, person: Any = None) -> str:
    """What a prompt built in ``place`` shows of memory."""
    ctx = h.world.context(person or h.bob, place, "hello")
    return str(await h.memory.build_context(ctx))


async def update_channel(h: Harness, place: Any, overwrites: list[dict[str, Any]]) -> None:
    """A CHANNEL_UPDATE that sets ``place``'s permission overwrites."""
    await h.world.offline.gateway(
        "CHANNEL_UPDATE", {**place.payload, "permission_overwrites": overwrites}
    )


async def add_roles(h: Harness, *roles: dict[str, Any]) -> None:
    for made in roles:
        await h.world.offline.gateway("GUILD_ROLE_CREATE", {"guild_id": str(HARBOR), "role": made})


def locked(*allowed: int) -> list[dict[str, Any]]:
    """@everyone may not view; each role of ``allowed`` may."""
    return [overwrite(HARBOR, 0, deny=VIEW), *(overwrite(r, 0, allow=VIEW) for r in allowed)]


async def test_a_channel_locked_after_the_bot_spoke_there_is_not_recalled_in_general(
    bot: Harness,
):
    """The issue's case: moderators lock #games; the next prompt in #general no longer
    shows what was said there, without anyone speaking in #games again."""
    await bot.say(bot.alice, bot.games, "the secret plan for saturday")
    assert "secret plan" in await shown_in(bot, bot.general)
    await add_roles(bot, role(MOD, "mod", VIEW | SEND))
    await update_channel(bot, bot.games, locked(MOD))
    assert "secret plan" not in await shown_in(bot, bot.general)
    # Unlocked again: recalled again.
    await update_channel(bot, bot.games, [])
    assert "secret plan" in await shown_in(bot, bot.general)


async def test_hidden_from_one_role_is_not_recalled_where_that_role_reads(bot: Harness):
    """A channel everyone but a muted role can read is not shown in a public channel."""
    muted = 1192
    await add_roles(bot, role(muted, "muted", 0))
    await update_channel(bot, bot.games, [overwrite(muted, 0, deny=VIEW)])
    await bot.say(bot.alice, bot.games, "games chatter")
    assert "games chatter" not in await shown_in(bot, bot.general)
    # ... but it is shown in another channel hidden from the same role (a synced one).
    await update_channel(bot, bot.general, [overwrite(muted, 0, deny=VIEW)])
    assert "games chatter" in await shown_in(bot, bot.general)


async def test_a_staff_channel_into_a_smaller_staff_channel_and_not_back(bot: Harness):
    """#staff (staff and moderators) is shown in #mods (moderators); #mods is not shown
    in #staff, whose staff members cannot read #mods."""
    await add_roles(bot, role(MOD, "mod", VIEW | SEND), role(STAFF, "staff", VIEW | SEND))
    await update_channel(bot, bot.games, locked(MOD, STAFF))  # #games is now staff
    await update_channel(bot, bot.general, locked(MOD))  # #general the moderators'
    await bot.say(bot.carol, bot.games, "staff note")
    await bot.say(bot.carol, bot.general, "mods note")
    assert "staff note" in await shown_in(bot, bot.general)
    assert "mods note" not in await shown_in(bot, bot.games)


async def test_a_role_update_applies_to_the_next_prompt(bot: Harness):
    """Moderators given Administrator read every channel: #mods' memory may then appear in
    #staff only if no one else reads #staff; a role made Administrator changes the answer."""
    await add_roles(bot, role(MOD, "mod", VIEW | SEND), role(STAFF, "staff", VIEW | SEND))
    await update_channel(bot, bot.games, locked(STAFF))
    await update_channel(bot, bot.general, locked(MOD))
    await bot.say(bot.carol, bot.games, "staff-only words")
    assert "staff-only words" not in await shown_in(bot, bot.general)
    update = {"guild_id": str(HARBOR), "role": role(MOD, "mod", ADMIN)}
    await bot.world.offline.gateway("GUILD_ROLE_UPDATE", update)
    assert "staff-only words" in await shown_in(bot, bot.general)
    update = {"guild_id": str(HARBOR), "role": role(MOD, "mod", VIEW)}
    await bot.world.offline.gateway("GUILD_ROLE_UPDATE", update)
    assert "staff-only words" not in await shown_in(bot, bot.general)


async def test_a_public_thread_follows_its_parent(bot: Harness):
    thread = Place("harbor/games/t", channel_payload(1150, "t", HARBOR, kind=11, parent_id=GAMES))
    await bot.world.offline.gateway("THREAD_CREATE", {**thread.payload, "newly_created": True})
    await bot.say(bot.alice, thread, "thread talk")
    assert "thread talk" in await shown_in(bot, bot.general)
    assert "thread talk" in await shown_in(bot, bot.games)
    await add_roles(bot, role(MOD, "mod", VIEW | SEND))
    await update_channel(bot, bot.games, locked(MOD))
    assert "thread talk" not in await shown_in(bot, bot.general)
    assert "thread talk" in await shown_in(bot, bot.games)


async def test_a_private_thread_keeps_its_memory_and_reads_its_parents(bot: Harness):
    thread = Place("harbor/games/p", channel_payload(1151, "p", HARBOR, kind=12, parent_id=GAMES))
    await bot.world.offline.gateway("THREAD_CREATE", {**thread.payload, "newly_created": True})
    await bot.say(bot.alice, thread, "between us two")
    await bot.say(bot.bob, bot.games, "games for all")
    assert "between us two" not in await shown_in(bot, bot.games)
    assert "between us two" not in await shown_in(bot, bot.general)
    assert "games for all" in await shown_in(bot, thread)


async def test_a_channel_the_client_does_not_know_is_not_recalled(bot: Harness):
    """A channel missing from discord.py's cache (deleted, not yet received) is not judged."""
    ctx = TurnContext(user_id=bot.alice.id, channel_id=1160, server_id=HARBOR, user_text="x")
    said = DialogueMessage(role="user", content="ghost words", author_id=bot.alice.id)
    await bot.memory.capture(GenerationFinished(context=ctx, messages=[said]))
    assert (await bot.memory.get_entry(server_key(HARBOR, 1160))) is not None
    assert "ghost words" not in await shown_in(bot, bot.general)


async def test_dms_neither_recall_nor_are_recalled(bot: Harness):
    dm = bot.world.offline.dm(bot.alice)
    await bot.say(bot.alice, dm, "dm words")
    await bot.say(bot.alice, bot.general, "general words")
    assert "general words" not in await shown_in(bot, dm, bot.alice)
    assert "dm words" not in await shown_in(bot, bot.general, bot.alice)


async def test_memory_show_says_where_the_channels_memory_may_appear(bot: Harness):
    async def where(place: Any) -> str:
        (answer,) = await bot.run("memory", subcommand("show"), person=bot.bob, place=place)
        return answer.content

    text = await where(bot.games)
    assert "only where everyone who can read that channel can read this one" in text
    assert f"<#{GENERAL}>" in text and f"<#{GAMES}>" not in text
    staff = bot.world.places["harbor/staff"]  # hidden from @everyone
    assert f"<#{staff.id}>" in text  # fewer readers: #games may appear there
    await add_roles(bot, role(MOD, "mod", VIEW | SEND))
    await update_channel(bot, bot.games, locked(MOD))
    text = await where(bot.games)
    # #staff is read by administrators alone, who read everything: it still may.
    assert f"<#{GENERAL}>" not in text and f"<#{staff.id}>" in text
    assert describe_where([], bot_name="Assistant").endswith("Right now: no other channel.")
    dm = bot.world.offline.dm(bot.bob)
    assert "never shown in any other conversation" in await where(dm)


async def test_a_server_in_an_outage_recalls_nothing(bot: Harness):
    """While Discord says the server is unavailable, its changes cannot reach the cache."""
    await bot.say(bot.alice, bot.games, "games chatter")
    assert "games chatter" in await shown_in(bot, bot.general)
    await bot.world.offline.gateway("GUILD_DELETE", {"id": str(HARBOR), "unavailable": True})
    assert "games chatter" not in await shown_in(bot, bot.general)
