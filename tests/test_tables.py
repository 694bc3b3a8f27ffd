"""The command line's pure formats: nothing stored can drive a terminal, columns align."""

from __future__ import annotations

import unicodedata

from hypothesis import example, given
from hypothesis import strategies as st

from stm._tables import ago, human_bytes, printable, shorten, table, until


@given(st.text())
def test_printable_leaves_no_control_character(text: str) -> None:
    """Whatever a row holds, what reaches the terminal has no control or format-breaking
    character (escape sequences, line breaks, bidi controls are shown as text)."""
    shown = printable(text)
    assert shown.isprintable() or all(ch == " " or ch.isprintable() for ch in shown)
    assert not any(unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Zl", "Zp") for ch in shown)
    if text.isprintable():
        assert shown == text


cells = st.text(
    st.characters(blacklist_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp", "Mn", "Me")),
    max_size=12,
)


@given(st.lists(st.tuples(cells, cells), min_size=1, max_size=6))
def test_table_columns_start_together(rows: list[tuple[str, str]]) -> None:
    """The second column starts at the same display column on every line."""
    lines = table(["A", "B"], rows)
    for (first, second), line in zip([("A", "B"), *rows], lines, strict=True):
        assert line.startswith(first.rstrip())
        if second.strip():
            head = line[: len(line) - len(second.rstrip())]
            assert _width(head) == max(_width(r[0]) for r in [("A", "B"), *rows]) + 2


def _width(text: str) -> int:
    """Columns on a terminal: wide and full-width characters take two, non-spacing and
    enclosing marks none (they sit on the character before), everything else one."""
    return sum(
        0
        if unicodedata.category(c) in ("Mn", "Me")
        else 2
        if unicodedata.east_asian_width(c) in "WF"
        else 1
        for c in text
    )


@given(st.lists(cells, max_size=8).map("".join), st.integers(min_value=1, max_value=40))
@example("000000000⺀⺀0000000⺀⺀⺀一\U0001d16d", 28)  # a spacing mark takes a column
@example("e\u0301" * 20, 10)  # a non-spacing one does not
def test_shorten_fits(text: str, width: int) -> None:
    """A shortened cell is never wider than asked, and is the text itself when it fits."""
    cut = shorten(text, width)
    assert _width(cut) <= width
    if _width(text) <= width:
        assert cut == text
    else:
        assert cut.endswith("…") and text.startswith(cut[:-1])


def test_small_formats() -> None:
    """Sizes and durations for people."""
    assert human_bytes(812) == "812 B"
    assert human_bytes(45056) == "44.0 KiB"
    assert ago(30) == "just now" and ago(3 * 3600 + 120) == "3h 2m ago"
    assert until(-1) == "expired" and until(90000) == "in 1d 1h"


def test_a_server_url_is_shown_without_its_password() -> None:
    """Output names a PostgreSQL database without the password its URL may hold."""
    from stm.store._inspect import shown

    assert (
        shown("postgresql://bot:s3cret@db.example:5432/stm")
        == "postgresql://bot:***@db.example:5432/stm"
    )
    assert (
        shown("postgresql://bot@db/stm?password=s3cret") == "postgresql://bot@db/stm?password=***"
    )
    assert shown("postgresql://bot@db/stm?search_path=x") == "postgresql://bot@db/stm?search_path=x"
    assert shown("data/stm.sqlite3") == "data/stm.sqlite3"
