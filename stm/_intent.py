"""The explicit-memory intent gate: does the user ask the bot to remember something?

Such requests belong to long-term memory, so the short-term tool and nudge are
withheld for that turn. Phrases are data, kept per language and extendable.
Space-delimited languages match whole words and phrases; languages written
without spaces match the phrase anywhere.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Mapping

__all__ = ["DEFAULT_PHRASES", "IntentGate", "normalize"]

# language -> (phrases, whether the script separates words with spaces)
DEFAULT_PHRASES: Mapping[str, tuple[tuple[str, ...], bool]] = {
    "en": (
        (
            "remember",
            "remember this",
            "remember that",
            "don't forget",
            "dont forget",
            "do not forget",
            "never forget",
            "take note",
            "take a note",
            "make a note",
            "note that",
            "note this",
            "note down",
            "note it",
            "commit to memory",
            "commit this to memory",
            "keep in mind",
            "memorize",
            "memorise",
            "for future conversations",
            "for future reference",
        ),
        True,
    ),
    "fr": (("souviens-toi", "rappelle-toi", "n'oublie pas", "retiens", "note bien"), True),
    "es": (("recuerda", "no olvides", "acuérdate", "toma nota", "memoriza"), True),
    "de": (("merk dir", "merke dir", "vergiss nicht", "nicht vergessen", "notier"), True),
    "ja": (
        (
            "覚えておいて",
            "覚えといて",
            "覚えて",
            "忘れないで",
            "記憶して",
            "メモして",
            "メモしといて",
        ),
        False,
    ),
    "zh": (("记住", "別忘了", "别忘了", "記住"), False),
}

_APOSTROPHES = str.maketrans({"\u2019": "'", "\u2018": "'", "\u02bc": "'", "`": "'"})


def normalize(text: str) -> str:
    """NFKC, case-folded, apostrophes unified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii() or "`" in text:  # the only apostrophe look-alike in ASCII
        text = text.translate(_APOSTROPHES)
    # Printable text has no whitespace but the plain space (every other kind is a
    # separator or control), so it is already collapsed unless spaces double or pad it;
    # the test is cheaper than splitting and joining every message.
    if text.isprintable() and "  " not in text and text[:1] != " " and text[-1:] != " ":
        return text
    # split() breaks on the same Unicode whitespace as the pattern's \s, and strips.
    return " ".join(text.split())


@functools.lru_cache(maxsize=16)
def _stems(phrases: tuple[str, ...], shortest: int = 4) -> tuple[str, ...]:
    """A few substrings such that every phrase contains one (a greedy cover, longest first
    among equals): text that contains no stem contains no phrase, and testing 15 stems
    instead of 33 phrases halves the cost of the common answer, "no"."""
    remaining = set(phrases)
    stems: list[str] = []
    while remaining:
        counts: Counter[str] = Counter()
        for phrase in remaining:
            counts.update(
                {
                    phrase[i : i + n]
                    for n in range(min(shortest, len(phrase)), len(phrase) + 1)
                    for i in range(len(phrase) - n + 1)
                }
            )
        best = max(sorted(counts), key=lambda stem: (counts[stem], len(stem)))
        stems.append(best)
        remaining = {phrase for phrase in remaining if best not in phrase}
    return tuple(stems)


def _pieces(stems: tuple[str, ...]) -> tuple[str, ...]:
    """One space-free piece (the longest) of each stem, and none that contains another:
    text that holds none of them holds no stem's pieces, so no stem."""
    longest = {max(stem.split(" "), key=len) for stem in stems}
    return tuple(sorted(p for p in longest if not any(q != p and q in p for q in longest)))


class IntentGate:
    """Matches explicit memory requests; build it with extra phrases to extend a language."""

    def __init__(self, phrases: Mapping[str, tuple[Iterable[str], bool]] = DEFAULT_PHRASES) -> None:
        self._phrases = {lang: (tuple(words), spaced) for lang, (words, spaced) in phrases.items()}
        self._pattern = self._compile()
        # The last text asked about and the answer. A host asks about a turn's text and the
        # library asks again about the same string object: the second answer is free.
        self._last: tuple[str, bool] = ("", False)

    def extended(self, language: str, phrases: Iterable[str], spaced: bool = True) -> IntentGate:
        """A new gate with ``phrases`` added to ``language``."""
        merged = dict(self._phrases)
        old, old_spaced = merged.get(language, ((), spaced))
        merged[language] = ((*old, *phrases), old_spaced)
        return IntentGate(merged)

    def matches(self, text: str) -> bool:
        """True when ``text`` asks, in so many words, to be remembered."""
        last = self._last
        if text is last[0]:
            return last[1]
        # Most messages are ASCII, and for ASCII text without a backtick normalize() only
        # lowercases and collapses whitespace: a stem of a phrase found in the normalized
        # text has each of its words in the lowercased text. When no stem has its piece
        # there, no phrase can match, and the normalization is not needed to say so.
        if type(text) is str and text.isascii() and "`" not in text:
            lowered = text.lower()
            for piece in self._ascii_pieces:
                if piece in lowered:
                    break
            else:
                self._last = (text, False)
                return False
        answer = self._matches(text)
        self._last = (text, answer)
        return answer

    def _matches(self, text: str) -> bool:
        if not text:
            return False
        normalized = normalize(text)
        # The pattern tries every phrase at every position (tens of microseconds per
        # message); a match needs one phrase as a plain substring, and substring tests
        # rule out almost every message in a few microseconds.
        literals = self._ascii_literals if normalized.isascii() else self._literals
        # A plain loop: a generator under any() costs about as much again per turn.
        for phrase in literals:
            if phrase in normalized:
                return self._pattern.search(normalized) is not None
        return False

    def _compile(self) -> re.Pattern[str]:
        spaced: set[str] = set()
        unspaced: set[str] = set()
        for words, is_spaced in self._phrases.values():
            target = spaced if is_spaced else unspaced
            target.update(normalize(word) for word in words if normalize(word))
        # Whitespace in normalized text is single spaces, so a pattern match is always one
        # of these strings, exactly.
        self._literals = tuple(sorted(spaced | unspaced))
        # For ASCII text only ASCII phrases can occur, and a phrase that contains another
        # one adds nothing to the prefilter.
        self._ascii_literals = _stems(
            tuple(
                p
                for p in self._literals
                if p.isascii() and not any(q != p and q in p for q in spaced)
            )
        )
        self._ascii_pieces = _pieces(self._ascii_literals)
        alternatives = []
        if spaced:
            body = "|".join(
                r"\s".join(re.escape(part) for part in phrase.split(" "))
                for phrase in sorted(spaced, key=len, reverse=True)
            )
            # A word boundary that also treats apostrophes and hyphens as word characters.
            alternatives.append(rf"(?<![\w'-])(?:{body})(?![\w'-])")
        if unspaced:
            alternatives.append("|".join(map(re.escape, sorted(unspaced, key=len, reverse=True))))
        return re.compile("|".join(alternatives) or r"(?!)")
