"""The explicit-memory intent gate: whole words and phrases, several languages, extendable."""

from __future__ import annotations

import pytest

from stm.intent import IntentGate


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
