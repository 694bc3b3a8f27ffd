"""The public boundary: ids, names and flags are validated where they enter the library."""

from __future__ import annotations

import unicodedata
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from helpers import Opener
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, TurnContext
from stm._ids import MAX_NAME_LENGTH
from stm._text import LINE_BREAKS
from stm.testing import ctx, turn

ID_FIELDS = ["user_id", "channel_id", "server_id", "persona_id", "parent_channel_id"]
NAME_FIELDS = ["user_name", "bot_name", "channel_name", "server_name"]
FLAG_FIELDS = ["channel_is_private", "explicit_memory_intent", "disable_short_term_memory_update"]
BIDI = set("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

out_of_range = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63))
not_an_int = st.one_of(
    st.booleans(),
    st.floats(),
    st.text(max_size=5),
    st.decimals(allow_nan=False),
    st.lists(st.integers(), max_size=2),
)
bad_ids = out_of_range | not_an_int
good_ids = st.integers(0, 2**63 - 1)
names = st.text(
    st.one_of(st.characters(codec=None), st.sampled_from(list(LINE_BREAKS + "\r\n\t"))),
    max_size=150,
)


def assert_clean_name(name: str) -> None:
    assert len(name) <= MAX_NAME_LENGTH
    assert len(name.splitlines()) <= 1, repr(name)
    name.encode("utf-8")  # no lone surrogates
    assert all(unicodedata.category(ch) != "Cc" and ch not in BIDI for ch in name), repr(name)


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(ID_FIELDS), value=bad_ids)
def test_turn_context_refuses_every_id_out_of_range_or_not_an_int(field: str, value: Any) -> None:
    """Ids are ints in [0, 2**63): bools, floats, strings and anything else are refused."""
    with pytest.raises(ValueError):
        TurnContext(**{"user_id": 1, "channel_id": 2, field: value})
    context = TurnContext(user_id=1, channel_id=2)
    with pytest.raises(ValueError):
        setattr(context, field, value)  # changed after construction: checked too
    with pytest.raises(ValueError):
        DialogueMessage(role="user", content="x", author_id=value)


@settings(max_examples=100, deadline=None)
@given(values=st.fixed_dictionaries({field: good_ids for field in ID_FIELDS}))
def test_every_snowflake_is_accepted(values: dict[str, int]) -> None:
    """Every id Discord can hand out (and 0) is accepted unchanged."""
    assert TurnContext(**values).model_dump(include=set(ID_FIELDS)) == values


@settings(max_examples=300, deadline=None)
@given(field=st.sampled_from(NAME_FIELDS), name=names, speaker=names)
def test_names_are_one_clean_line(field: str, name: str, speaker: str) -> None:
    """Whatever a name holds, what the library keeps is one printable line, cut to length."""
    context = TurnContext(**{"user_id": 1, "channel_id": 2, field: name})
    assert_clean_name(getattr(context, field))
    assert_clean_name(DialogueMessage(role="user", content="x", speaker_name=speaker).speaker_name)


@pytest.mark.parametrize("value", [1, 0, "yes", "false", None, 1.0])
@pytest.mark.parametrize("field", FLAG_FIELDS)
def test_flags_must_be_bools(field: str, value: object) -> None:
    """A flag is True or False, never something that converts to one."""
    with pytest.raises(ValueError):
        TurnContext(**{"user_id": 1, "channel_id": 2, field: value})
    with pytest.raises(ValueError):
        GenerationFinished(context=ctx(), messages=[], stopped=value)


Call = Callable[[ShortTermMemory, Any], Awaitable[object]]
FACADE: dict[str, Call] = {
    "purge user": lambda m, v: m.clear_short_term_memory_for_user(v),
    "purge user in server": lambda m, v: m.clear_short_term_memory_for_user(1, v),
    "clear channel": lambda m, v: m.clear_short_term_memory_for_channel(v),
    "opt out": lambda m, v: m.set_user_opt_out(v, True),
    "get settings": lambda m, v: m.get_server_settings(v),
    "update settings": lambda m, v: m.update_server_settings(v, refresh_cadence=3),
    "set categories": lambda m, v: m.set_categories(v, []),
}


@pytest.mark.parametrize("value", [2**63, 2**64, -1, True, 1.0, "1", b"1"])
@pytest.mark.parametrize("call", list(FACADE))
async def test_facade_refuses_bad_ids_and_queues_nothing(
    memory: ShortTermMemory, call: str, value: object
) -> None:
    """Every facade function taking an id raises ValueError for a bad one, before anything is
    queued: no write can jam the writer, and what comes next still lands."""
    with pytest.raises(ValueError):
        await FACADE[call](memory, value)
    with pytest.raises(ValueError):
        memory.is_opted_out(value)  # type: ignore[arg-type]
    assert memory.writer.pending == 0
    await memory.capture(turn(ctx(), "hello"))
    assert (await memory.run_tool(ctx(), {"summary": "kept"})).success
    await memory.clear_short_term_memory_for_user(1)
    await memory.flush()
    left = await memory.get_entry("shortterm:server:100:10")
    assert left is None or (left.summary is None and not left.messages)


async def test_facade_refuses_flags_that_are_not_bools(memory: ShortTermMemory) -> None:
    """set_user_opt_out takes True or False, not a truthy value."""
    for value in ("no", 0, None):
        with pytest.raises(ValueError):
            await memory.set_user_opt_out(1, value)  # type: ignore[arg-type]
    assert memory.writer.pending == 0 and not memory.is_opted_out(1)


@pytest.mark.parametrize(
    "key",
    [
        None,
        42,
        b"shortterm:user:1:2",
        "shortterm:user:18446744073709551616:2",
        "shortterm:server:1:9223372036854775808",
        "shortterm:user:1:2:-3",
    ],
)
async def test_get_entry_refuses_what_is_not_a_key(memory: ShortTermMemory, key: object) -> None:
    """get_entry raises ValueError (not TypeError or AttributeError) for a non-key."""
    with pytest.raises(ValueError):
        await memory.get_entry(key)  # type: ignore[arg-type]


async def test_poison_names_do_not_jam_the_writer(open_memory: Opener) -> None:
    """Lone surrogates and line breaks in every name: the turn is captured, its upgrade and
    identity rows are durable, and the names stored are clean."""
    memory = await open_memory()
    poison = "a\ud800b\udfff\u2028\nc\x00"
    c = ctx(channel_name=poison, server_name=poison, user_name=poison, bot_name=poison)
    said = DialogueMessage(role="user", content="hello", author_id=1, speaker_name=poison)
    await memory.capture(GenerationFinished(context=c, messages=[said]))
    assert (await memory.run_tool(c, {"summary": "S"})).success
    await memory.flush()
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.messages[0].speaker_name == "ab  c"
    assert entry.channel_name == entry.server_name == "ab  c"
    await memory.close()
    memory = await open_memory()
    again = await memory.get_entry("shortterm:server:100:10")
    assert again is not None and again.channel_name == "ab  c" and again.summary == "S"
