"""TurnContext helpers: DM vs server, thread parents, private channels, names."""

from __future__ import annotations

from pathlib import Path

from discord_fakes import harness

from cogs._utils.context import turn_context_from_interaction
from cogs._utils.formatting import chunk_text, truncate
from cogs.testing import channel_payload, guild_payload
from host.demo import settle
from host.world import Place
from stm import DialogueMessage, GenerationFinished, TurnContext


async def test_server_channel_and_dm(tmp_path: Path):
    async with harness(tmp_path) as h:
        ctx = h.world.context(h.alice, h.general, "hi there")
        assert (ctx.user_id, ctx.channel_id, ctx.server_id) == (501, 1101, 1100)
        assert (ctx.user_name, ctx.channel_name, ctx.server_name) == ("Alice", "general", "Harbor")
        assert ctx.bot_name == "Assistant" and ctx.user_text == "hi there"
        assert not ctx.channel_is_private and ctx.parent_channel_id is None
        dm = h.world.context(h.alice, h.world.dm(h.alice), "psst")
        assert dm.server_id is None and dm.channel_name is None and not dm.channel_is_private


async def test_private_channels_and_threads(tmp_path: Path):
    async with harness(tmp_path) as h:
        channels = [
            channel_payload(3101, "open", 3100),
            channel_payload(3102, "hidden", 3100, private=True),
            channel_payload(3103, "open-thread", 3100, kind=11, parent_id=3101),
            channel_payload(3104, "hidden-thread", 3100, kind=11, parent_id=3102),
            channel_payload(3105, "private-thread", 3100, kind=12, parent_id=3101),
        ]
        h.world.offline.add_guild(guild_payload(3100, "Threads", channels))
        seen = {}
        for payload in channels:
            ctx = h.world.context(h.alice, Place(payload["name"], payload), "x")
            seen[payload["name"]] = (ctx.channel_is_private, ctx.parent_channel_id)
        assert seen == {
            "open": (False, None),
            "hidden": (True, None),
            "open-thread": (False, 3101),
            "hidden-thread": (True, 3102),
            "private-thread": (True, 3101),
        }


async def test_from_an_interaction(tmp_path: Path):
    async with harness(tmp_path) as h:
        staff = h.world.places["harbor/staff"]
        payload = h.world.offline.interaction_payload(
            "refresh", user=h.bob.payload, channel=staff.payload
        )
        import discord

        interaction = discord.Interaction(data=payload, state=h.bot._connection)  # type: ignore[arg-type]
        ctx = turn_context_from_interaction(interaction)
        assert (ctx.user_id, ctx.channel_id, ctx.server_id) == (502, 1103, 1100)
        assert ctx.channel_is_private and ctx.user_name == "Bob"


def test_chunk_text_respects_the_limit_and_keeps_words():
    text = ("word " * 1000).strip()
    chunks = chunk_text(text, 2000)
    assert all(len(c) <= 2000 for c in chunks) and len(chunks) == 3
    assert " ".join(chunks).split() == text.split()
    assert chunk_text("x" * 4500, 2000) == ["x" * 2000, "x" * 2000, "x" * 500]
    assert chunk_text("short") == ["short"]
    assert truncate("abcdef", 4) == "abc…" and truncate("abc", 4) == "abc"


async def test_a_thread_of_a_private_channel_stays_private_when_the_host_forgets(
    tmp_path: Path,
):
    """A host that builds its own context without the flag: the cog asks Discord, so a
    thread of a private channel (and a thread the client has not cached) is not
    recalled elsewhere, live or after a restart; a thread of a public one is."""
    channels = [
        channel_payload(3201, "open", 3200),
        channel_payload(3202, "hidden", 3200, private=True),
        channel_payload(3203, "open-thread", 3200, kind=11, parent_id=3201),
        channel_payload(3204, "hidden-thread", 3200, kind=11, parent_id=3202),
    ]
    threads = {"open-thread": (3203, 3201), "hidden-thread": (3204, 3202), "unknown": (3299, 3201)}

    def unflagged(channel: int, parent: int | None) -> TurnContext:
        return TurnContext(
            user_id=501, channel_id=channel, server_id=3200, parent_channel_id=parent
        )

    async with harness(tmp_path) as h:
        h.world.offline.add_guild(guild_payload(3200, "Threads", channels))
        for name, (channel, parent) in threads.items():
            ctx = unflagged(channel, parent)
            result = await h.memory.run_tool(ctx, {"summary": f"NOTES-{name}"})
            assert result.success, result.message
            event = GenerationFinished(
                context=unflagged(channel, parent),
                messages=[DialogueMessage(role="user", content=f"WORDS-{name}", author_id=501)],
            )
            h.bot.dispatch("generation_finished", event)
        await settle()
        shown = str(await h.memory.build_context(unflagged(3201, None)))
        assert "NOTES-open-thread" in shown and "WORDS-open-thread" in shown
        for name in ("hidden-thread", "unknown"):
            assert f"NOTES-{name}" not in shown and f"WORDS-{name}" not in shown, name
        await h.memory.flush()
    async with harness(tmp_path) as h:
        h.world.offline.add_guild(guild_payload(3200, "Threads", channels))
        shown = str(await h.memory.build_context(unflagged(3201, None)))
        assert "NOTES-open-thread" in shown
        assert "NOTES-hidden-thread" not in shown and "NOTES-unknown" not in shown
