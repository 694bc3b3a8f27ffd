"""Replies carry their sources: a person's words quoted by the bot go with the person.

Every reply of the bot is captured with what its turn's prompt showed: the users whose
words it showed directly and the versions of notes it showed. A purge removes, from
every window, the replies whose prompt showed the person's words directly (under both
policies), and under ``complete`` also those whose prompt showed notes the purge clears.
Notes written from a window holding such a reply are treated as if their prompt had
shown the reply's sources.
"""

from __future__ import annotations

import pytest
from helpers import Opener, paused
from shredding import stored_text

from stm import DialogueMessage, GenerationFinished, ShortTermMemory
from stm._provenance import SOURCES_BOUND
from stm.testing import ctx, turn

BOTH_STORES = True
XAVIER, YUKI, ZOE = 1, 2, 3
A, B, C = 10, 11, 12
CODE = "LOCKER-4711"
B_KEY = f"shortterm:server:100:{B}"
A_KEY = f"shortterm:server:100:{A}"
USERS = (XAVIER, YUKI, ZOE)


async def quoted_from_recent_messages(memory: ShortTermMemory) -> None:
    """Steps 1 to 4: Xavier's code in #a; Yuki's turn in #b recalls #a's recent messages and
    the reply quotes it; #a is refreshed; Zoe's turn in #b copies the reply into notes."""
    await memory.capture(turn(ctx(user=XAVIER, channel=A), f"my locker code is {CODE}"))
    yuki = ctx(user=YUKI, channel=B)
    assert CODE in str(await memory.build_context(yuki))
    await memory.capture(turn(yuki, "what did Xavier say?", f"Xavier said: {CODE}"))
    await memory.clear_short_term_memory_for_channel(A)
    zoe = ctx(user=ZOE, channel=B)
    assert CODE not in str(await memory.build_context(zoe))  # #a is gone
    assert (await memory.run_tool(zoe, {"summary": f"Yuki learnt {CODE}"})).success
    await memory.capture(turn(zoe, "thanks"))


async def quoted_from_notes(memory: ShortTermMemory) -> None:
    """Xavier's code in #a's notes; Yuki's prompt in #b shows them (supersede: no crude
    messages of #a) and the reply quotes them; #a turns private, so Zoe's prompt in #b no
    longer shows its notes, and Zoe's notes copy the quote from #b's window alone."""
    xavier = ctx(user=XAVIER, channel=A)
    await memory.capture(turn(xavier, f"my locker code is {CODE}"))
    assert (await memory.run_tool(xavier, {"summary": f"Xavier's code is {CODE}"})).success
    yuki = ctx(user=YUKI, channel=B)
    prompt = str(await memory.build_context(yuki))
    assert f"Xavier's code is {CODE}" in prompt and "my locker code" not in prompt
    await memory.capture(turn(yuki, "what is Xavier's code?", f"It is {CODE}"))
    await memory.capture(turn(ctx(user=XAVIER, channel=A, channel_is_private=True), "bye"))
    zoe = ctx(user=ZOE, channel=B)
    assert CODE not in str(await memory.build_context(zoe))
    assert (await memory.run_tool(zoe, {"summary": f"Yuki learnt {CODE}"})).success
    await memory.capture(turn(zoe, "thanks"))


async def where(memory: ShortTermMemory, text: str) -> list[str]:
    """Every place this memory still holds ``text``: windows, notes, snapshots, prompts."""
    found: list[str] = []
    for entry in list(memory.cache):
        if any(text in m.content for m in entry.messages):
            found.append(f"window of {entry.key}")
        if text in (entry.summary or "") or any(text in v for v in entry.categories.values()):
            found.append(f"notes of {entry.key}")
    for key in (A_KEY, B_KEY):
        snap = await memory.get_entry(key)
        if snap is not None:
            if any(text in m.content for m in snap.messages):
                found.append(f"get_entry window of {key}")
            if text in (snap.summary or ""):
                found.append(f"get_entry notes of {key}")
    for user in USERS:
        for channel in (A, B, C):
            if text in str(await memory.build_context(ctx(user=user, channel=channel))):
                found.append(f"prompt of {user} in {channel}")
    return found


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_reply_quoting_recalled_messages_goes_with_their_author(
    open_memory: Opener, store_database: str, erasure: str
) -> None:
    """The five steps: after Xavier's purge his code is in no window, no notes, no prompt
    and no row, under both policies (the reply's prompt showed his words directly)."""
    memory = await open_memory(erasure=erasure)
    await quoted_from_recent_messages(memory)
    assert "notes of " + B_KEY in await where(memory, CODE)
    await memory.purge(XAVIER)
    assert await where(memory, CODE) == []
    entry = await memory.get_entry(B_KEY)
    assert entry is not None and [m.content for m in entry.messages] == [
        "what did Xavier say?",
        "thanks",
        "ok",
    ]
    await memory.flush()
    assert CODE not in await stored_text(store_database)


async def test_a_packed_window_keeps_the_replies_sources(open_memory: Opener) -> None:
    """The same with every window but the newest packed: the reply's sources survive packing,
    and the purge finds and removes it from the packed window."""
    memory = await open_memory()
    memory.cache.open_windows = 1
    await quoted_from_recent_messages(memory)
    await memory.capture(turn(ctx(user=ZOE, channel=C), "elsewhere"))
    held = memory.cache.peek(B_KEY)
    assert held is not None and held.messages.packed_form
    assert any(CODE in m.content for m in held.messages)
    await memory.purge(XAVIER)
    held = memory.cache.peek(B_KEY)
    assert held is not None and held.messages.packed_form
    assert await where(memory, CODE) == []


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_another_process_purge_removes_the_reply_here(
    open_memory: Opener, erasure: str
) -> None:
    """The five steps in one process, the purge in another on the same database: the first
    applies it from the feed with the same ``purge_user`` and keeps nothing of the code."""
    here = await paused(await open_memory(erasure=erasure))
    elsewhere = await open_memory(erasure=erasure)
    await quoted_from_recent_messages(here)
    await here.flush()
    await elsewhere.purge(XAVIER)
    await here.follower.catch_up()
    assert await where(here, CODE) == []
    assert await where(elsewhere, CODE) == []


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_reply_quoting_notes_goes_under_complete_and_stays_under_direct(
    open_memory: Opener, store_database: str, erasure: str
) -> None:
    """Yuki's prompt in #b shows #a's notes (supersede: no crude messages of #a), which hold
    Xavier's code, and the reply quotes them; #a then turns private, and Zoe's turn, whose
    prompt does not show #a, copies the reply from #b's window into #b's notes.
    Under ``complete`` the purge removes the reply and its copies everywhere. Under
    ``direct`` it clears #a's notes (their prompt showed Xavier's words directly) and
    leaves exactly the quote and its copy in #b: the reply in #b's window, #b's notes, and
    the prompts that show them (in #b, and #b's in the other channels)."""
    memory = await open_memory(erasure=erasure, render_mode="supersede")
    await quoted_from_notes(memory)
    await memory.purge(XAVIER)
    left = await where(memory, CODE)
    if erasure == "complete":
        assert left == []
        await memory.flush()
        assert CODE not in await stored_text(store_database)
        return
    assert set(left) == {
        f"window of {B_KEY}",
        f"window of shortterm:user:{YUKI}:{B}",
        f"notes of {B_KEY}",
        f"notes of shortterm:user:{ZOE}:{B}",
        f"get_entry window of {B_KEY}",
        f"get_entry notes of {B_KEY}",
        *(f"prompt of {user} in {channel}" for user in USERS for channel in (A, B, C)),
    }
    source = await memory.get_entry(A_KEY)
    assert source is None or source.summary is None


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_another_process_purge_treats_a_quote_of_notes_by_the_policy(
    open_memory: Opener, erasure: str
) -> None:
    """The quote of #a's notes, the purge made in another process: the follower here
    removes the reply under ``complete`` and leaves it, with Zoe's copy, under ``direct``."""
    here = await paused(await open_memory(erasure=erasure, render_mode="supersede"))
    elsewhere = await open_memory(erasure=erasure, render_mode="supersede")
    await quoted_from_notes(here)
    await here.flush()
    await elsewhere.purge(XAVIER)
    await here.follower.catch_up()
    left = await where(here, CODE)
    if erasure == "complete":
        assert left == []
    else:
        assert f"window of {B_KEY}" in left and f"notes of {B_KEY}" in left
        assert f"notes of {A_KEY}" not in left


async def test_a_turn_without_build_context_carries_what_its_prompt_would_show(
    open_memory: Opener,
) -> None:
    """A host that built Yuki's prompt without ``build_context``: the reply carries what that
    prompt would have shown from the cache (the rule upgrades use), one record shared by
    the turn's copies in the user's and the server's windows; Yuki's own message none."""
    memory = await open_memory()
    await memory.capture(turn(ctx(user=XAVIER, channel=A), f"my locker code is {CODE}"))
    await memory.capture(turn(ctx(user=YUKI, channel=B), "what did he say?", f"He: {CODE}"))
    server, own = memory.cache.peek(B_KEY), memory.cache.peek(f"shortterm:user:{YUKI}:{B}")
    assert server is not None and own is not None
    asked, reply = server.messages
    assert asked.sources is None
    assert reply.sources is not None and reply.sources.users == (XAVIER,)
    assert own.messages[-1].sources is reply.sources
    await memory.purge(XAVIER)
    assert await where(memory, CODE) == []


async def test_a_reply_whose_prompt_showed_only_its_own_turn_carries_nothing(
    open_memory: Opener,
) -> None:
    """Most replies (a DM's, a channel's that recalled nothing) carry no record: the bot's own
    author id is not a source, and the turn's user is the reply's provenance already."""
    memory = await open_memory()
    dm = ctx(user=YUKI, channel=C, server=None)
    said = DialogueMessage(role="user", content="hello", author_id=YUKI)
    answer = DialogueMessage(role="assistant", content="hi", author_id=999)  # the bot's id
    await memory.capture(GenerationFinished(context=dm, messages=[said, answer]))
    await memory.capture(turn(ctx(user=YUKI, channel=A), "alone here", "hi"))
    assert [m.sources for entry in memory.cache for m in entry.messages] == [None] * 6


async def test_replies_whose_prompts_showed_the_same_share_one_record(
    open_memory: Opener,
) -> None:
    """Two turns in #b whose prompts showed the same (#a's recent messages): the window holds
    one record for both replies, not one a turn."""
    memory = await open_memory()
    await memory.capture(turn(ctx(user=XAVIER, channel=A), f"my locker code is {CODE}"))
    for said in ("first", "second"):
        yuki = ctx(user=YUKI, channel=B)
        await memory.build_context(yuki)
        await memory.capture(turn(yuki, said, f"{said}: {CODE}"))
    held = memory.cache.peek(B_KEY)
    assert held is not None
    replies = [m.sources for m in held.messages if m.role == "assistant"]
    assert len(replies) == 2 and replies[0] is not None and replies[0] is replies[1]


async def said_with_id(memory: ShortTermMemory, message_id: int) -> None:
    """Xavier's code in #a, carrying its Discord message id; Yuki's turn in #b recalls it and
    the reply quotes it."""
    xavier = ctx(user=XAVIER, channel=A)
    said = DialogueMessage(
        role="user", content=f"my locker code is {CODE}", author_id=XAVIER, message_id=message_id
    )
    await memory.capture(GenerationFinished(context=xavier, messages=[said]))
    yuki = ctx(user=YUKI, channel=B)
    assert CODE in str(await memory.build_context(yuki))
    await memory.capture(turn(yuki, "what did Xavier say?", f"Xavier said: {CODE}"))


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_message_deleted_on_discord_takes_the_reply_that_quoted_it(
    open_memory: Opener, erasure: str
) -> None:
    """The message is deleted on Discord: it leaves #a, and the reply in #b whose prompt
    showed it leaves #b's windows (both keys), in this process and in another one."""
    here = await paused(await open_memory(erasure=erasure))
    elsewhere = await open_memory(erasure=erasure)
    await said_with_id(here, 4711)
    await said_with_id(elsewhere, 4711)
    await here.flush()
    assert await here.forget_messages(A, [4711]) >= 1
    assert await where(here, CODE) == []
    entry = await here.get_entry(B_KEY)
    assert entry is not None and [m.content for m in entry.messages] == ["what did Xavier say?"]
    await here.flush()
    await elsewhere.follower.catch_up()
    assert await where(elsewhere, CODE) == []


async def test_an_edit_on_discord_takes_the_reply_that_quoted_the_old_text(
    open_memory: Opener,
) -> None:
    """The message is edited on Discord: #a holds the new text, and the reply in #b that
    quoted the old one leaves every window."""
    memory = await open_memory()
    await said_with_id(memory, 4712)
    await memory.edit_message(A, 4712, "my locker code is secret now")
    assert await where(memory, CODE) == []
    entry = await memory.get_entry(A_KEY)
    assert entry is not None and [m.content for m in entry.messages] == [
        "my locker code is secret now"
    ]


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_reply_quoting_a_reply_goes_under_complete_and_stays_under_direct(
    open_memory: Opener, erasure: str
) -> None:
    """What ``direct`` leaves, stated in docs/data.md: Yuki's reply in #b quotes Xavier's
    words recalled from #a; #a is refreshed; Zoe's turn in #c recalls #b and its reply
    quotes Yuki's reply.
    Purging Xavier removes Yuki's reply under both policies, and Zoe's only under
    ``complete`` (its prompt showed Xavier's words through the bot's reply, not directly)."""
    memory = await open_memory(erasure=erasure)
    await memory.capture(turn(ctx(user=XAVIER, channel=A), f"my locker code is {CODE}"))
    yuki = ctx(user=YUKI, channel=B)
    assert CODE in str(await memory.build_context(yuki))
    await memory.capture(turn(yuki, "what did Xavier say?", f"Xavier said: {CODE}"))
    await memory.clear_short_term_memory_for_channel(A)  # Zoe's prompt shows #b alone
    zoe = ctx(user=ZOE, channel=C)
    assert f"Xavier said: {CODE}" in str(await memory.build_context(zoe))
    await memory.capture(turn(zoe, "what did the bot say?", f"It said {CODE}"))
    await memory.purge(XAVIER)
    left = [m.content for entry in memory.cache for m in entry.messages if CODE in m.content]
    assert left == ([] if erasure == "complete" else [f"It said {CODE}"] * 2)


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_a_reply_whose_sources_would_pass_the_bound_is_not_remembered(
    open_memory: Opener, erasure: str
) -> None:
    """Under ``complete`` a reply carries what the replies its prompt showed carried: one that
    would name more than ``SOURCES_BOUND`` users is left out of memory (counted), and the
    turn's own message is kept. Under ``direct`` a reply names only what its prompt showed,
    which the settings bound: it is kept."""
    wide = SOURCES_BOUND + 1
    memory = await open_memory(
        erasure=erasure, crude_message_count=2 * wide, max_messages_per_channel=2 * wide
    )
    for user in range(100, 100 + wide):  # #a holds the words of wide people
        await memory.capture(turn(ctx(user=user, channel=A), f"hello from {user}", "hi"))
    yuki = ctx(user=YUKI, channel=B)
    assert "hello from 100" in str(await memory.build_context(yuki))
    await memory.capture(turn(yuki, "who is here?", "everyone"))
    entry = await memory.get_entry(B_KEY)
    assert entry is not None
    if erasure == "complete":
        assert [m.content for m in entry.messages] == ["who is here?"]
        assert memory.metrics.replies_too_wide == 1
    else:
        assert [m.content for m in entry.messages] == ["who is here?", "everyone"]
        reply = entry.messages[-1]
        assert memory.metrics.replies_too_wide == 0
        await memory.purge(150)
        assert [m.content for m in (await memory.get_entry(B_KEY)).messages] == ["who is here?"]
        assert reply.content == "everyone"
