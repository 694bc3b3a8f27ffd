"""The explicit-memory intent gate: whole words and phrases, several languages, extendable."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import ShortTermMemory, TurnContext
from stm.intent import DEFAULT_PHRASES, IntentGate, normalize


@pytest.mark.parametrize(
    "text",
    [
        "Please remember that I am vegan",
        "REMEMBER this",
        "don't forget my birthday",
        "Don\u2019t   forget it",
        "take note: the meeting moved",
        "note that I prefer tea",
        "make a note of this",
        "commit to memory: 42",
        "for future conversations, call me Sam",
        "keep this for future reference",
        "これを覚えておいて",
        "忘れないでね",
        "ｒｅｍｅｍｂｅｒ this",  # full-width letters, folded by NFKC
        "recuerda que soy alérgico",
    ],
)
def test_explicit_requests_match(text: str) -> None:
    """Requests to be remembered are recognized."""
    assert IntentGate().matches(text)


@pytest.mark.parametrize(
    "text",
    [
        "I bought a new notebook",
        "side note, the weather is nice",
        "I noted it already",
        "remembering things is hard",
        "a footnote",
        "what a memorable day",
        "",
    ],
)
def test_words_that_merely_contain_a_phrase_do_not_match(text: str) -> None:
    """Substrings do not fire: 'notebook' is not 'note'."""
    assert not IntentGate().matches(text)


def test_phrase_packs_can_be_extended() -> None:
    """A host adds phrases for a language without losing the defaults."""
    gate = IntentGate().extended("nl", ["onthoud dit"])
    assert gate.matches("Onthoud dit alsjeblieft")
    assert gate.matches("remember this")
    assert not IntentGate().matches("Onthoud dit alsjeblieft")


def test_the_last_answer_is_reused_only_for_the_same_text() -> None:
    """The gate answers a repeated question about the same text without asking again, and
    a new text always gets its own answer."""
    gate = IntentGate()
    asks = "".join(["please remember ", "this"])  # built at run time: not an interned literal
    assert gate.matches(asks) is True
    assert gate.matches(asks) is True
    assert gate.matches("just chatting") is False
    assert gate.matches(asks) is True
    assert gate.matches("".join(["just ", "chatting"])) is False


async def test_the_turn_decides_once_but_follows_a_changed_text(memory: ShortTermMemory) -> None:
    """The tool is withheld for a turn that asks to be remembered, and offered again when
    the host changes the turn's text, even after the decision was made once."""
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100, user_text="remember this")
    assert memory.tool_schema(ctx) is None
    assert memory.tool_schema(ctx) is None
    ctx.user_text = "what a nice day"
    assert memory.tool_schema(ctx) is not None
    ctx.user_text = "don't forget my birthday"
    assert memory.tool_schema(ctx) is None


GATE = IntentGate()
PHRASE_WORDS = sorted(
    {w for words, _ in DEFAULT_PHRASES.values() for p in words for w in p.split()}
)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(PHRASE_WORDS),
            st.sampled_from([p for words, _ in DEFAULT_PHRASES.values() for p in words]),
            st.text(max_size=8),
        ),
        max_size=8,
    ),
    st.sampled_from([" ", "  ", "-", "", ", "]),
)
def test_the_prefilter_never_hides_a_match(parts: list[str], glue: str) -> None:
    """The substring prefilter answers exactly as the full pattern does, for text made of
    the phrases, their words and anything else."""
    text = glue.join(parts)
    assert GATE.matches(text) == (GATE._pattern.search(normalize(text)) is not None)


@pytest.mark.parametrize(
    "phrase", sorted({p for words, _ in DEFAULT_PHRASES.values() for p in words})
)
def test_every_phrase_passes_the_prefilter(phrase: str) -> None:
    """Each phrase of every pack, alone or inside a sentence, is recognized."""
    assert GATE.matches(phrase)
    assert GATE.matches(f"well, {phrase}: tuesday at noon")
