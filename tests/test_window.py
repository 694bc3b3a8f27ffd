"""Window: the packed form holds exactly what the open form holds, and positions never lie."""

from __future__ import annotations

import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from stm._cache import Entry, MemoryCache
from stm._lineage import Pin
from stm._window import EMPTY, Sources, StoredMessage, Window

ids = st.integers(min_value=0, max_value=2**63 - 1)
# A reply's sources: a few users, a few note versions (most messages have none).
sources = st.none() | st.builds(
    Sources,
    users=st.frozensets(st.integers(0, 5) | ids, max_size=3).map(sorted).map(tuple),
    message_ids=st.frozensets(st.integers(0, 5) | ids, max_size=3).map(sorted).map(tuple),
    pins=st.lists(st.builds(Pin, st.integers(1, 3), st.integers(1, 4)), max_size=2).map(tuple),
)
messages = st.builds(
    StoredMessage,
    role=st.sampled_from(["user", "assistant"]),
    # Any text, lone surrogates included: a host may hand in whatever a str can hold.
    content=st.text(min_size=0, max_size=60),
    speaker_name=st.text(max_size=10),
    author_id=st.none() | ids,
    timestamp=st.floats(allow_nan=False, allow_infinity=False),
    turn_user_id=ids,
    message_id=st.none() | ids,
    sources=sources,
)
windows = st.lists(messages, max_size=12)


@settings(max_examples=300, deadline=None)
@given(held=windows, start=st.integers(-14, 14), stop=st.integers(-14, 14))
def test_packed_reads_exactly_what_open_reads(
    held: list[StoredMessage], start: int, stop: int
) -> None:
    """Every read of a packed window (items, slices, length, users) equals the open one's."""
    open_ = Window(held, first=7)
    packed = open_.packed()
    assert packed.packed_form and not open_.packed_form
    assert list(packed) == list(open_) == held
    assert len(packed) == len(held) and bool(packed) == bool(held)
    assert list(packed[start:stop]) == held[start:stop]
    for i in range(-len(held), len(held)):
        assert packed[i] == held[i]
    assert packed.users() == open_.users()
    assert packed.pins() == open_.pins()
    assert packed.quoted() == open_.quoted()
    assert packed.message_ids() == open_.message_ids()
    for last in (0, 1, 3, 20):
        newest = Window(held[max(0, len(held) - last) :])
        assert packed.said(last) == open_.said(last)
        assert packed.said(last) == (newest.users(), newest.message_ids(), newest.quoted())
    assert packed.has_sources == open_.has_sources
    assert packed.first == open_.first and packed == open_


@settings(max_examples=300, deadline=None)
@given(
    turns=st.lists(st.lists(messages, min_size=1, max_size=4), max_size=8),
    limit=st.integers(1, 6),
    pack_at=st.sets(st.integers(0, 8)),
)
def test_appending_keeps_the_newest_and_their_positions(
    turns: list[list[StoredMessage]], limit: int, pack_at: set[int]
) -> None:
    """Appending turns (to open or packed windows) keeps the newest ``limit`` messages, each
    at the position it was given when it arrived, and names everyone who scrolled out."""
    window = EMPTY
    history: list[StoredMessage] = []
    for n, turn in enumerate(turns):
        if n in pack_at:
            window = window.packed()
        newest = turn[-1].turn_user_id
        window, gone = window.appended(tuple(turn), limit, newest)
        combined = history + turn
        dropped = combined[: max(0, len(combined) - limit)]
        history = combined[-limit:]
        assert list(window) == history
        # What the cache indexes by user: turns and authors, never what replies quoted.
        expected_gone = {m.turn_user_id for m in dropped} | {
            m.author_id for m in dropped if m.author_id is not None
        }
        expected_gone.discard(newest)
        assert set(gone or ()) == expected_gone
    total = sum(len(t) for t in turns)
    assert window.first == max(0, total - limit) if turns else window.first == 0


@settings(max_examples=200, deadline=None)
@given(held=windows, user=ids, packed=st.booleans())
def test_without_a_user_renumbers_past_every_used_position(
    held: list[StoredMessage], user: int, packed: bool
) -> None:
    """A purge keeps the form, drops the user's turns and words and the replies whose prompt
    showed their words, and never reuses a position."""
    window = Window(held, first=3)
    if packed:
        window = window.packed()
    kept = window.without(user)
    expected = [
        m
        for m in held
        if user not in (m.turn_user_id, m.author_id)
        and (m.sources is None or user not in m.sources.users)
    ]
    assert list(kept) == expected
    if len(expected) == len(held):
        assert kept is window
    else:
        assert kept.first > window.first + len(held) - 1
        assert kept.packed_form == packed


@settings(max_examples=200, deadline=None)
@given(
    held=windows,
    gone=st.frozensets(st.integers(0, 5) | ids, max_size=3),
    new_text=st.text(min_size=1, max_size=5),
    packed=st.booleans(),
)
def test_a_deleted_or_edited_message_takes_the_replies_that_showed_it(
    held: list[StoredMessage], gone: frozenset[int], new_text: str, packed: bool
) -> None:
    """A delete drops the messages and every reply whose sources name one of them; an edit
    replaces the text and drops the replies that showed the old one; the form is kept."""
    window = Window(held, first=3)
    if packed:
        window = window.packed()

    def showed(m: StoredMessage, ids: frozenset[int]) -> bool:
        return m.sources is not None and not ids.isdisjoint(m.sources.message_ids)

    kept = window.without_messages(gone)
    assert list(kept) == [m for m in held if m.message_id not in gone and not showed(m, gone)]
    assert kept.packed_form == packed or kept is window
    for message_id in gone:
        edited = window.edited(message_id, new_text)
        expected = [
            m._replace(content=new_text) if m.message_id == message_id else m
            for m in held
            if not showed(m, frozenset([message_id]))
        ]
        assert list(edited) == expected


def test_packed_form_is_smaller() -> None:
    """Ten messages packed take a fraction of what they take open, beyond their text."""
    held = [
        StoredMessage("user", f"message {n} " + "x" * 100, "alice", 5, 1e9 + n, 5)
        for n in range(10)
    ]
    text = sum(len(m.content) for m in held)
    window = Window(held)
    open_size = sys.getsizeof(window._items) - text
    open_size += sum(
        sys.getsizeof(m) + sys.getsizeof(m.content) + sys.getsizeof(m.timestamp) for m in held
    )
    packed = window.packed()
    packed_size = sys.getsizeof(packed._meta) + sys.getsizeof(packed._text) - text
    packed_size += sys.getsizeof(packed._names)
    assert packed_size < open_size / 3


def test_cache_packs_all_but_the_most_recently_active_windows() -> None:
    """Past ``open_windows`` active entries, the least recently active entry's window is
    packed; touching it again opens it at its next capture, and reads never change."""
    cache = MemoryCache(
        max_keys=100, crude_ttl_hours=1, summary_ttl_hours=1, clock=lambda: 0.0, open_windows=3
    )
    entries = []
    for n in range(6):
        e = Entry(
            key=f"shortterm:user:{n}:{n}",
            scope="user",
            server_id=None,
            user_id=n,
            channel_id=n,
            persona_id=None,
            messages=(),
            updated_at=0.0,
        )
        e.remember([StoredMessage("user", f"hello {n}", "", n, 0.0, n)], 10)
        cache.put(e)
        entries.append(e)
    forms = [e.messages.packed_form for e in entries]
    assert forms == [True, True, True, False, False, False]
    assert [m.content for e in entries for m in e.messages] == [f"hello {n}" for n in range(6)]
    touched = cache.get_touched(entries[0].key, 0.0)
    assert touched is entries[0]
    touched.remember([StoredMessage("user", "again", "", 0, 0.0, 0)], 10)
    assert not entries[0].messages.packed_form and entries[3].messages.packed_form
    assert [m.content for m in entries[0].messages] == ["hello 0", "again"]


# -- through the facade: a memory whose windows are all packed answers exactly as one whose
# windows are all open, whatever the turns, authors, clears and purges.
Op = tuple[str, int, int, int | None, int]
ops = st.lists(
    st.tuples(
        st.sampled_from(["turn", "turn", "turn", "context", "clear", "purge", "purge-in-server"]),
        st.integers(1, 3),  # user
        st.integers(10, 13),  # channel
        st.sampled_from([100, 100, None]),  # server (None: a DM)
        st.integers(0, 2),  # another author in the turn (0: none)
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=60, deadline=None)
@given(script=ops)
def test_packed_windows_answer_exactly_as_open_ones(script: list[Op]) -> None:
    """Two memories play the same turns, one keeping every window open and one packing
    every window it can: every context, entry and purge count they give is the same."""
    import asyncio
    from datetime import UTC, datetime

    from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig
    from stm.testing import ctx

    async def play() -> None:
        config = STMConfig(database=":memory:", max_messages_per_channel=4)
        clock = [1_700_000_000.0]
        async with (
            ShortTermMemory.open(config, clock=lambda: clock[0]) as opened,
            ShortTermMemory.open(config, clock=lambda: clock[0]) as packing,
        ):
            packing.cache.open_windows = 1
            for n, (op, user, channel, server, other) in enumerate(script):
                clock[0] += 7.0
                turn_ctx = {"user": user, "channel": channel, "server": server}
                answers = []
                when = datetime.fromtimestamp(clock[0], UTC)
                said = [
                    DialogueMessage(
                        role="user", content=f"u{user} says {n}", author_id=user,
                        speaker_name=f"name{user}", timestamp=when,
                    )
                ]  # fmt: skip
                if other:
                    said.append(
                        DialogueMessage(
                            role="user", content=f"o{other} {n}", author_id=other, timestamp=when
                        )
                    )
                said.append(DialogueMessage(role="assistant", content=f"reply {n}", timestamp=when))
                for memory in (opened, packing):
                    c = ctx(**turn_ctx, user_name=f"name{user}", channel_name=f"chan{channel}")  # type: ignore[arg-type]
                    if op == "turn":
                        await memory.capture(GenerationFinished(context=c, messages=said))
                        answers.append(str(await memory.build_context(c)))
                    elif op == "context":
                        answers.append(str(await memory.build_context(c)))
                    elif op == "clear":
                        answers.append(
                            str(await memory.clear_short_term_memory_for_channel(channel))
                        )
                    else:
                        where = 100 if op == "purge-in-server" else None
                        touched = await memory.clear_short_term_memory_for_user(user, where)
                        answers.append(str(touched))
                assert answers[0] == answers[1], (n, op)
            for key in sorted(e.key for e in opened.cache):
                a, b = await opened.get_entry(key), await packing.get_entry(key)
                assert (a and a.messages) == (b and b.messages), key
            assert any(e.messages.packed_form for e in packing.cache) or len(packing.cache) <= 1

    asyncio.run(play())
