"""Note history as people read it: a version's text and what changed between two versions,
for ``/memory show``, ``python -m stm history`` and hosts (pure).

What changed is told by sentence (and, in category mode, by category): the model rewrites
notes whole, so a line diff would show one changed paragraph, and a word diff reads as
noise. Removed sentences are what a restore would bring back."""

from __future__ import annotations

import difflib
import re

from .store._base import NoteVersion

__all__ = ["changes", "sentences", "version_text"]

# A sentence ends at . ! ? or a line break (kept with the sentence).
_SENTENCE = re.compile(r"[^.!?\n]+[.!?]*")


def version_text(version: NoteVersion) -> str:
    """The notes of ``version`` as one text: the summary, or one ``label: value`` line per
    category."""
    if version.summary is not None:
        return version.summary
    return "\n".join(f"{label}: {value}" for label, value in version.categories.items())


def sentences(text: str) -> list[str]:
    """``text`` cut into its sentences, stripped, blanks left out."""
    return [part.strip() for part in _SENTENCE.findall(text) if part.strip()]


def _units(version: NoteVersion) -> list[str]:
    if version.summary is not None:
        return sentences(version.summary)
    return [f"{label}: {part}" for label, value in version.categories.items()
            for part in sentences(value)]  # fmt: skip


def changes(newer: NoteVersion, older: NoteVersion) -> list[str]:
    """What ``newer`` changed of ``older``: ``+ sentence`` for each it added, ``- sentence``
    for each it dropped, in the order they appear; empty when the same."""
    before, after = _units(older), _units(newer)
    found: list[str] = []
    matcher = difflib.SequenceMatcher(a=before, b=after, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        found.extend(f"- {unit}" for unit in before[i1:i2])
        found.extend(f"+ {unit}" for unit in after[j1:j2])
    return found
