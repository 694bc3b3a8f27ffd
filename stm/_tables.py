"""Aligned text tables and the small formats the operator command line prints (pure)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence
from datetime import UTC, datetime

__all__ = ["ago", "human_bytes", "iso", "printable", "shorten", "table", "until"]


def printable(text: str) -> str:
    """``text`` safe to write to a terminal: controls (escape sequences among them) and
    line breaks are shown as visible marks, so stored text cannot drive the terminal."""
    if text.isprintable():
        return text
    out = []
    for ch in text:
        if ch == "\n":
            out.append(" ⏎ ")
        elif ch.isprintable():
            out.append(ch)
        else:
            out.append(f"\\u{ord(ch):04x}")
    return "".join(out)


def shorten(text: str, width: int) -> str:
    """``text`` cut to ``width`` columns, with an ellipsis when cut."""
    if width <= 0:
        return ""
    if _width(text) <= width:
        return text
    out, used = [], 0
    for ch in text:
        w = _char_width(ch)
        if used + w > width - 1:
            break
        out.append(ch)
        used += w
    return "".join(out) + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """The lines of a table whose columns are aligned (wide characters counted twice)."""
    widths = [_width(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], _width(cell))
    lines = []
    for row in (headers, *rows):
        cells = [cell + " " * (widths[i] - _width(cell)) for i, cell in enumerate(row)]
        lines.append("  ".join(cells).rstrip())
    return lines


def human_bytes(size: int) -> str:
    """A byte count for people: ``812 B``, ``24.0 KiB``, ``3.1 MiB``."""
    value = float(size)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


def iso(timestamp: float) -> str:
    """Epoch seconds as an ISO 8601 UTC time, to the second."""
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(seconds: float) -> str:
    """A past duration: ``just now``, ``5m ago``, ``3h 2m ago``, ``2d 4h ago``."""
    if seconds < 60:
        return "just now"
    return _span(seconds) + " ago"


def until(seconds: float) -> str:
    """A duration until something happens: ``in 5m``, or ``expired`` when it is past."""
    if seconds <= 0:
        return "expired"
    return "in " + (_span(seconds) if seconds >= 60 else "<1m")


def _span(seconds: float) -> str:
    minutes = int(seconds // 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes}m"
    return f"{minutes}m"


def _char_width(ch: str) -> int:
    # Terminals draw non-spacing and enclosing marks over the character before them; a
    # spacing mark (category Mc) takes a column of its own, whatever its combining class.
    if unicodedata.category(ch) in ("Mn", "Me"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def _width(text: str) -> int:
    if text.isascii():
        return len(text)
    return sum(_char_width(ch) for ch in text)
