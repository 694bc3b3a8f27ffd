"""Provenance: a purge reaches every summary whose prompt showed the purged user's words.

An upgrade records everyone whose words the turn's prompt showed directly (its own
window's turn users and authors, its user, the turn users and authors of crude
messages rendered from other channels) and the notes it showed. Under ``direct``,
a purge clears the notes whose prompts showed the user's words directly and their
later versions; under ``complete``, also the notes written from prompts that showed
such notes.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from contextlib import AbstractContextManager

import pytest
from helpers import replayable
from hypothesis import example, given
from hypothesis import strategies as st
from shredding import KeyWitness, file_bytes, stored_text

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm.testing import ctx, turn

BOTH_STORES = True
SLOW_ON_POSTGRES = True
GENERAL, RANDOM = 10, 11
ALICE, BOB, CAROL = 1, 2, 3


async def row_text(database: str) -> str:
    """Every row's distilled text, decrypted."""
    return await stored_text(database)


async def everything_shown(memory: ShortTermMemory, users: tuple[int, ...]) -> str:
    """The cache, every key's get_entry and every user's prompt in every channel."""
    parts: list[str] = []
    for entry in list(memory.cache):
        parts.extend(m.content for m in entry.messages)
        parts.append(entry.summary or "")
        parts.extend(entry.categories.values())
        snap = await memory.get_entry(entry.key)
        if snap is not None:
            parts.extend(m.content for m in snap.messages)
            parts.append(snap.summary or "")
    for user in users:
        for channel in (GENERAL, RANDOM, 12):
            parts.append(str(await memory.build_context(ctx(user=user, channel=channel))))
    return "\n".join(parts)


async def test_words_recalled_from_another_channel_are_purged_from_its_summary(
    store_kind: str, store_database: str
) -> None:
    """Alice's words in #random are shown in Bob's prompt in #general; the model copies them
    into #general's summary; purging Alice drops that summary everywhere, and (on SQLite,
    whose files the test reads; PostgreSQL's pages are read in test_postgres_erasure) no
    key that encrypted it is left in the files."""
    db = store_database
    on_file = store_kind == "sqlite"
    witness = KeyWitness(db)
    async with ShortTermMemory.open(STMConfig(database=db)) as memory:
        await memory.capture(turn(ctx(user=ALICE, channel=RANDOM), "ALICE-SECRET-PLAN"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.capture(turn(ctx(user=BOB, channel=GENERAL), "hello"))
        prompt = str(await memory.build_context(bob))
        assert "ALICE-SECRET-PLAN" in prompt
        assert (await memory.run_tool(bob, {"summary": "Copied: ALICE-SECRET-PLAN"})).success
        await memory.flush()
        assert "ALICE-SECRET-PLAN" in await row_text(db)
        if on_file:
            witness.look()
            copied = witness.rows(f":{GENERAL}")
            assert copied and witness.left_in_files(copied) == len(copied)
        await memory.clear_short_term_memory_for_user(ALICE)
        assert "ALICE-SECRET-PLAN" not in await everything_shown(memory, (ALICE, BOB))
        await memory.flush()
        assert "ALICE-SECRET-PLAN" not in await row_text(db)
        if on_file:
            assert b"ALICE-SECRET-PLAN" not in file_bytes(db)
            assert witness.left_in_files(copied) == 0


@pytest.mark.parametrize("erasure", ["complete", "direct"])
async def test_distilled_memory_recalled_passes_its_contributors_on_under_complete(
    store_database: str, erasure: str
) -> None:
    """A summary shown from another channel carries its contributors into the summary made
    from it under ``complete`` (supersede mode: only the distilled memory of #random is
    rendered); under ``direct`` the copy stays, as documented, while #random's own notes
    go."""
    config = STMConfig(database=store_database, render_mode="supersede", erasure=erasure)
    async with ShortTermMemory.open(config) as memory:
        alice = ctx(user=ALICE, channel=RANDOM)
        await memory.capture(turn(alice, "alice talks"))
        assert (await memory.run_tool(alice, {"summary": "ALICE-NOTES"})).success
        # Carol's turn in #random makes the window hers; the summary still credits Alice.
        carol = ctx(user=CAROL, channel=RANDOM)
        await memory.capture(turn(carol, "carol talks"))
        bob = ctx(user=BOB, channel=GENERAL)
        prompt = str(await memory.build_context(bob))
        assert "ALICE-NOTES" in prompt and "alice talks" not in prompt
        assert (await memory.run_tool(bob, {"summary": "Copied: ALICE-NOTES"})).success
        await memory.clear_short_term_memory_for_user(ALICE)
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        if erasure == "complete":
            assert entry is None or entry.summary is None
        else:
            assert entry is not None and entry.summary == "Copied: ALICE-NOTES"
        source = await memory.get_entry(f"shortterm:server:100:{RANDOM}")
        assert source is None or source.summary is None


async def test_run_tool_without_build_context_credits_what_the_prompt_would_show(
    store_database: str,
) -> None:
    """A host that built the prompt through another context still gets the upgrade credited
    with the other channels' words a prompt of this turn would show."""
    async with ShortTermMemory.open(STMConfig(database=store_database)) as memory:
        await memory.capture(turn(ctx(user=ALICE, channel=RANDOM), "ALICE-WORDS"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(ctx(user=BOB, channel=GENERAL))  # another context object
        assert (await memory.run_tool(bob, {"summary": "Copied: ALICE-WORDS"})).success
        await memory.clear_short_term_memory_for_user(ALICE)
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is None or entry.summary is None


async def test_a_purge_of_someone_never_shown_keeps_the_summary(store_database: str) -> None:
    """Provenance is not a wipe: a user whose words no prompt of the turn showed (another
    server) is not credited."""
    async with ShortTermMemory.open(STMConfig(database=store_database)) as memory:
        await memory.capture(turn(ctx(user=ALICE, channel=20, server=200), "elsewhere"))
        bob = ctx(user=BOB, channel=GENERAL)
        await memory.build_context(bob)
        assert (await memory.run_tool(bob, {"summary": "BOB-KEEPS"})).success
        await memory.clear_short_term_memory_for_user(ALICE)
        entry = await memory.get_entry(f"shortterm:server:100:{GENERAL}")
        assert entry is not None and entry.summary == "BOB-KEEPS"


# -- the class: any authors, turns, channels and purge target -------------------------

TOKEN = re.compile(r"w(\d)t(\d)n(\d+)")
USERS = (ALICE, BOB, CAROL)
CHANNELS = (GENERAL, RANDOM, 12)

turns = st.lists(
    st.tuples(
        st.sampled_from(USERS),  # whose turn
        st.sampled_from(CHANNELS),
        st.lists(st.sampled_from(USERS), min_size=1, max_size=3),  # authors of its messages
        st.sampled_from(["none", "built", "blind"]),  # no upgrade, after build_context, without
    ),
    min_size=1,
    max_size=8,
)


# A recent message as a prompt renders it: the speaker, then its text in quotes.
CRUDE_LINE = re.compile(r'^> [^:\n]*: "([^"\n]*)"$', re.M)
# This channel's own notes, as the prompt frames them.
OWN_NOTES = re.compile(r"^\[Short-term memory of .*?^\[End of short-term memory\]$", re.M | re.S)


def copied_from(seen: str, erasure: str) -> str:
    """What the stand-in model copies from a prompt into notes: everything (``complete``
    must clear copies of anything), or under ``direct`` the recent messages it rendered
    and this channel's own notes (a copy of another channel's notes is what ``direct``
    keeps, see the test above)."""
    if erasure == "complete":
        return " ".join(m.group() for m in TOKEN.finditer(seen))
    parts = [m.group(1) for m in CRUDE_LINE.finditer(seen)]
    parts += [m.group() for m in OWN_NOTES.finditer(seen)]
    return " ".join(m.group() for m in TOKEN.finditer(" ".join(parts)))


# A recent message of someone other than the bot, as a prompt renders it.
PEOPLES_LINE = re.compile(r'^> (?!Assistant:)[^:\n]*: "([^"\n]*)"$', re.M)


def quoted_from(seen: str, erasure: str, pick: list[bool]) -> str:
    """What the stand-in model's reply quotes from its prompt: some of what it showed
    (``pick`` says which), anything under ``complete``, and under ``direct`` only the
    people's recent messages it rendered (a reply quoting notes, or another reply, is
    what ``direct`` keeps: tests/test_reply_provenance.py)."""
    if erasure == "complete":
        shown = [m.group() for m in TOKEN.finditer(seen)]
    else:
        lines = " ".join(m.group(1) for m in PEOPLES_LINE.finditer(seen))
        shown = [m.group() for m in TOKEN.finditer(lines)]
    return " ".join(token for i, token in enumerate(shown) if pick[i % len(pick)])


async def _play(
    db: str,
    plan: list[tuple[int, int, list[int], str]],
    target: int,
    server: int | None,
    mode: str,
    erasure: str = "complete",
    pick: tuple[bool, ...] = (True,),
) -> None:
    """Play ``plan``, each turn's reply quoting what its prompt showed (``quoted_from``) and
    each upgrade copying its prompt and window; purge ``target``; nothing of theirs may
    remain."""
    pick = list(pick) or [True]
    config = STMConfig(
        database=db,
        max_messages_per_channel=4,
        crude_message_count=2,
        render_mode=mode,
        erasure=erasure,
    )
    async with ShortTermMemory.open(config) as memory:
        n = 0
        for user, channel, authors, upgrade in plan:
            here = TurnContext(user_id=user, channel_id=channel, server_id=100)
            if upgrade == "built":
                seen = str(await memory.build_context(here))
            else:
                # The host built the prompt through another context object, or without
                # telling the memory ("none"): what the memory would have shown.
                twin = TurnContext(user_id=user, channel_id=channel, server_id=100)
                seen = str(await memory.build_context(twin))
            messages = []
            for author in authors:
                n += 1
                messages.append(
                    DialogueMessage(role="user", content=f"w{author}t{user}n{n}", author_id=author)
                )
            n += 1
            # The bot's reply: words of the turn's user (author unknown, as hosts send it),
            # quoting some of what its prompt showed.
            quote = quoted_from(seen, erasure, pick)
            messages.append(DialogueMessage(role="assistant", content=f"w0t{user}n{n} {quote}"))
            await memory.capture(GenerationFinished(context=here, messages=messages))
            if upgrade != "none":
                # The model copies what it saw: the prompt and the channel's history.
                window = await memory.get_entry(f"shortterm:server:100:{channel}")
                history = " ".join(m.content for m in window.messages) if window else ""
                copied = copied_from(seen, erasure)
                result = await memory.run_tool(here, {"summary": f"{copied} {history}"})
                assert result.success, result.message
        await memory.clear_short_term_memory_for_user(target, server)

        def leaked(text: str) -> list[str]:
            return [
                m.group()
                for m in TOKEN.finditer(text)
                if target in (int(m.group(1)), int(m.group(2)))
            ]

        assert not leaked(await everything_shown(memory, USERS))
        await memory.flush()
        assert not leaked(await row_text(db))


# Members of the class that a search may not reach in its budget, named outright: words
# recalled from another channel, with and without a prompt built; distilled memory recalled
# in supersede mode; another author's message inside someone else's turn.
NAMED = [
    ([(1, 11, [1], "none"), (2, 10, [2], "built")], 1, None, "crude_summary", "direct", (True,)),
    ([(1, 11, [1], "none"), (2, 10, [2], "blind")], 1, 100, "crude_summary", "direct", (True,)),
    (
        [(1, 11, [1], "built"), (2, 11, [2], "none"), (2, 10, [2], "built")],
        1,
        None,
        "supersede",
        "complete",
        (True,),
    ),
    ([(1, 10, [1, 3], "built")], 3, None, "crude_summary", "direct", (True,)),
    (
        [(1, 11, [2], "built"), (1, 10, [1], "built"), (2, 10, [1], "built")],
        2,
        None,
        "supersede",
        "complete",
        (True,),
    ),
    (
        [(1, 11, [1], "none"), (2, 10, [2], "none"), (3, 10, [3], "built")],
        1,
        100,
        "crude_summary",
        "direct",
        (True,),
    ),
    (
        [(1, 11, [1], "none"), (2, 10, [2], "none"), (3, 12, [3], "none")],
        1,
        None,
        "crude_summary",
        "complete",
        (True,),
    ),
    (
        [(1, 11, [1], "built"), (2, 10, [2], "none"), (3, 12, [3], "built")],
        1,
        None,
        "supersede",
        "complete",
        (True, False),
    ),
]


def test_nothing_of_a_purged_user_remains_whoever_wrote_where(
    store_kind: str, example_database: Callable[[], AbstractContextManager[str]]
) -> None:
    """Any assignment of authors to turns and channels, upgrades after a prompt built on
    their context or on another, any purge target (everywhere or in the server), either
    render mode, either erasure policy, replies quoting some of what their prompt showed,
    on each store: none of the purged user's words
    (their messages, the replies to their turns, summaries that copied either) remain in
    the cache, get_entry, any prompt or any row. (Fewer examples on PostgreSQL, where each
    needs a schema of its own.)"""

    @replayable(200 if store_kind == "sqlite" else 40)
    @given(
        plan=turns,
        target=st.sampled_from(USERS),
        server=st.sampled_from([None, 100]),
        mode=st.sampled_from(["crude_summary", "supersede"]),
        erasure=st.sampled_from(["complete", "direct"]),
        pick=st.lists(st.booleans(), min_size=1, max_size=5).map(tuple),
    )
    def purge_leaves_nothing(
        plan: list[tuple[int, int, list[int], str]],
        target: int,
        server: int | None,
        mode: str,
        erasure: str,
        pick: tuple[bool, ...],
    ) -> None:
        with example_database() as database:
            asyncio.run(_play(database, plan, target, server, mode, erasure, pick))

    for named in NAMED:
        purge_leaves_nothing = example(*named)(purge_leaves_nothing)
    purge_leaves_nothing()
