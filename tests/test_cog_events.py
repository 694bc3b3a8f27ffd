"""Discord's own deletes and edits reach the memory: each event is delivered as a gateway
payload and parsed by discord.py, on both stores; where the feed is involved a second
memory on the same database (another process's view) must follow."""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from discord_fakes import Harness, harness
from helpers import paused

from cogs.testing import guild_payload, member_payload, snowflake
from host.world import Person, Place
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm._keys import server_key, user_key

BOTH_STORES = True
HARBOR = 1100


@pytest.fixture
async def bot(store_database: str, tmp_path: Path) -> AsyncIterator[Harness]:
    async with harness(tmp_path, database=store_database) as h:
        yield h


@pytest.fixture
async def other(store_database: str) -> AsyncIterator[ShortTermMemory]:
    """Another process's memory on the same database, its follower stopped: the test reads
    the feed with ``catch_up``."""
    memory = await paused(await ShortTermMemory.open(STMConfig(database=store_database)))
    yield memory
    await memory.close()


def finished(ctx: TurnContext, text: str, reply: str, reply_id: int | None) -> GenerationFinished:
    return GenerationFinished(
        context=ctx,
        messages=[
            DialogueMessage(
                role="user", content=text, author_id=ctx.user_id, message_id=ctx.message_id
            ),
            DialogueMessage(role="assistant", content=reply, message_id=reply_id),
        ],
    )


async def said(
    h: Harness, person: Person, place: Place, text: str, also: ShortTermMemory | None = None
) -> tuple[TurnContext, int]:
    """A turn whose messages carry their ids, captured by the bot (and by ``also``):
    the turn's context and the reply's id."""
    ctx = h.world.context(person, place, text)
    reply_id = snowflake()
    event = finished(ctx, text, f"reply to {text}", reply_id)
    h.bot.dispatch("generation_finished", event)
    await h.world.offline.settle()
    if also is not None:
        await also.capture(event)
    return ctx, reply_id


def texts(entry: Any) -> list[str]:
    return [] if entry is None else [m.content for m in entry.messages]


async def held(memory: ShortTermMemory, place: Place, person: Person) -> list[str]:
    server = await memory.get_entry(server_key(HARBOR, place.id))
    own = await memory.get_entry(user_key(person.id, place.id))
    return texts(server) + texts(own)


def delete_payload(place: Place, message_id: int) -> dict[str, Any]:
    return {"id": str(message_id), "channel_id": str(place.id), "guild_id": str(HARBOR)}


def update_payload(h: Harness, person: Person, place: Place, message_id: int, content: Any):
    data = h.world.offline._message_data(person, place, "")
    data["id"] = str(message_id)
    data["edited_timestamp"] = data["timestamp"]
    data["content"] = content
    return data


async def test_a_deleted_message_leaves_every_window(bot: Harness, other: ShortTermMemory):
    """MESSAGE_DELETE: the message is gone from the user's and the server's entry here and,
    once the feed is read, in the other process too; the rest stays."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "regret this", also=other)
    await said(h, h.alice, h.general, "keep this", also=other)
    assert ctx.message_id is not None
    await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, ctx.message_id))
    for memory in (h.memory,):
        shown = await held(memory, h.general, h.alice)
        assert "regret this" not in shown and "keep this" in shown
        assert "reply to regret this" in shown  # only the message deleted goes
    await h.memory.flush()
    assert "regret this" in await held(other, h.general, h.alice)
    await other.follower.catch_up()
    shown = await held(other, h.general, h.alice)
    assert "regret this" not in shown and "keep this" in shown
    assert h.memory.metrics.discord_events["message_delete"] == 1
    assert h.memory.metrics.messages_deleted == 2  # the server's and Alice's own entry


async def test_a_bulk_delete_removes_every_message_it_names(bot: Harness, other: ShortTermMemory):
    """MESSAGE_DELETE_BULK (a moderator clearing a raid): the user messages and the bot's
    replies it names go, here and in the other process."""
    h = bot
    first, reply_one = await said(h, h.bob, h.general, "spam one", also=other)
    second, _ = await said(h, h.bob, h.general, "spam two", also=other)
    await said(h, h.alice, h.general, "a real question", also=other)
    ids = [first.message_id, second.message_id, reply_one, snowflake()]
    payload = {"ids": [str(i) for i in ids], "channel_id": str(h.general.id)}
    payload["guild_id"] = str(HARBOR)
    await h.world.offline.gateway("MESSAGE_DELETE_BULK", payload)
    await h.memory.flush()
    await other.follower.catch_up()
    for memory in (h.memory, other):
        shown = await held(memory, h.general, h.bob)
        assert not any(t in shown for t in ("spam one", "spam two", "reply to spam one"))
        assert "reply to spam two" in shown
        assert "a real question" in await held(memory, h.general, h.alice)
    assert h.memory.metrics.discord_events["bulk_message_delete"] == 1


async def test_an_edit_replaces_the_text_and_other_processes_drop_it(
    bot: Harness, other: ShortTermMemory
):
    """MESSAGE_UPDATE with new content: this process holds the new text (the bot's mention
    taken out), never the old; the other process, whose feed holds no text, drops it."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "my pin is 1234", also=other)
    assert ctx.message_id is not None
    mention = h.world.offline.mention
    payload = update_payload(h, h.alice, h.general, ctx.message_id, f"{mention} my pin is ****")
    await h.world.offline.gateway("MESSAGE_UPDATE", payload)
    shown = await held(h.memory, h.general, h.alice)
    assert "my pin is ****" in shown and "my pin is 1234" not in shown
    await h.memory.flush()
    await other.follower.catch_up()
    shown = await held(other, h.general, h.alice)
    assert "my pin is 1234" not in shown and "my pin is ****" not in shown
    assert "reply to my pin is 1234" in shown
    assert h.memory.metrics.discord_events["message_edit"] == 1


async def test_an_update_that_is_not_an_edit_changes_nothing(bot: Harness, other: ShortTermMemory):
    """MESSAGE_UPDATE without ``edited_timestamp`` (an embed appearing, a pin), even with
    different or empty content: nothing changes here, and nothing reaches the feed."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "see https://example.com", also=other)
    assert ctx.message_id is not None
    for content in ("see https://example.com", ""):
        payload = update_payload(h, h.alice, h.general, ctx.message_id, content)
        payload["edited_timestamp"] = None
        await h.world.offline.gateway("MESSAGE_UPDATE", payload)
    await h.memory.flush()
    await other.follower.catch_up()
    assert "see https://example.com" in await held(h.memory, h.general, h.alice)
    assert "see https://example.com" in await held(other, h.general, h.alice)
    assert h.memory.metrics.discord_events.get("message_edit", 0) == 0


async def test_an_edit_to_unreadable_content_drops_the_message(bot: Harness):
    """An edit whose content is empty (no Message Content intent, or only an attachment
    left) drops the message."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "see the link")
    assert ctx.message_id is not None
    empty = update_payload(h, h.alice, h.general, ctx.message_id, "")
    await h.world.offline.gateway("MESSAGE_UPDATE", empty)
    assert "see the link" not in await held(h.memory, h.general, h.alice)


async def test_a_message_deleted_while_its_turn_was_answered_is_not_captured(bot: Harness):
    """The delete arrives before the turn's capture: the capture leaves it out (and an
    edit that arrives first gives the capture the edited text)."""
    h = bot
    ctx = h.world.context(h.alice, h.general, "oops")
    edited = h.world.context(h.alice, h.general, "tpyo")
    assert ctx.message_id is not None and edited.message_id is not None
    await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, ctx.message_id))
    payload = update_payload(h, h.alice, h.general, edited.message_id, "typo")
    await h.world.offline.gateway("MESSAGE_UPDATE", payload)
    for turn_ctx, text in ((ctx, "oops"), (edited, "tpyo")):
        h.bot.dispatch("generation_finished", finished(turn_ctx, text, "fine", None))
        await h.world.offline.settle()
    shown = await held(h.memory, h.general, h.alice)
    assert "oops" not in shown and "tpyo" not in shown and "typo" in shown


async def test_notes_written_while_a_deleted_message_was_held_are_nudged(bot: Harness):
    """Notes of a conversation whose window held a deleted message are not cleared (see
    docs/data.md): the next turn there nudges the model to rewrite them."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "secret plan")
    result = await h.memory.run_tool(ctx, {"summary": "Alice has a plan"})
    assert result.success
    probe = h.world.context(h.alice, h.general, "next")
    assert (await h.memory.build_context(probe)).nudge is None
    assert ctx.message_id is not None
    await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, ctx.message_id))
    probe = h.world.context(h.alice, h.general, "next")
    assert (await h.memory.build_context(probe)).nudge is not None


async def test_an_upgrade_whose_prompt_showed_a_deleted_message_is_refused(bot: Harness):
    """The turn's prompt showed the message; it is deleted while the model answers: the
    upgrade written from it is refused, here and (the feed) for another process's turn."""
    h = bot
    first, _ = await said(h, h.alice, h.general, "my address is 5 Elm St")
    turn_ctx = h.world.context(h.bob, h.general, "what did alice say")
    await h.memory.build_context(turn_ctx)
    assert first.message_id is not None
    await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, first.message_id))
    result = await h.memory.run_tool(turn_ctx, {"summary": "Alice lives at 5 Elm St"})
    assert not result.success


async def test_a_deleted_channel_or_thread_is_cleared(bot: Harness, other: ShortTermMemory):
    """CHANNEL_DELETE and THREAD_DELETE clear the channel's memory as /refresh does, in
    every process; other channels keep theirs."""
    h = bot
    ctx, _ = await said(h, h.alice, h.general, "in general", also=other)
    await said(h, h.alice, h.games, "in games", also=other)
    assert (await h.memory.run_tool(ctx, {"summary": "general notes"})).success
    channel = {**h.general.payload, "guild_id": str(HARBOR)}
    await h.world.offline.gateway("CHANNEL_DELETE", channel)
    assert await h.memory.get_entry(server_key(HARBOR, h.general.id)) is None
    assert "in games" in await held(h.memory, h.games, h.alice)
    await h.memory.flush()
    await other.follower.catch_up()
    assert await other.get_entry(server_key(HARBOR, h.general.id)) is None
    thread = {"id": str(h.games.id), "guild_id": str(HARBOR), "parent_id": "1101", "type": 11}
    await h.world.offline.gateway("THREAD_DELETE", thread)
    assert await h.memory.get_entry(server_key(HARBOR, h.games.id)) is None
    assert h.memory.metrics.discord_events["channel_delete"] == 1
    assert h.memory.metrics.discord_events["thread_delete"] == 1


async def test_another_process_upgrade_whose_prompt_showed_the_channel_is_refused(
    bot: Harness, other: ShortTermMemory
):
    """The other process's turn showed the channel; a message there is deleted (the event
    reaches this bot) before that process read the feed: the store refuses its upgrade."""
    h = bot
    first, _ = await said(h, h.alice, h.general, "my address is 5 Elm St", also=other)
    turn_ctx = h.world.context(h.bob, h.general, "what did alice say")
    await other.build_context(turn_ctx)
    assert first.message_id is not None
    await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, first.message_id))
    await h.memory.flush()
    result = await other.run_tool(turn_ctx, {"summary": "Alice lives at 5 Elm St"})
    assert not result.success


async def test_a_server_that_removed_the_bot_is_cleared_at_once_when_no_grace(
    store_database: str, tmp_path: Path
):
    """GUILD_DELETE (the bot kicked) with a grace of 0: every channel's memory of the
    server and its settings go at once, in every process; the other server keeps its."""
    async with harness(tmp_path, database=store_database, server_removal_grace_minutes=0) as h:
        ctx, _ = await said(h, h.alice, h.general, "harbor talk")
        await said(h, h.alice, h.elsewhere, "lighthouse talk")
        assert (await h.memory.run_tool(ctx, {"summary": "harbor notes"})).success
        await h.memory.update_server_settings(HARBOR, refresh_cadence=9)
        await h.memory.flush()
        await h.world.offline.gateway("GUILD_DELETE", {"id": str(HARBOR)})
        assert await h.memory.get_entry(server_key(HARBOR, h.general.id)) is None
        assert await h.memory.get_entry(user_key(h.alice.id, h.general.id)) is None
        assert (await h.memory.get_server_settings(HARBOR)).refresh_cadence == 5
        assert await h.memory.get_entry(server_key(1200, h.elsewhere.id)) is not None
        await h.memory.flush()
        async with ShortTermMemory.open(STMConfig(database=store_database)) as later:
            assert await later.get_entry(server_key(HARBOR, h.general.id)) is None
            assert (await later.get_server_settings(HARBOR)).refresh_cadence == 5
            assert await later.departures() == {}
        events = h.memory.metrics.discord_events
        assert events["guild_remove"] == 1 and events["guild_cleared"] == 1


async def test_an_outage_clears_nothing(store_database: str, tmp_path: Path):
    """GUILD_DELETE with unavailable: true is an outage: nothing is recorded or cleared."""
    async with harness(tmp_path, database=store_database, server_removal_grace_minutes=0) as h:
        await said(h, h.alice, h.general, "harbor talk")
        await h.world.offline.gateway("GUILD_DELETE", {"id": str(HARBOR), "unavailable": True})
        assert "harbor talk" in await held(h.memory, h.general, h.alice)
        assert await h.memory.departures() == {}


async def test_a_reinvite_within_the_grace_period_keeps_everything(
    store_database: str, tmp_path: Path
):
    """Removed, then invited again before the grace period is over: nothing is cleared,
    even once it would have been over."""
    async with harness(tmp_path, database=store_database, server_removal_grace_minutes=60) as h:
        ctx, _ = await said(h, h.alice, h.general, "harbor talk")
        assert (await h.memory.run_tool(ctx, {"summary": "harbor notes"})).success
        guild = h.bot.get_guild(HARBOR)
        assert guild is not None
        await h.world.offline.gateway("GUILD_DELETE", {"id": str(HARBOR)})
        assert set(await h.memory.departures()) == {HARBOR}
        assert await h.cog.clear_departed_servers() == []  # still within the grace period
        channels = [{k: v for k, v in h.general.payload.items() if k != "guild_id"}]
        invited = guild_payload(HARBOR, "Harbor", channels)
        invited["members"] = [member_payload(h.world.offline.me.payload)]
        del invited["unavailable"]  # a server joining, as Discord sends it: GUILD_JOIN
        await h.world.offline.gateway("GUILD_CREATE", invited)  # invited again
        assert await h.memory.departures() == {}
        h.memory.config = h.memory.config.model_copy(update={"server_removal_grace_minutes": 0})
        assert await h.cog.clear_departed_servers() == []
        entry = await h.memory.get_entry(server_key(HARBOR, h.general.id))
        assert entry is not None and entry.summary == "harbor notes"
        assert h.memory.metrics.discord_events["guild_return"] == 1


async def test_a_removal_survives_a_restart(store_database: str):
    """The removal is recorded in the database: a process that opens it after the grace
    period clears the server, though the one that saw the removal is gone."""
    first = await ShortTermMemory.open(
        STMConfig(database=store_database, server_removal_grace_minutes=60)
    )
    ctx = TurnContext(user_id=5, channel_id=77, server_id=HARBOR, message_id=1)
    await first.capture(finished(ctx, "said before", "ok", 2))
    assert (await first.run_tool(ctx, {"summary": "notes before"})).success
    await first.server_removed(HARBOR)
    await first.close()
    clock = [time.time() + 3601]
    later = await ShortTermMemory.open(
        STMConfig(database=store_database, server_removal_grace_minutes=60),
        clock=lambda: clock[0],
    )
    try:
        assert await later.clear_departed_servers() == [HARBOR]
        assert await later.get_entry(server_key(HARBOR, 77)) is None
        assert await later.departures() == {}
    finally:
        await later.close()


@pytest.mark.parametrize("event", ["GUILD_MEMBER_REMOVE", "GUILD_BAN_ADD"])
async def test_a_member_who_leaves_is_purged_where_the_server_asks(bot: Harness, event: str):
    """Off by default: a member who leaves (or is banned) keeps their memory. Once an admin
    turns ``/memory-settings purge-leavers`` on, they are purged in that server as
    /purge-memory does, and kept in the other server."""
    h = bot
    await said(h, h.alice, h.general, "alice in harbor")
    await said(h, h.alice, h.elsewhere, "alice in lighthouse")
    await said(h, h.bob, h.general, "bob in harbor")
    gone = {"guild_id": str(HARBOR), "user": h.alice.payload}
    await h.world.offline.gateway(event, gone)
    assert "alice in harbor" in await held(h.memory, h.general, h.alice)
    from cogs.testing import option, subcommand

    (answer,) = await h.run(
        "memory-settings",
        subcommand("purge-leavers", option("purge", True, 5)),
        person=h.carol,
        place=h.general,
    )
    assert "erased" in answer.content
    await h.world.offline.gateway(event, gone)
    assert "alice in harbor" not in await held(h.memory, h.general, h.alice)
    assert "bob in harbor" in await held(h.memory, h.general, h.bob)
    lighthouse = await h.memory.get_entry(server_key(1200, h.elsewhere.id))
    assert "alice in lighthouse" in texts(lighthouse)
    kind = "member_remove" if event == "GUILD_MEMBER_REMOVE" else "member_ban"
    assert h.memory.metrics.discord_events[kind] == 1


async def test_each_event_is_logged_and_exposed_by_kind(
    bot: Harness, caplog: pytest.LogCaptureFixture
):
    """An event applied is a log line naming its kind, and a Prometheus sample by kind."""
    from stm.prometheus import exposition

    h = bot
    ctx, _ = await said(h, h.alice, h.general, "to be deleted")
    assert ctx.message_id is not None
    with caplog.at_level(logging.DEBUG, logger="discord_stm"):
        await h.world.offline.gateway("MESSAGE_DELETE", delete_payload(h.general, ctx.message_id))
        thread = {"id": str(h.games.id), "guild_id": str(HARBOR), "parent_id": "1101", "type": 11}
        await h.world.offline.gateway("THREAD_DELETE", thread)
    said_lines = [r.getMessage() for r in caplog.records if r.name == "discord_stm"]
    assert any("applied message_delete" in line for line in said_lines)
    assert any("applied thread_delete" in line for line in said_lines)
    text = exposition(h.memory)
    assert 'stm_discord_events_total{kind="message_delete"} 1.0' in text
    assert 'stm_discord_events_total{kind="thread_delete"} 1.0' in text
    assert "stm_messages_deleted_total 2.0" in text


async def test_a_server_that_removed_the_bot_while_it_was_offline_is_found_at_ready(
    store_database: str, tmp_path: Path
):
    """No GUILD_DELETE comes for a removal while the bot was offline: at READY, a server
    with settings that the bot is not in starts its grace period, and one it is in (even
    unavailable) does not; a process that does not see every shard judges nothing."""
    async with harness(tmp_path, database=store_database, server_removal_grace_minutes=60) as h:
        gone = 4242
        await h.memory.update_server_settings(gone, refresh_cadence=3)
        await h.memory.update_server_settings(HARBOR, refresh_cadence=4)
        await h.memory.flush()
        h.bot.shard_count = 4  # one shard of four in this process
        await h.cog.on_ready()
        assert await h.memory.departures() == {}
        h.bot.shard_count = None
        await h.cog.on_ready()
        assert set(await h.memory.departures()) == {gone}
        assert h.memory.metrics.discord_events["guild_remove"] == 1
