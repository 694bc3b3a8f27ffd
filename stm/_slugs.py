"""The slug rule that turns a category label into a tool property name."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

__all__ = ["MAX_SLUG_LENGTH", "slugify", "slugs_for"]

MAX_SLUG_LENGTH = 48
_NON_WORD = re.compile(r"\W+")
_NOT_ALLOWED = re.compile(r"[^a-z0-9_]")
_UNDERSCORES = re.compile(r"_+")


def slugify(label: str) -> str:
    """Lowercase; non-word runs to ``_``; only ``[a-z0-9_]``; ``c_`` before a digit; 48 max.

    Accents are folded first (``Café`` -> ``cafe``) so Latin labels keep their letters.
    """
    folded = unicodedata.normalize("NFKD", label)
    folded = "".join(ch for ch in folded if not unicodedata.combining(ch))
    slug = _NON_WORD.sub("_", folded.lower())
    slug = _NOT_ALLOWED.sub("", slug)
    slug = _UNDERSCORES.sub("_", slug).strip("_")
    if slug[:1].isdigit():
        slug = "c_" + slug
    slug = slug[:MAX_SLUG_LENGTH].rstrip("_")
    return slug or "field"


def slugs_for(labels: Iterable[str]) -> list[str]:
    """Slugs of ``labels`` in order, collisions suffixed ``_2``, ``_3``, ..."""
    seen: set[str] = set()
    result = []
    for label in labels:
        base = slugify(label)
        slug, n = base, 1
        while slug in seen:
            n += 1
            suffix = f"_{n}"
            slug = base[: MAX_SLUG_LENGTH - len(suffix)] + suffix
        seen.add(slug)
        result.append(slug)
    return result
