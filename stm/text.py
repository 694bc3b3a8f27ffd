"""Cleaning untrusted text: what the model writes and what memory renders."""

from __future__ import annotations

import re
import unicodedata

__all__ = [
    "LINE_BREAKS",
    "clean_name",
    "clean_value",
    "neutralize",
    "one_line",
    "quote_lines",
    "visible",
]

# Bidirectional overrides and isolates can make a rendered line read differently
# from what it is; they carry no meaning in a summary.
_BIDI = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_KEEP = frozenset("\n\t")
# Every character str.splitlines() ends a line at: a tokenizer or a chat template may
# read any of them as a new line, so rendered text keeps none but a plain newline.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TO_NEWLINE = str.maketrans(dict.fromkeys(LINE_BREAKS[1:], "\n"))
_TO_SPACE = str.maketrans(dict.fromkeys(LINE_BREAKS + "\t", " "))


def clean_value(text: str, limit: int) -> str:
    """Drop control characters, lone surrogates and bidi overrides; strip; cut to ``limit``."""
    if text.isprintable():
        cleaned = text
    else:
        cleaned = "".join(
            ch
            for ch in text
            if ch in _KEEP or (unicodedata.category(ch) not in ("Cc", "Cs") and ch not in _BIDI)
        )
    cleaned = cleaned.replace("\r\n", "\n").strip()
    if len(cleaned) > limit:
        cleaned = cleaned[:limit].rstrip()
    return cleaned


# What shows nothing on its own: controls, format characters (zero-width space and
# joiners, word joiner, byte-order mark, soft hyphen, tags), surrogates, separators and
# spaces, and combining marks (variation selectors included) without a letter to sit on.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zs", "Zl", "Zp", "Mn", "Me"})
# Letters and symbols that render as blanks: Hangul fillers, the braille blank, the
# Khmer inherent vowels.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")


def visible(text: str) -> bool:
    """True when ``text`` shows something: a value of only spaces, zero-width and other
    invisible characters counts as blank."""
    if text.isascii():
        return any("!" <= ch <= "~" for ch in text)
    return any(
        ch not in _BLANK_LETTERS and unicodedata.category(ch) not in _INVISIBLE_CATEGORIES
        for ch in text
    )


def clean_name(text: str, limit: int) -> str:
    """A name as one line: line breaks become spaces; controls, lone surrogates and bidi
    overrides go; stripped and cut to ``limit``."""
    if len(text) <= limit and text.isprintable():
        return text  # every line break and control is unprintable: nothing to clean
    return clean_value(text.replace("\r\n", " ").translate(_TO_SPACE), limit)


_MENTION = re.compile(r"<(@[!&]?|#)(\d+)>")
_MENTION_NAMES = {"@": "@user-", "@!": "@user-", "@&": "@role-", "#": "#channel-"}
_BROADCAST = re.compile(r"@(everyone|here)", re.IGNORECASE)
# Square brackets and every character that NFKC folds into one (fullwidth, vertical
# presentation forms): a model reads those as brackets too.
_BRACKETS = str.maketrans(
    dict.fromkeys("[\u27e6\uff3b\ufe47", "(") | dict.fromkeys("]\u27e7\uff3d\ufe48", ")")
)
# Any character that neutralize() would change, besides controls: most text has none.
_UNSAFE = re.compile(r"[\[\]\u27e6\u27e7\uff3b\uff3d\ufe47\ufe48<@]")


def _ascii_safe(text: str) -> bool:
    # The ASCII characters of _UNSAFE. Four substring tests take a fraction of the
    # regex's time on a few hundred characters, and most messages are ASCII.
    return "[" not in text and "]" not in text and "<" not in text and "@" not in text


def neutralize(text: str) -> str:
    """Make text safe inside a memory frame: no brackets that could close or forge one,
    no mention that could ping anyone, no invisible controls."""
    if text.isprintable() and (
        _ascii_safe(text) if text.isascii() else _UNSAFE.search(text) is None
    ):
        return text  # nothing below would change it
    if not text.isprintable():
        text = text.replace("\r\n", "\n").translate(_TO_NEWLINE)
        text = "".join(
            ch
            for ch in text
            if ch == "\n" or (unicodedata.category(ch) not in ("Cc", "Cs") and ch not in _BIDI)
        )
    text = text.translate(_BRACKETS)
    if "<" in text:
        text = _MENTION.sub(lambda m: _MENTION_NAMES[m.group(1)] + m.group(2), text)
    if "@" in text:
        text = _BROADCAST.sub("@\u200b\\1", text)
    return text


def one_line(text: str) -> str:
    """``neutralize(text)`` with every line break turned into a space."""
    return neutralize(text).replace("\n", " ")


def quote_lines(text: str, prefix: str = "> ") -> list[str]:
    """Neutralized ``text`` as quoted lines: no line of it can stand on its own."""
    return [prefix + line for line in neutralize(text).splitlines() or [""]]
