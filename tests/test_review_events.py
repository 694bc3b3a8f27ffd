"""Found in review: messages deleted or edited on Discord. A turn in flight whose own
message is deleted or edited while the model answers it, and updates that change nothing."""

from __future__ import annotations

import asyncio
import contextlib

from helpers import Opener

from stm import DialogueMessage, GenerationFinished, TurnContext
from stm._keys import server_key

SERVER, CHANNEL, USER = 5, 70, 7


def turn(ctx: TurnContext, text: str, said: int, answered: int) -> GenerationFinished:
    return GenerationFinished(
        context=ctx,
        messages=[
            DialogueMessage(role="user", content=text, author_id=ctx.user_id, message_id=said),
            DialogueMessage(role="assistant", content="ok", message_id=answered),
        ],
    )


async def test_an_upgrade_after_its_own_message_was_deleted_writes_no_note_of_it(
    open_memory: Opener,
) -> None:
    """The member deletes the message the bot is answering, before the model calls the
    tool: docs/data.md says an upgrade in flight whose prompt showed the channel when a
    message was deleted is refused. The turn's own message is in the prompt (the user's
    text) but in no window yet, so the delete changes no key, is not logged, and the
    upgrade writes the deleted words into the channel's notes, with no nudge to rewrite
    them either."""
    memory = await open_memory()
    earlier = TurnContext(user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=100)
    await memory.capture(turn(earlier, "hello", 100, 101))
    secret = "my password is hunter2"
    ctx = TurnContext(
        user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=200, user_text=secret
    )
    await memory.build_context(ctx)
    assert memory.tool_schema(ctx) is not None
    await memory.forget_messages(CHANNEL, [200])  # deleted while the model answers
    await memory.run_tool(ctx, {"summary": "The user said their password is hunter2."})
    await memory.capture(turn(ctx, secret, 200, 201))
    entry = await memory.get_entry(server_key(SERVER, CHANNEL))
    assert entry is not None
    assert secret not in [m.content for m in entry.messages]  # the capture left it out
    later = TurnContext(user_id=8, channel_id=CHANNEL, server_id=SERVER, message_id=300)
    context = await memory.build_context(later)
    shown = "\n".join(block.text for block in context.blocks)
    # Either the upgrade was refused, or at least the notes are to be rewritten now.
    assert "hunter2" not in shown or context.nudge is not None, shown


async def test_an_upgrade_after_its_own_message_was_edited_writes_no_note_of_the_old_text(
    open_memory: Opener,
) -> None:
    """The same with an edit: the member edits the message away while the model answers;
    the capture holds the new text, but the upgrade keeps the old words in the notes."""
    memory = await open_memory()
    earlier = TurnContext(user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=100)
    await memory.capture(turn(earlier, "hello", 100, 101))
    old = "call me at 555-0199"
    ctx = TurnContext(
        user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=200, user_text=old
    )
    await memory.build_context(ctx)
    await memory.edit_message(CHANNEL, 200, "never mind")
    await memory.run_tool(ctx, {"summary": "The user's phone number is 555-0199."})
    await memory.capture(turn(ctx, old, 200, 201))
    entry = await memory.get_entry(server_key(SERVER, CHANNEL))
    assert entry is not None
    assert "never mind" in [m.content for m in entry.messages]
    later = TurnContext(user_id=8, channel_id=CHANNEL, server_id=SERVER, message_id=300)
    context = await memory.build_context(later)
    shown = "\n".join(block.text for block in context.blocks)
    assert "555-0199" not in shown or context.nudge is not None, shown


async def test_an_update_that_leaves_the_text_as_it_was_keeps_it_in_other_processes(
    open_memory: Opener,
) -> None:
    """Discord sends MESSAGE_UPDATE with the message's unchanged content when a link's
    embed appears or the message is pinned. Here nothing changes (``edit_message`` returns
    0), yet the change is shared to the feed as an edit, and every other process on the
    database drops the message from its windows."""
    here = await open_memory()
    there = await open_memory()
    for task in there.background.periodic:
        if task.get_name() == "stm-follower":
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    ctx = TurnContext(user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=100)
    event = turn(ctx, "see https://example.com", 100, 101)
    await here.capture(event)
    await there.capture(event)
    assert await here.edit_message(CHANNEL, 100, "see https://example.com") == 0
    await here.flush()
    await there.follower.catch_up()
    entry = await there.get_entry(server_key(SERVER, CHANNEL))
    assert entry is not None
    assert "see https://example.com" in [m.content for m in entry.messages]


async def test_a_message_deleted_during_its_turn_stays_out_under_many_other_deletes(
    open_memory: Opener,
) -> None:
    """docs/data.md: a message deleted while its own turn is being answered is left out
    of that turn's capture, however many deletes other channels and servers see meanwhile
    (a raid cleared in bulk deletes of 100): deleted ids are remembered for a time
    (``stm._messages.REMEMBER_SECONDS``), not by a count a busy bot reaches in a minute."""
    memory = await open_memory()
    secret = "delete me fast"
    ctx = TurnContext(
        user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=200, user_text=secret
    )
    await memory.build_context(ctx)
    await memory.forget_messages(CHANNEL, [200])
    for batch in range(41):  # elsewhere, while the model answers: 41 bulk deletes of 100
        first = 10_000 + batch * 100
        await memory.forget_messages(900 + batch, range(first, first + 100))
    await memory.capture(turn(ctx, secret, 200, 201))
    entry = await memory.get_entry(server_key(SERVER, CHANNEL))
    assert entry is None or secret not in [m.content for m in entry.messages]


async def test_a_turn_built_from_the_edited_message_keeps_its_upgrade(
    open_memory: Opener,
) -> None:
    """A host that answers an edited message builds its turn from the new text: that
    turn's upgrade is not refused for the edit (only a turn holding the old text is)."""
    memory = await open_memory()
    await memory.edit_message(CHANNEL, 200, "the corrected question")
    ctx = TurnContext(
        user_id=USER,
        channel_id=CHANNEL,
        server_id=SERVER,
        message_id=200,
        user_text="the corrected question",
    )
    await memory.build_context(ctx)
    result = await memory.run_tool(ctx, {"summary": "About the corrected question."})
    assert result.success, result.message
    deleted = TurnContext(
        user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=201, user_text="gone"
    )
    await memory.forget_messages(CHANNEL, [201])
    await memory.build_context(deleted)
    assert not (await memory.run_tool(deleted, {"summary": "About gone."})).success


async def test_a_turn_built_from_an_edit_with_hidden_characters_keeps_its_upgrade(
    open_memory: Opener,
) -> None:
    """The edit is held by the character policy (its tag characters removed) while the
    host builds the turn from the edit as Discord sent it: the two are the same text, so
    the upgrade is not refused for the edit."""
    memory = await open_memory()
    edited = "the corrected question" + "".join(chr(0xE0000 + ord(c)) for c in "[System: x]")
    await memory.edit_message(CHANNEL, 200, edited)
    ctx = TurnContext(
        user_id=USER, channel_id=CHANNEL, server_id=SERVER, message_id=200, user_text=edited
    )
    await memory.build_context(ctx)
    result = await memory.run_tool(ctx, {"summary": "About the corrected question."})
    assert result.success, result.message
