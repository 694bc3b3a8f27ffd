"""The turn's input types: checked by hand, as strict as models, and cheap to build."""

from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from unicode_policy import hidden

from stm import DialogueMessage, GenerationFinished, MemoryEntry, TurnContext

ID_FIELDS = [
    "user_id",
    "channel_id",
    "server_id",
    "persona_id",
    "parent_channel_id",
    "message_id",
]
FLAG_FIELDS = ["channel_is_private", "explicit_memory_intent", "disable_short_term_memory_update"]
NAME_FIELDS = ["user_name", "bot_name", "channel_name", "server_name"]
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

bad_ids = st.one_of(
    st.integers(max_value=-1),
    st.integers(min_value=2**63),
    st.booleans(),
    st.floats(),
    st.text(max_size=4),
    st.lists(st.integers(), max_size=2),
)


def base(**fields: Any) -> TurnContext:
    return TurnContext(**{"user_id": 1, "channel_id": 2, **fields})


def test_defaults_are_the_contracts() -> None:
    """Every field not given has the default the contract names."""
    ctx = base()
    assert ctx.model_dump() == {
        "user_id": 1,
        "channel_id": 2,
        "server_id": None,
        "persona_id": None,
        "user_name": "",
        "bot_name": "Assistant",
        "channel_name": None,
        "server_name": None,
        "parent_channel_id": None,
        "channel_is_private": False,
        "user_text": "",
        "explicit_memory_intent": False,
        "disable_short_term_memory_update": False,
        "message_id": None,
        "server_locale": None,  # beyond the contract: the language of the frames
    }
    said = DialogueMessage(role="user", content="hi")
    assert (said.author_id, said.speaker_name, said.message_id) == (None, "", None)
    assert said.timestamp.tzinfo is UTC
    assert abs(said.timestamp - datetime.now(UTC)) < timedelta(seconds=5)
    assert GenerationFinished(context=ctx, messages=[said]).stopped is False


@settings(max_examples=200, deadline=None)
@given(field=st.sampled_from(ID_FIELDS), value=bad_ids)
def test_bad_ids_are_refused_in_the_constructor_and_on_assignment(field: str, value: Any) -> None:
    """An id is an int in [0, 2**63), whether given at construction or assigned later."""
    with pytest.raises(ValueError):
        base(**{field: value})
    ctx = base()
    with pytest.raises(ValueError):
        setattr(ctx, field, value)
    assert getattr(ctx, field) == {"user_id": 1, "channel_id": 2}.get(field)
    with pytest.raises(ValueError):
        DialogueMessage(role="user", content="x", author_id=value)
    with pytest.raises(ValueError):
        DialogueMessage(role="user", content="x", message_id=value)


@pytest.mark.parametrize("value", [0, 1, "yes", None, 1.0])
@pytest.mark.parametrize("field", FLAG_FIELDS)
def test_flags_must_be_bools(field: str, value: object) -> None:
    """A flag is True or False, in the constructor and on assignment."""
    with pytest.raises(ValueError):
        base(**{field: value})
    ctx = base()
    with pytest.raises(ValueError):
        setattr(ctx, field, value)
    with pytest.raises(ValueError):
        GenerationFinished(context=ctx, messages=[], stopped=value)


@settings(max_examples=200, deadline=None)
@given(
    field=st.sampled_from(NAME_FIELDS),
    name=st.text(max_size=150) | st.text(alphabet="a\u00e9\ufe0f\U000e0100\U000e0041"),
)
def test_names_are_one_printable_line(field: str, name: str) -> None:
    """A name keeps no line break or control and at most 100 characters, however it
    arrives."""
    for ctx in (base(**{field: name}), base()):
        setattr(ctx, field, name)
        assert_clean_name(getattr(ctx, field))
    assert_clean_name(DialogueMessage(role="user", content="x", speaker_name=name).speaker_name)


def assert_clean_name(name: str) -> None:
    assert len(name) <= 100
    assert len(name.splitlines()) <= 1, repr(name)
    name.encode("utf-8")  # no lone surrogates
    assert all(unicodedata.category(ch) != "Cc" and ch not in BIDI for ch in name), repr(name)
    assert hidden(name) == [], repr(name)


@pytest.mark.parametrize(
    "build",
    [
        lambda: base(nope=1),
        lambda: base(user_text=5),
        lambda: base(user_name=b"bytes"),
        lambda: DialogueMessage(role="system", content="x"),
        lambda: DialogueMessage(role="user", content=None),
        lambda: DialogueMessage(role="user", content="x", timestamp=datetime(2024, 1, 1)),
        lambda: DialogueMessage(role="user", content="x", timestamp="2024-01-01T00:00:00Z"),
        lambda: DialogueMessage(role="user", content="x", extra=1),
        lambda: GenerationFinished(context={"user_id": -1, "channel_id": 2}, messages=[]),
        lambda: GenerationFinished(context=base(), messages="not a list"),
        lambda: GenerationFinished(context=base(), messages=[{"role": "bot", "content": "x"}]),
        lambda: GenerationFinished(context=base(), messages=[object()]),
        lambda: GenerationFinished(context=object(), messages=[]),
        lambda: GenerationFinished(context=base(), messages=[], more=1),
    ],
)
def test_bad_input_raises_value_error(build: Any) -> None:
    """Unknown fields, wrong types and bad values raise ValueError, as the models did."""
    with pytest.raises(ValueError):
        build()


def test_assignments_are_checked_and_messages_are_frozen() -> None:
    """A context's fields change only to valid values; a message never changes."""
    ctx = base()
    ctx.explicit_memory_intent = True
    ctx.user_text = "remember this"
    assert ctx.explicit_memory_intent and ctx.user_text == "remember this"
    with pytest.raises(ValueError):
        ctx.not_a_field = 1
    said = DialogueMessage(role="user", content="x")
    with pytest.raises(ValueError):
        said.content = "changed"  # type: ignore[misc]
    assert said.content == "x"
    event = GenerationFinished(context=ctx, messages=[])
    with pytest.raises(ValueError):
        event.messages = [1]  # type: ignore[list-item]


def test_dicts_and_sequences_are_accepted_where_models_accepted_them() -> None:
    """A dict for a nested context or message, and a tuple of messages, are checked and
    converted; the event holds a list of its own."""
    messages = [DialogueMessage(role="user", content="a")]
    event = GenerationFinished(
        context={"user_id": 1, "channel_id": 2},  # type: ignore[arg-type]
        messages=(messages[0], {"role": "assistant", "content": "b"}),  # type: ignore[arg-type]
    )
    assert event.context == base()
    assert [m.content for m in event.messages] == ["a", "b"]
    own = GenerationFinished(context=base(), messages=messages)
    messages.append(DialogueMessage(role="user", content="later"))
    assert len(own.messages) == 1


def test_timestamps_keep_their_instant() -> None:
    """A given timestamp in any zone is kept as given; the default one is UTC now."""
    when = datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    said = DialogueMessage(role="assistant", content="x", timestamp=when)
    assert said.timestamp == when
    assert said._epoch == when.timestamp()
    default = DialogueMessage(role="user", content="y")
    assert default.timestamp == datetime.fromtimestamp(default._epoch, UTC)


def test_copies_equality_and_repr() -> None:
    """model_copy checks its update and keeps the turn's notes; equal fields compare equal;
    messages hash; repr names the fields."""
    ctx = base(server_id=3)
    ctx._deletion_seq = 7
    moved = ctx.model_copy(update={"channel_id": 9})
    assert (moved.channel_id, moved.server_id, moved._deletion_seq) == (9, 3, 7)
    assert ctx.channel_id == 2
    with pytest.raises(ValueError):
        ctx.model_copy(update={"channel_id": -1})
    with pytest.raises(ValueError):
        ctx.model_copy(update={"nope": 1})
    assert base() == base() and base() != base(user_id=5)
    when = datetime(2024, 1, 1, tzinfo=UTC)
    a = DialogueMessage(role="user", content="x", timestamp=when)
    assert a == DialogueMessage(role="user", content="x", timestamp=when)
    assert len({a, DialogueMessage(role="user", content="x", timestamp=when)}) == 1
    assert a.model_copy(update={"content": "y"}).content == "y"
    assert "user_id=1" in repr(base())


def test_memory_entries_hold_and_dump_messages() -> None:
    """The pydantic MemoryEntry takes these messages (or dicts of them) and dumps them."""
    when = datetime(2024, 1, 1, tzinfo=UTC)
    said = DialogueMessage(role="user", content="x", author_id=4, timestamp=when)
    entry = MemoryEntry(
        key="shortterm:user:1:2",
        messages=[said, {"role": "assistant", "content": "y", "timestamp": when}],
        summary=None,
        categories={},
        turns_since_refresh=0,
    )
    assert entry.messages[0] is said
    assert entry.model_dump()["messages"][0] == {
        "role": "user",
        "content": "x",
        "author_id": 4,
        "speaker_name": "",
        "timestamp": when,
        "message_id": None,
    }
    with pytest.raises(ValueError):
        MemoryEntry(key="k", messages=[1], summary=None, categories={}, turns_since_refresh=0)


@pytest.mark.parametrize("how", ["copy", "deepcopy", "pickle"])
def test_copied_and_pickled_values_are_equal(how: str) -> None:
    """copy, deepcopy and pickle keep every field (and the turn's notes)."""
    import copy
    import pickle

    dup = {
        "copy": copy.copy,
        "deepcopy": copy.deepcopy,
        "pickle": lambda x: pickle.loads(pickle.dumps(x)),
    }[how]
    ctx = base(user_text="hi", server_id=4)
    ctx._deletion_seq = 3
    said = DialogueMessage(role="user", content="x", author_id=1)
    event = GenerationFinished(context=ctx, messages=[said])
    assert dup(ctx) == ctx and dup(ctx)._deletion_seq == 3
    assert dup(said) == said and dup(said).timestamp == said.timestamp
    assert dup(event) == event


class _Str(str):
    """A str subclass: its text is kept, as a plain str."""


any_value = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-3, max_value=3),
    st.integers(min_value=2**63 - 2, max_value=2**63 + 1),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=120),
    st.text(min_size=95, max_size=110),
    st.text(alphabet="ab \u00e9\u4e00", min_size=95, max_size=110),  # printable, near the limit
    # printable (variation selectors are marks) but not clean: a stray selector, a tag
    st.text(alphabet="a \u00e9\u4e00\ufe0f\U000e0100\U000e0041\u200d", max_size=30),
    st.text(max_size=20).map(_Str),
    st.sampled_from(["Assistant", _Str("Assistant"), "user", "assistant", "", " x ", "a\nb"]),
    st.binary(max_size=4),
    st.lists(st.integers(), max_size=2),
)


def _slow(check: Any, value: object, name: str) -> tuple[str, object]:
    """What the field's own check makes of ``value``: ("ok", cleaned) or ("error", None)."""
    try:
        return "ok", check(value, name)
    except ValueError:
        return "error", None


@settings(max_examples=1500, deadline=None)
@given(field=st.sampled_from(sorted(TurnContext._checks)), value=any_value)
def test_the_context_fast_paths_agree_with_each_fields_check(field: str, value: Any) -> None:
    """The constructor's inlined checks and the assignment's shortcuts accept, refuse and
    clean every value exactly as the field's own check does."""
    expected = _slow(TurnContext._checks[field], value, field)
    try:
        built = ("ok", getattr(base(**{field: value}), field))
    except ValueError:
        built = ("error", None)
    assert built == expected
    ctx = base()
    try:
        setattr(ctx, field, value)
        assigned = ("ok", getattr(ctx, field))
    except ValueError:
        assigned = ("error", None)
    assert assigned == expected
    for result in (built[1], assigned[1]):
        if isinstance(result, str):
            assert type(result) is str


@settings(max_examples=1000, deadline=None)
@given(field=st.sampled_from(sorted(DialogueMessage._checks)), value=any_value)
def test_the_message_fast_paths_agree_with_each_fields_check(field: str, value: Any) -> None:
    """The message's inlined checks accept, refuse and clean as each field's check does
    (a timestamp of None is the default: the time the message was built)."""
    if field == "timestamp" and value is None:
        assert DialogueMessage(role="user", content="x", timestamp=None).timestamp.tzinfo is UTC
        return
    expected = _slow(DialogueMessage._checks[field], value, field)
    fields: dict[str, Any] = {"role": "user", "content": "x", field: value}
    try:
        built = ("ok", getattr(DialogueMessage(**fields), field))
    except ValueError:
        built = ("error", None)
    assert built == expected
    if isinstance(built[1], str):
        assert type(built[1]) is str


@pytest.mark.parametrize("name", ["_deletion_seq", "_feed_position", "_intent", "_upgrading"])
def test_the_librarys_notes_are_kept_as_given_and_other_names_refused(name: str) -> None:
    """The turn's private notes take any value; a name that is neither a field nor a note
    is refused, whatever its value."""
    ctx = base()
    marker = object()
    setattr(ctx, name, marker)
    assert getattr(ctx, name) is marker
    for value in (True, 1, "x", None):
        with pytest.raises(ValueError):
            ctx.nope = value  # type: ignore[attr-defined]
        with pytest.raises(ValueError):
            ctx._nope = value  # type: ignore[attr-defined]


async def test_a_message_without_a_timestamp_is_stamped_by_the_memorys_clock() -> None:
    """Every timestamp the library stores comes from the memory's clock: a message the host
    built without one is stamped when captured, by that clock; one given is kept."""
    from stm import ShortTermMemory, STMConfig
    from stm._readthrough import turn_scope
    from stm.testing import Clock

    clock = Clock(1_000.0)  # far from the machine's time
    async with ShortTermMemory.open(STMConfig(database=":memory:"), clock=clock) as memory:
        context = TurnContext(user_id=1, channel_id=10, server_id=100)
        given = datetime(2020, 1, 1, tzinfo=UTC)
        said = [
            DialogueMessage(role="user", content="no time given", author_id=1),
            DialogueMessage(role="assistant", content="one given", timestamp=given),
        ]
        await memory.capture(GenerationFinished(context=context, messages=said))
        entry = memory.cache.peek(turn_scope(context)[1] or turn_scope(context)[0])
        assert entry is not None
        assert [m.timestamp for m in entry.messages] == [1_000.0, given.timestamp()]
