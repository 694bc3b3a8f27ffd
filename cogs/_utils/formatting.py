"""Fitting text into Discord's limits: message-sized chunks and truncation."""

from __future__ import annotations

__all__ = ["MESSAGE_LIMIT", "chunk_text", "truncate"]

MESSAGE_LIMIT = 2000


def truncate(text: str, limit: int, marker: str = "…") -> str:
    """``text`` cut to at most ``limit`` characters, ending with ``marker`` when cut."""
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(marker))] + marker


def chunk_text(text: str, limit: int = MESSAGE_LIMIT) -> list[str]:
    """Split ``text`` into pieces of at most ``limit`` characters.

    Prefers to break at a newline, then at a space, so words and lines stay
    whole where they can; a single word longer than the limit is cut.
    """
    if limit < 1:
        raise ValueError("limit must be at least 1")
    chunks: list[str] = []
    rest = text
    while len(rest) > limit:
        window = rest[:limit]
        cut = window.rfind("\n")
        if cut <= 0:
            cut = window.rfind(" ")
        if cut <= 0:
            cut = limit
        chunks.append(rest[:cut].rstrip())
        rest = rest[cut:].lstrip("\n ")
    if rest.strip() or not chunks:
        chunks.append(rest)
    return [c for c in chunks if c] or [""]
