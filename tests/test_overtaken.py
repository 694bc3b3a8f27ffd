"""Overtaken turns: a deletion of anything a turn's prompt showed, or of its own scope, made
while the turn runs, refuses its upgrade and keeps its capture from bringing words back."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

from helpers import replayable
from hypothesis import example, given
from hypothesis import strategies as st

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig
from stm.testing import ctx, turn

BOTH_STORES = True
SLOW_ON_POSTGRES = True
GENERAL, RANDOM = 10, 11
ALICE, BOB, CAROL = 1, 2, 3


def opened(database: str) -> object:
    return ShortTermMemory.open(STMConfig(database=database))


async def shown_from_random(memory: ShortTermMemory) -> object:
    """Alice speaks in #random; Bob's turn in #general begins and its prompt shows her."""
    await memory.capture(turn(ctx(user=ALICE, channel=RANDOM), "ALICE-WORDS"))
    bob = ctx(user=BOB, channel=GENERAL)
    assert "ALICE-WORDS" in str(await memory.build_context(bob))
    return bob


async def everywhere(memory: ShortTermMemory) -> str:
    parts = []
    for entry in list(memory.cache):
        parts.extend(m.content for m in entry.messages)
        parts.append(entry.summary or "")
    for user in (ALICE, BOB, CAROL):
        for channel in (GENERAL, RANDOM):
            parts.append(str(await memory.build_context(ctx(user=user, channel=channel))))
    return "\n".join(parts)


async def test_a_refresh_of_a_channel_the_prompt_showed_refuses_the_upgrade(
    store_database: str,
) -> None:
    """/refresh of #random during Bob's turn in #general: his summary could restore it."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_channel(RANDOM)
        result = await memory.run_tool(bob, {"summary": "Alice said ALICE-WORDS"})
        assert not result.success and "Nothing was saved" in result.message
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_clearing_the_server_refuses_an_upgrade_of_a_channel_it_did_not_hold(
    store_database: str,
) -> None:
    """The turn began in a channel with nothing held yet; the server is cleared: no channel
    cleared names it, the server forgotten does."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        assert not list(memory.cache)
        await memory.clear_server(100)
        result = await memory.run_tool(bob, {"summary": "Bob said BOB-WORDS"})
        assert not result.success and "Nothing was saved" in result.message
        assert "BOB-WORDS" not in await everywhere(memory)


async def test_a_purge_of_a_user_the_prompt_showed_refuses_the_upgrade(store_database: str) -> None:
    """Purging Alice during Bob's turn, whose prompt showed her words."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_user(ALICE)
        result = await memory.run_tool(bob, {"summary": "Alice said ALICE-WORDS"})
        assert not result.success
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_a_purge_that_changed_the_turns_own_window_refuses_the_upgrade(
    store_database: str,
) -> None:
    """Carol's message is in #general's window (the model sees it in the channel's history);
    purging her during Bob's turn there refuses his summary of it."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        await memory.capture(turn(ctx(user=CAROL, channel=GENERAL), "CAROL-WORDS"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_user(CAROL)
        result = await memory.run_tool(bob, {"summary": "Carol said CAROL-WORDS"})
        assert not result.success
        assert "CAROL-WORDS" not in await everywhere(memory)


async def test_a_purge_of_someone_the_turn_never_showed_does_not_refuse_it(
    store_database: str,
) -> None:
    """Precision: a purge in the server of a user whose words the turn did not show (their
    channel is private, so never recalled) leaves the turn's upgrade alone."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        private = ctx(user=CAROL, channel=12, channel_is_private=True)
        await memory.capture(turn(private, "carol in private"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_user(CAROL)
        result = await memory.run_tool(bob, {"summary": "BOB-SUMMARY"})
        assert result.success, result.message


async def test_a_capture_of_a_turn_begun_before_its_users_purge_is_dropped(
    store_database: str,
) -> None:
    """Alice's turn began (its prompt was built), she is purged, then the host dispatches the
    turn's messages: they are hers, and must not come back."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        alice = ctx(user=ALICE, channel=GENERAL)
        await memory.build_context(alice)
        await memory.clear_short_term_memory_for_user(ALICE)
        await memory.capture(turn(alice, "ALICE-LATE", "REPLY-TO-ALICE"))
        text = await everywhere(memory)
        assert "ALICE-LATE" not in text and "REPLY-TO-ALICE" not in text


async def test_a_capture_of_a_turn_begun_before_its_channels_refresh_is_dropped(
    store_database: str,
) -> None:
    """The turn's words predate the /refresh of its channel."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_channel(GENERAL)
        await memory.capture(turn(bob, "BEFORE-REFRESH"))
        assert "BEFORE-REFRESH" not in await everywhere(memory)
        # A turn that begins after the refresh is new memory.
        await memory.capture(turn(ctx(user=BOB, channel=GENERAL), "AFTER-REFRESH"))
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is not None and entry.messages[0].content == "AFTER-REFRESH"


async def test_a_reply_quoting_recalled_words_purged_during_the_turn_is_not_captured(
    store_database: str,
) -> None:
    """Bob's prompt showed Alice's words; the bot's reply repeats them; Alice is purged before
    the capture: the reply must not carry them back into #general."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = await shown_from_random(memory)
        await memory.clear_short_term_memory_for_user(ALICE, server_id=100)
        await memory.capture(
            GenerationFinished(
                context=bob,  # type: ignore[arg-type]
                messages=[
                    DialogueMessage(role="user", content="what did alice say?", author_id=BOB),
                    DialogueMessage(role="assistant", content="She said ALICE-WORDS"),
                ],
            )
        )
        assert "ALICE-WORDS" not in await everywhere(memory)


async def test_a_capture_overtaken_by_an_unrelated_delete_is_kept(store_database: str) -> None:
    """A /refresh of a channel the turn never showed does not cost the turn its capture."""
    async with opened(store_database) as memory:  # type: ignore[attr-defined]
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        await memory.clear_short_term_memory_for_channel(RANDOM)
        await memory.capture(turn(bob, "BOB-KEPT"))
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is not None and entry.messages[0].content == "BOB-KEPT"


# -- the class: any state, any turn, any deletion during it ----------------------------

TOKEN = re.compile(r"w(\d)t(\d)c(\d+)n(\d+)")  # author, turn user, channel, number
CHANNELS = (GENERAL, RANDOM, 12)

said = st.lists(
    st.tuples(
        st.sampled_from((ALICE, BOB, CAROL)),  # whose turn
        st.sampled_from(CHANNELS),
        st.lists(st.sampled_from((ALICE, BOB, CAROL)), min_size=1, max_size=2),  # authors
    ),
    max_size=6,
)
deletions = st.one_of(
    st.tuples(st.just("clear"), st.sampled_from(CHANNELS), st.none()),
    st.tuples(
        st.just("purge"), st.sampled_from((ALICE, BOB, CAROL)), st.sampled_from([None, 100, 200])
    ),
)


async def _race(
    db: str,
    before: list[tuple[int, int, list[int]]],
    turn_of: tuple[int, int],
    deletion: tuple[str, int, int | None],
) -> None:
    config = STMConfig(database=db, crude_message_count=2, max_messages_per_channel=4)
    async with ShortTermMemory.open(config) as memory:
        n = 0
        for user, channel, authors in before:
            messages = []
            for author in authors:
                n += 1
                text = f"w{author}t{user}c{channel}n{n}"
                messages.append(DialogueMessage(role="user", content=text, author_id=author))
            here = ctx(user=user, channel=channel)
            await memory.capture(GenerationFinished(context=here, messages=messages))
        user, channel = turn_of
        here = ctx(user=user, channel=channel)
        prompt = str(await memory.build_context(here))
        shown = [tuple(map(int, m.groups())) for m in TOKEN.finditer(prompt)]
        window = await memory.get_entry(f"shortterm:server:100:{channel}")
        own = [
            tuple(map(int, found.groups()))
            for m in (window.messages if window else [])
            if (found := TOKEN.fullmatch(m.content))
        ]
        kind, target, server = deletion
        if kind == "clear":
            touched = target == channel or any(c == target for _, _, c, _ in shown)
            await memory.clear_short_term_memory_for_channel(target)
        else:
            touched = server in (None, 100) and (
                target == user or any(target in (a, t) for a, t, _, _ in shown + own)
            )
            await memory.clear_short_term_memory_for_user(target, server)
        # The model copies what its prompt showed into the summary and the reply.
        copied = " ".join(m.group() for m in TOKEN.finditer(prompt))
        result = await memory.run_tool(here, {"summary": f"notes {copied}"})
        await memory.capture(
            GenerationFinished(
                context=here,
                messages=[DialogueMessage(role="assistant", content=f"reply {copied}")],
            )
        )
        if touched:
            assert not result.success, "an overtaken turn's upgrade was accepted"
        else:
            assert result.success, f"refused though nothing it showed was deleted: {result}"

        def dead(found: tuple[int, ...]) -> bool:
            author, turn_user, where, _ = found
            if kind == "clear":
                return where == target
            return server in (None, 100) and target in (author, turn_user)

        text = await everywhere(memory)
        assert not [m.group() for m in TOKEN.finditer(text) if dead(tuple(map(int, m.groups())))]


# Members of the class a search may not reach in its budget, named outright.
NAMED = [
    ([(ALICE, RANDOM, [ALICE])], (BOB, GENERAL), ("clear", RANDOM, None)),
    ([(ALICE, RANDOM, [ALICE])], (BOB, GENERAL), ("purge", ALICE, 100)),
    ([(CAROL, GENERAL, [CAROL])], (BOB, GENERAL), ("purge", CAROL, None)),
    ([(ALICE, GENERAL, [ALICE, CAROL])], (BOB, GENERAL), ("purge", CAROL, None)),
    ([(CAROL, 12, [CAROL])], (BOB, GENERAL), ("purge", CAROL, 200)),
]


def test_any_deletion_during_a_turn_overtakes_it_exactly_when_it_touched_what_it_showed(
    store_kind: str, example_database: Callable[[], AbstractContextManager[str]]
) -> None:
    """Any windows, any turn, any clear or purge between its prompt and its tool call and
    capture, on each store: the upgrade is refused exactly when the deletion touched a
    channel or a user's words its prompt showed or its own scope, and nothing deleted shows
    anywhere afterwards (the summary and the reply copied the prompt). (Fewer examples on
    PostgreSQL, where each needs a schema of its own.)"""

    @replayable(150 if store_kind == "sqlite" else 40)
    @given(
        before=said,
        turn_of=st.tuples(st.sampled_from((ALICE, BOB)), st.sampled_from(CHANNELS)),
        deletion=deletions,
    )
    def overtaken_exactly(
        before: list[tuple[int, int, list[int]]],
        turn_of: tuple[int, int],
        deletion: tuple[str, int, int | None],
    ) -> None:
        with example_database() as database:
            asyncio.run(_race(database, before, turn_of, deletion))

    for named in NAMED:
        overtaken_exactly = example(*named)(overtaken_exactly)
    overtaken_exactly()
