"""``stm.place``: a PromptContext's blocks and nudge go where their depths say."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from stm import PromptBlock, PromptContext, place

Message = dict[str, Any]


def chat(*contents: str) -> list[Message]:
    return [
        {"role": "user" if n % 2 == 0 else "assistant", "content": c}
        for n, c in enumerate(contents)
    ]


def contents(messages: list[Message]) -> list[str]:
    return [m["content"] for m in messages]


SYSTEM = {"role": "system", "content": "sys"}
CONVERSATION = chat("m0", "m1", "m2", "m3")


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (-1, ["sys", "X", "m0", "m1", "m2", "m3"]),
        (0, ["sys", "m0", "m1", "m2", "m3", "X"]),
        (1, ["sys", "m0", "m1", "m2", "X", "m3"]),
        (2, ["sys", "m0", "m1", "X", "m2", "m3"]),
        (3, ["sys", "m0", "X", "m1", "m2", "m3"]),
        (4, ["sys", "X", "m0", "m1", "m2", "m3"]),
    ],
)
def test_each_depth_counts_messages_back_from_the_end(depth: int, expected: list[str]):
    """Depth d sits before the last d messages; -1 right after the system prompt."""
    placed = place([SYSTEM, *CONVERSATION], PromptContext(blocks=[PromptBlock("X", depth)]))
    assert contents(placed) == expected
    assert placed[expected.index("X")]["role"] == "system"


@pytest.mark.parametrize("depth", [5, 9, 100])
def test_a_depth_beyond_the_conversation_goes_to_its_start_after_the_system_prompt(depth: int):
    placed = place([SYSTEM, *CONVERSATION], PromptContext(blocks=[PromptBlock("X", depth)]))
    assert contents(placed) == ["sys", "X", "m0", "m1", "m2", "m3"]


@pytest.mark.parametrize(
    ("depth", "expected"),
    [
        (-1, ["X", "m0", "m1"]),
        (0, ["m0", "m1", "X"]),
        (1, ["m0", "X", "m1"]),
        (7, ["X", "m0", "m1"]),
    ],
)
def test_without_a_system_prompt_the_top_is_first(depth: int, expected: list[str]):
    placed = place(chat("m0", "m1"), PromptContext(blocks=[PromptBlock("X", depth)]))
    assert contents(placed) == expected


def test_several_system_prompts_stay_together_at_the_top():
    messages = [SYSTEM, {"role": "developer", "content": "dev"}, *chat("m0")]
    context = PromptContext(blocks=[PromptBlock("top", -1), PromptBlock("far", 10)])
    assert contents(place(messages, context)) == ["sys", "dev", "top", "far", "m0"]


@pytest.mark.parametrize("depth", [-1, 0, 3])
def test_an_empty_conversation_gets_the_blocks_after_the_system_prompt(depth: int):
    context = PromptContext(blocks=[PromptBlock("X", depth)], nudge="N", nudge_depth=depth)
    assert contents(place([SYSTEM], context)) == ["sys", "X", "N"]
    assert contents(place([], context)) == ["X", "N"]


def test_blocks_at_one_depth_keep_their_order_and_the_nudge_comes_after_them():
    context = PromptContext(
        blocks=[PromptBlock("a", 1), PromptBlock("b", -1), PromptBlock("c", 1)],
        nudge="N",
        nudge_depth=1,
    )
    placed = place([SYSTEM, *chat("m0", "m1")], context)
    assert contents(placed) == ["sys", "b", "m0", "a", "c", "N", "m1"]


def test_depths_count_the_callers_messages_not_the_inserted_ones():
    context = PromptContext(
        blocks=[PromptBlock("d0", 0), PromptBlock("d1", 1), PromptBlock("d2", 2)]
    )
    placed = place(chat("m0", "m1", "m2"), context)
    assert contents(placed) == ["m0", "d2", "m1", "d1", "m2", "d0"]


def test_an_empty_context_returns_copies_of_the_messages_and_changes_nothing():
    messages = [SYSTEM, *CONVERSATION]
    before = [dict(m) for m in messages]
    placed = place(messages, PromptContext())
    assert placed == before and messages == before
    assert all(a is not b for a, b in zip(placed, messages, strict=True))
    place(messages, PromptContext(blocks=[PromptBlock("X", 0)]))
    assert messages == before


def test_the_role_of_inserted_text_can_be_chosen():
    placed = place(chat("m0"), PromptContext(nudge="N", nudge_depth=0), role="user")
    assert placed[-1] == {"role": "user", "content": "N"}


def test_a_text_never_splits_tool_results_from_their_call():
    messages: list[Message] = [
        SYSTEM,
        {"role": "user", "content": "m0"},
        {"role": "assistant", "content": "call", "tool_calls": [{"id": "1"}, {"id": "2"}]},
        {"role": "tool", "content": "r1", "tool_call_id": "1"},
        {"role": "tool", "content": "r2", "tool_call_id": "2"},
    ]
    for depth in (1, 2):
        placed = place(messages, PromptContext(blocks=[PromptBlock("X", depth)]))
        assert contents(placed) == ["sys", "m0", "X", "call", "r1", "r2"]


@pytest.mark.parametrize("depth", [-2, 1.5, "1", True, None])
def test_a_depth_that_is_not_an_integer_from_minus_one_up_is_refused(depth: Any):
    with pytest.raises(ValueError, match="depth"):
        place(chat("m0"), PromptContext(blocks=[PromptBlock("X", depth)]))
    with pytest.raises(ValueError, match="nudge_depth"):
        place(chat("m0"), PromptContext(nudge="N", nudge_depth=depth))


def test_anything_but_a_prompt_context_is_refused():
    with pytest.raises(TypeError, match="PromptContext"):
        place(chat("m0"), "memory")  # type: ignore[arg-type]


ROLES = st.sampled_from(["user", "assistant"])


@given(
    systems=st.integers(0, 2),
    roles=st.lists(ROLES, max_size=8),
    depths=st.lists(st.integers(-1, 12), max_size=5),
    nudge=st.one_of(st.none(), st.integers(-1, 12)),
)
def test_property_every_text_lands_at_its_depth_and_nothing_else_moves(
    systems: int, roles: list[str], depths: list[int], nudge: int | None
):
    messages: list[Message] = [{"role": "system", "content": f"s{n}"} for n in range(systems)]
    messages += [{"role": r, "content": f"m{n}"} for n, r in enumerate(roles)]
    context = PromptContext(
        blocks=[PromptBlock(f"b{n}", d) for n, d in enumerate(depths)],
        nudge=None if nudge is None else "nudge",
        nudge_depth=2 if nudge is None else nudge,
    )
    placed = place(messages, context, role="memory")
    inserted = [m for m in placed if m["role"] == "memory"]
    wanted = [(b.text, b.depth) for b in context.blocks]
    if nudge is not None:
        wanted.append(("nudge", nudge))
    # Every text once, and the caller's messages in their order around them.
    assert sorted(m["content"] for m in inserted) == sorted(t for t, _ in wanted)
    assert [m for m in placed if m["role"] != "memory"] == messages
    size = len(roles)
    for text, depth in wanted:
        at = next(i for i, m in enumerate(placed) if m["content"] == text)
        before = [m for m in placed[:at] if m["role"] != "memory"]
        after = [m for m in placed[at:] if m["role"] != "memory"]
        # The system prompts always come first; then the depth counts from the end.
        assert len(before) >= systems
        assert len(after) == (size if depth == -1 else min(depth, size))
    # Texts at one spot keep the context's order (the blocks, then the nudge).
    order = [t for t, _ in wanted]
    for first, second in itertools.pairwise(inserted):
        a, b = placed.index(first), placed.index(second)
        if b == a + 1:
            assert order.index(first["content"]) < order.index(second["content"])
