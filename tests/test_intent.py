"""The explicit-memory intent gate: whole words and phrases, several languages, extendable."""

from __future__ import annotations

import pytest
from helpers import scaled
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import ShortTermMemory, TurnContext
from stm._intent import DEFAULT_PHRASES, IntentGate, normalize


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


# Characters that normalize() changes or that border a phrase: case and width variants,
# compatibility forms, case-folding expansions, apostrophe look-alikes, every kind of
# whitespace, word boundaries and controls.
TRICKS = (
    "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    "\uff32\uff45\uff4d\uff4e\uff4f\uff54"  # fullwidth R e m n o t
    "\u017f\u212a\u0130\u00df\ufb01\ufb00\u1e9e\u0345\u2160"  # ſ K İ ß ﬁ ﬀ ẞ iota Ⅰ
    "\u2019\u2018\u02bc`'-_"
    " \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u2028\u2029\u3000"
    "\x00\x7f\u200b\u0301"
)
ASCII_TRICKS = "".join(ch for ch in TRICKS if ch.isascii())


def _glue_text(alphabet: str) -> st.SearchStrategy[str]:
    """Text made of phrases, their words and pieces of them, in any case, glued by
    characters from ``alphabet``."""
    phrase_bits = [p for words, _ in DEFAULT_PHRASES.values() for p in words] + PHRASE_WORDS
    bit = st.one_of(
        st.sampled_from(phrase_bits),
        st.sampled_from(phrase_bits).map(str.upper),
        st.sampled_from(phrase_bits).map(str.title),
        st.sampled_from(phrase_bits).flatmap(
            lambda p: st.tuples(st.integers(0, len(p)), st.integers(0, len(p))).map(
                lambda ij: p[min(ij) : max(ij)]
            )
        ),
        st.text(alphabet=alphabet, max_size=4),
        # A phrase whose spaces became other runs of characters (tabs, doubled spaces...).
        st.tuples(
            st.sampled_from(phrase_bits), st.text(alphabet=alphabet, min_size=1, max_size=3)
        ).map(lambda pg: pg[1].join(pg[0].split(" "))),
    )
    return st.lists(bit, max_size=10).map("".join)


@settings(max_examples=scaled(400, 4000), deadline=None)
@given(
    st.one_of(
        _glue_text(TRICKS),
        _glue_text(ASCII_TRICKS),
        st.text(max_size=40),
        st.text(alphabet=ASCII_TRICKS + "abcdefghijklmnopqrstuvwxyz", max_size=60),
    )
)
def test_the_ascii_fast_path_answers_as_the_full_matcher(text: str) -> None:
    """matches() (which decides most ASCII text without normalizing it) gives the full
    pattern's answer on the normalized text, for ASCII and any other text alike."""
    expected = GATE._pattern.search(normalize(text)) is not None
    assert IntentGate().matches(text) == expected
    assert IntentGate().matches(text.upper()) == (
        GATE._pattern.search(normalize(text.upper())) is not None
    )


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(alphabet="abcdeor '`-\u2019", min_size=1, max_size=8), min_size=1, max_size=4),
    _glue_text(ASCII_TRICKS),
)
def test_an_extended_gate_keeps_the_fast_path_exact(extra: list[str], text: str) -> None:
    """With phrases a host added (short, spaced oddly, with apostrophes), the fast path
    still answers as the full pattern does."""
    gate = IntentGate().extended("xx", extra)
    for sample in (text, " ".join(extra) + text, text + "  ".join(extra).upper()):
        assert gate.matches(sample) == (gate._pattern.search(normalize(sample)) is not None)


def test_every_phrase_has_a_piece_the_fast_path_looks_for() -> None:
    """Each ASCII phrase contains, after lowercasing, one of the pieces the fast path
    tests: the fast path cannot say no to a phrase on its own."""
    for phrase in GATE._literals:
        if phrase.isascii():
            assert any(piece in phrase for piece in GATE._ascii_pieces), phrase


@pytest.mark.parametrize(
    "text",
    [
        "n`oublie pas",
        "Don`t forget",
        "KEEP\tIN\nMIND",
        "toma\x1cnota",
        "Merk  Dir",
        "  REMEMBER  ",
        "\u017fouviens-toi",  # long s: folds to s, and is not ASCII
        "\u212aeep in mind",  # Kelvin sign: K by NFKC
    ],
)
def test_ascii_look_alikes_and_odd_spacing_still_match(text: str) -> None:
    """Backticks, any whitespace, case and compatibility forms: normalized first, so the
    phrase is found wherever the fast path hands over."""
    assert IntentGate().matches(text)


@settings(max_examples=600, deadline=None)
@given(
    st.sampled_from([p for words, _ in DEFAULT_PHRASES.values() for p in words]),
    st.text(alphabet=ASCII_TRICKS, min_size=1, max_size=3),
    st.text(alphabet=ASCII_TRICKS + "xyz.", max_size=4),
    st.text(alphabet=ASCII_TRICKS + "xyz.", max_size=4),
    st.booleans(),
)
def test_one_phrase_with_odd_spaces_gets_the_full_answer(
    phrase: str, glue: str, before: str, after: str, upper: bool
) -> None:
    """A single phrase whose spaces became other characters, alone in the text: nothing
    else in the text can hand it to the full matcher, so the fast path must do so itself
    whenever the full pattern matches."""
    text = before + glue.join(phrase.split(" ")) + after
    if upper:
        text = text.upper()
    assert IntentGate().matches(text) == (GATE._pattern.search(normalize(text)) is not None)
