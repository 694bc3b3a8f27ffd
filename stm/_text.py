"""The character policy: what text memory may hold and render, and cleaning by it.

Everything that enters memory (captured messages and their speakers' names, edited
messages, the tool's values, category labels and descriptions, names) and everything
rendered from it passes ``strip_hidden``; ``visible`` reads the same classification, so
no character can count as invisible to one and pass the other.

Removed, because a tokenizer may decode it into text no reader sees, or because it
hides or reorders what a line says:

- the tag block (U+E0000-E007F: each tag is an invisible copy of an ASCII character),
  except inside a subdivision flag: U+1F3F4, a CLDR subdivision id in tag letters and
  digits (two letters or three digits, then one to four letters or digits), U+E007F;
- controls other than tab and the line breaks (which the callers turn into a newline or
  a space), lone surrogates, private-use and unassigned code points (noncharacters
  included), except the unassigned ones Unicode reserves for future emoji
  (U+1F000-1FAFF, U+1FC00-1FFFD), so that an emoji newer than Python's Unicode survives;
- every format character (Cf): bidi embeddings, overrides and isolates, the implicit
  marks LRM, RLM and ALM too (a model reads text in logical order, so they change
  nothing it reads, and they are invisible), zero-width space, word joiner, BOM, soft
  hyphen, the invisible math operators, interlinear annotation, the deprecated format
  characters; except those a script needs: ZWJ and ZWNJ, once, between two non-ASCII
  characters (a letter, mark, number or symbol before, a letter, number or symbol
  after: Indic and Persian text, emoji sequences; a joiner at either end, beside a
  space or an ASCII character, or in a run, joins nothing and goes), the Mongolian
  vowel separator between Mongolian letters, the Egyptian hieroglyph and Duployan
  shorthand format controls next to a sign of their script; and the prepended
  concatenation marks (U+0600-0605, U+06DD, U+070F, U+0890-0891, U+08E2, U+110BD,
  U+110CD), which are visible signs;
- a variation selector that does not directly follow a base it can modify, one per
  base: VS15/VS16 (U+FE0E/FE0F, text or emoji presentation) after a symbol, a
  punctuation mark, an ASCII digit or U+2139 (keycaps are digit, VS16, U+20E3); VS1-14
  (standardized variants) after a letter, number, punctuation mark or symbol; VS17-256
  (U+E0100-E01EF, ideographic variation sequences) after a CJK ideograph; the Mongolian
  free variation selectors after a Mongolian letter. So a run of selectors after an
  emoji (a byte per selector) cannot carry a message.

Kept: every letter, mark, number, punctuation mark, symbol and space of every script.
``visible`` calls a text blank when all it keeps are spaces, line breaks, combining
marks and blank letters (Hangul fillers, the braille blank).
"""

from __future__ import annotations

import functools
import re
import unicodedata

__all__ = [
    "LINE_BREAKS",
    "clean_message",
    "clean_name",
    "clean_value",
    "neutralize",
    "one_line",
    "quote_lines",
    "strip_hidden",
    "visible",
]

# Every character str.splitlines() ends a line at: a tokenizer or a chat template may
# read any of them as a new line, so rendered text keeps none but a plain newline.
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
_TO_NEWLINE = str.maketrans(dict.fromkeys(LINE_BREAKS[1:], "\n"))
# Rendered text: every line break a newline, a tab a space.
_RENDERED = str.maketrans(dict.fromkeys(LINE_BREAKS[1:], "\n") | {"\t": " "})
_TO_SPACE = str.maketrans(dict.fromkeys(LINE_BREAKS + "\t", " "))
# What _TO_NEWLINE and _RENDERED change: translate() looks up every character of the
# text, a search only finds the first, and most text has none.
_TRANSLATED = re.compile("[\t\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def _newlines(text: str, table: dict[int, str]) -> str:
    """``text`` with CRLF and every other line break a newline, and ``table`` applied."""
    if _TRANSLATED.search(text) is None:
        return text
    return text.replace("\r\n", "\n").translate(table)


# What each character is to the policy. _SHOWN: kept, and shows something. _BLANK:
# kept, shows nothing (spaces, line breaks, combining marks, blank letters). _CONTEXT:
# kept only where it modifies or joins its neighbours (rules below), never shown.
# _DROP: never kept.
_SHOWN, _BLANK, _CONTEXT, _DROP = 0, 1, 2, 3

_BY_CATEGORY = {
    **dict.fromkeys(("Lu", "Ll", "Lt", "Lm", "Lo", "Mc", "Nd", "Nl", "No"), _SHOWN),
    **dict.fromkeys(("Pc", "Pd", "Ps", "Pe", "Pi", "Pf", "Po"), _SHOWN),
    **dict.fromkeys(("Sm", "Sc", "Sk", "So"), _SHOWN),
    **dict.fromkeys(("Mn", "Me", "Zs", "Zl", "Zp"), _BLANK),
    **dict.fromkeys(("Cc", "Cf", "Cs", "Co", "Cn"), _DROP),
}

_ZWNJ, _ZWJ = "\u200c", "\u200d"
_PRESENTATION = "\ufe0e\ufe0f"  # VS15, VS16
_VS1_14 = frozenset(map(chr, range(0xFE00, 0xFE0E)))
_VS17_256 = frozenset(map(chr, range(0xE0100, 0xE01F0)))
_MONGOLIAN_FVS = frozenset("\u180b\u180c\u180d\u180f")
_MONGOLIAN_VS = "\u180e"
_TAGS = frozenset(map(chr, range(0xE0000, 0xE0080)))
# Format controls of a script, kept next to a character of their block: (first, last)
# of the controls -> (first, last) of the block.
_SCRIPT_FORMATS = {
    (0x13430, 0x1343F): (0x13000, 0x1345F),  # Egyptian hieroglyph format controls
    (0x1BCA0, 0x1BCA3): (0x1BC00, 0x1BCAF),  # Duployan shorthand format controls
}
# Prepended concatenation marks: format characters that show (they span the digits
# after them).
_CONCATENATION_MARKS = frozenset(
    "\u0600\u0601\u0602\u0603\u0604\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"
)
# Letters and symbols that render as blanks: Hangul fillers, the braille blank, the
# Khmer inherent vowels.
_BLANK_LETTERS = frozenset("\u115f\u1160\u3164\uffa0\u2800\u17b4\u17b5")
# Unassigned code points Unicode reserves for future emoji (Extended_Pictographic).
_EMOJI_RESERVE = ((0x1F000, 0x1FAFF), (0x1FC00, 0x1FFFD))

_SPECIAL: dict[str, int] = {
    **dict.fromkeys("\t" + LINE_BREAKS, _BLANK),
    **dict.fromkeys(_BLANK_LETTERS, _BLANK),
    **dict.fromkeys(_CONCATENATION_MARKS, _SHOWN),
    **dict.fromkeys(_ZWNJ + _ZWJ + _PRESENTATION + _MONGOLIAN_VS, _CONTEXT),
    **dict.fromkeys(_VS1_14 | _VS17_256 | _MONGOLIAN_FVS | _TAGS, _CONTEXT),
    **{
        chr(c): _CONTEXT
        for first, last in _SCRIPT_FORMATS
        for c in range(first, last + 1)
        if unicodedata.category(chr(c)) == "Cf"
    },
}

# What is kept only between two characters, so the next one is looked at too.
_NEEDS_AFTER = frozenset(
    [_ZWJ, _ZWNJ, _MONGOLIAN_VS]
    + [
        ch
        for ch, kind in _SPECIAL.items()
        if kind is _CONTEXT and "\U00013000" <= ch < "\U0001bd00"
    ]
)

# A subdivision flag (U+1F3F4, a CLDR subdivision id in tag characters, CANCEL TAG),
# else any run of tag characters: the flag is kept whole, the run removed.
_TAG_LETTER, _TAG_DIGIT = "\U000e0061-\U000e007a", "\U000e0030-\U000e0039"
_TAG = re.compile("[\U000e0000-\U000e007f]")
_TAG_RUN = re.compile(
    f"(\U0001f3f4(?:[{_TAG_LETTER}]{{2}}|[{_TAG_DIGIT}]{{3}})"
    f"[{_TAG_LETTER}{_TAG_DIGIT}]{{1,4}}\U000e007f)|[\U000e0000-\U000e007f]+"
)
# Printable characters that the policy may still remove (variation selectors are
# combining marks, so str.isprintable() lets them pass).
_SELECTORS = re.compile("[\u180b-\u180d\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef]")
_SELECTOR_SET = frozenset(_PRESENTATION) | _VS1_14 | _VS17_256 | _MONGOLIAN_FVS
# Every format character (Cf) and selector, and the rest of plane 14: all a printable
# text can hold that the policy decides on.
_FORMATS = re.compile(
    "[\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180b-\u180f"
    "\u200b-\u200f\u202a-\u202e\u2060-\u206f\ufe00-\ufe0f\ufeff\ufff9-\ufffb"
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
# The spaces and line breaks (tab, Zs, Zl, Zp and the controls str.splitlines() breaks at).
_SPACES = re.compile(
    "[\t\n\x0b\x0c\r\x1c-\x1e\x85 \xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+"
)
# ASCII characters the policy removes: controls that are neither tab nor a line break.
_ASCII_CONTROLS = bytes([*range(0x00, 0x09), *range(0x0E, 0x1C), 0x1F, 0x7F])
_ASCII_DROPPED = re.compile("[\x00-\x08\x0e-\x1b\x1f\x7f]")


def _kind(ch: str) -> int:
    kind = _SPECIAL.get(ch)
    if kind is not None:
        return kind
    category = unicodedata.category(ch)
    if category == "Cn":
        code = ord(ch)
        for first, last in _EMOJI_RESERVE:
            if first <= code <= last:
                return _SHOWN
    return _BY_CATEGORY[category]


def _mongolian(ch: str) -> bool:
    return "\u1820" <= ch <= "\u18aa"  # the Mongolian letters


def _base_of(selector: str, base: str) -> bool:
    """True when ``base`` is a character ``selector`` can modify."""
    if _kind(base) is not _SHOWN or base in _BLANK_LETTERS:
        return False  # a space, a mark, another selector, a joiner, a blank
    if selector in _PRESENTATION:
        return base in "0123456789#*\u2139" or (
            not base.isascii() and unicodedata.category(base) in ("So", "Sm", "Po", "Pd")
        )
    if selector in _VS17_256:
        return unicodedata.name(base, "").startswith(
            ("CJK UNIFIED IDEOGRAPH-", "CJK COMPATIBILITY IDEOGRAPH-")
        )
    if selector in _MONGOLIAN_FVS:
        return _mongolian(base)
    return unicodedata.category(base)[0] in "LNPS"  # VS1-14


def _joinable(ch: str, marks: bool) -> bool:
    """True when ``ch`` may stand before (``marks``: a combining mark may) or after a
    joiner: a non-ASCII letter, number or symbol that shows (an emoji newer than Python's
    Unicode included)."""
    if ch.isascii() or ch in _BLANK_LETTERS:
        return False
    category = unicodedata.category(ch)
    if category == "Cn":
        return _kind(ch) is _SHOWN
    return category[0] in ("LMNS" if marks else "LNS")


def _kept(ch: str, before: str, text: str, at: int) -> bool:
    """Whether the context character ``ch`` (at ``text[at]``) stays, after ``before``
    (the last character kept, "" at the start)."""
    if ch in _TAGS:
        return True  # what is left of the tag block after _TAG_RUN is a flag's
    if ch not in _NEEDS_AFTER:
        return _stays(ch, before, "")
    after = text[at + 1 : at + 2]
    if after and _kind(after) is _DROP:
        after = _next_kept(text, at + 1)
    return _stays(ch, before, after)


# The few (character, before, after) triples of a server's text recur: each is decided once.
@functools.lru_cache(maxsize=4096)
def _stays(ch: str, before: str, after: str) -> bool:
    """Whether the context character ``ch`` stays between ``before`` (the last character
    kept, "" at the start) and ``after`` (the next one not always removed, "" at the end;
    looked at only by joiners and separators)."""
    code = ord(ch)
    for (first, last), (start, end) in _SCRIPT_FORMATS.items():
        if first <= code <= last:  # next to a sign of its script, on either side
            return any(
                start <= ord(near) <= end and _kind(near) is _SHOWN
                for near in (before, after)
                if near
            )
    if not before:
        return False  # nothing to modify or join
    if ch in (_ZWJ, _ZWNJ):
        return _joinable(before, True) and _joinable(after, False)
    if ch == _MONGOLIAN_VS:
        return _mongolian(before) and _mongolian(after)
    return _base_of(ch, before)


def _next_kept(text: str, at: int) -> str:
    """The first character from ``text[at]`` on that is not always removed ("" if none)."""
    for ch in text[at : at + 64]:
        if _kind(ch) is not _DROP:
            return ch
    return ""


def strip_hidden(text: str) -> str:
    """``text`` as the character policy lets memory hold it (see the module docstring):
    hidden characters removed, everything else (tab and line breaks included) as it was.
    Applying it twice changes nothing more."""
    if text.isascii():
        # Deleting the controls from the bytes, in C, costs less than str.isprintable()
        # and passes a message of several lines too.
        if len(text.encode().translate(None, _ASCII_CONTROLS)) == len(text):
            return text
        return _ASCII_DROPPED.sub("", text)
    if text.isprintable() and _SELECTORS.search(text) is None:
        return text  # no control, format, private-use, unassigned or selector character
    if _TAG.search(text) is not None:
        text = _TAG_RUN.sub(lambda m: m.group(1) or "", text)
    rest = _FORMATS.sub("", text)
    if rest.isprintable() or _SPACES.sub("", rest).isprintable():
        return _strip_formats(text)
    return _strip_each(text)  # a control, surrogate, private-use or unassigned one


def _strip_formats(text: str) -> str:
    """``text``, whose every character but its format characters and selectors is
    printable or a space, by the character policy: only those need a decision."""
    out: list[str] = []
    done = 0
    before = ""
    for found in _FORMATS.finditer(text):
        at = found.start()
        if at > done:
            out.append(text[done:at])
            before = text[at - 1]
        ch = text[at]
        kind = _kind(ch)
        if kind is _SHOWN or (kind is _CONTEXT and _kept(ch, before, text, at)):
            out.append(ch)
            before = ch
        done = at + 1
    out.append(text[done:])
    return "".join(out)


def _strip_each(text: str) -> str:
    out: list[str] = []
    before = ""
    for at, ch in enumerate(text):
        # A printable character is a letter, mark, number, punctuation mark, symbol or
        # space: kept, unless a selector.
        if not ch.isprintable() or ch in _SELECTOR_SET:
            kind = _kind(ch)
            if kind is _DROP or (kind is _CONTEXT and not _kept(ch, before, text, at)):
                continue
        out.append(ch)
        before = ch
    return "".join(out)


def visible(text: str) -> bool:
    """True when ``text`` shows something: a value of only spaces, zero-width and other
    invisible characters (everything ``strip_hidden`` removes included) counts as blank."""
    if text.isascii():
        return any("!" <= ch <= "~" for ch in text)
    return any(_kind(ch) is _SHOWN and ch not in _BLANK_LETTERS for ch in text)


def clean_value(text: str, limit: int) -> str:
    """``text`` by the character policy, every line break a newline; stripped; cut to
    ``limit``."""
    if not text.isprintable():
        text = _newlines(text, _TO_NEWLINE)
    cleaned = strip_hidden(text).strip()
    if len(cleaned) > limit:
        # A cut may split a flag or a joined sequence: what is left of it goes too.
        cleaned = strip_hidden(cleaned[:limit]).rstrip()
    return cleaned


def clean_message(text: str, limit: int) -> str:
    """What memory holds of a message's text: cut to ``limit``, then by the character
    policy (so a cut cannot leave half a flag). Line breaks stay as they were."""
    if len(text) > limit:
        text = text[:limit]
    if text.isascii() and len(text.encode().translate(None, _ASCII_CONTROLS)) == len(text):
        return text  # strip_hidden's first test, without the call: most messages pass it
    return strip_hidden(text)


def clean_name(text: str, limit: int) -> str:
    """A name as one line: line breaks and tabs become spaces; by the character policy;
    stripped and cut to ``limit``."""
    if (
        len(text) <= limit
        and text.isprintable()
        and (text.isascii() or not _SELECTORS.search(text))
    ):
        return text  # every line break, control and format character is unprintable
    return clean_value(text.replace("\r\n", " ").translate(_TO_SPACE), limit)


_MENTION = re.compile(r"<(@[!&]?|#)(\d+)>")
_MENTION_NAMES = {"@": "@user-", "@!": "@user-", "@&": "@role-", "#": "#channel-"}
_BROADCAST = re.compile(r"@(everyone|here)", re.IGNORECASE)
# Square brackets and every character that NFKC folds into one (fullwidth, vertical
# presentation forms): a model reads those as brackets too.
_BRACKETS = str.maketrans(
    dict.fromkeys("[\u27e6\uff3b\ufe47", "(") | dict.fromkeys("]\u27e7\uff3d\ufe48", ")")
)
_BRACKET = re.compile("[\\[\\]\u27e6\u27e7\uff3b\uff3d\ufe47\ufe48]")
# Any printable character that neutralize() would change or the policy might remove:
# most text has none.
_UNSAFE = re.compile(
    "[\\[\\]\u27e6\u27e7\uff3b\uff3d\ufe47\ufe48<@"
    "\u180b-\u180d\u180f\ufe00-\ufe0f\U000e0100-\U000e01ef]"
)


def _ascii_safe(text: str) -> bool:
    # The ASCII characters of _UNSAFE. Four substring tests take a fraction of the
    # regex's time on a few hundred characters, and most messages are ASCII.
    return "[" not in text and "]" not in text and "<" not in text and "@" not in text


def neutralize(text: str) -> str:
    """Make text safe inside a memory frame: by the character policy, every line break a
    newline and every tab a space, no brackets that could close or forge a frame, no
    mention that could ping anyone."""
    if text.isprintable():
        if _ascii_safe(text) if text.isascii() else _UNSAFE.search(text) is None:
            return text  # nothing below would change it
        text = strip_hidden(text)
    else:
        text = strip_hidden(_newlines(text, _RENDERED))
    if _BRACKET.search(text) is not None:
        text = text.translate(_BRACKETS)
    if "<" in text:
        text = _MENTION.sub(lambda m: _MENTION_NAMES[m.group(1)] + m.group(2), text)
    if "@" in text:
        # A fullwidth at sign: it reads as one, and pings no one.
        text = _BROADCAST.sub("\uff20\\1", text)
    return text


def one_line(text: str) -> str:
    """``neutralize(text)`` with every line break turned into a space."""
    return neutralize(text).replace("\n", " ")


def quote_lines(text: str, prefix: str = "> ") -> list[str]:
    """Neutralized ``text`` as quoted lines: no line of it can stand on its own."""
    return [prefix + line for line in neutralize(text).splitlines() or [""]]
