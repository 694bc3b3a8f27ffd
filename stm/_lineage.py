"""Provenance as lineage: whose words distilled memory may hold, at a cost bounded per upgrade.

Distilled memory is written by the model from what a prompt showed it, so it may
hold the words of everyone whose words that prompt showed, and, as a rolling
summary is rewritten from itself, of everyone its earlier versions held. Instead
of a set of people per entry (which grows until it is every member of a busy
server), provenance is kept per **chain**: the successive versions of one
conversation's notes (a server channel's, per persona; a DM's), from its first
upgrade until it is cleared.

- Each upgrade writes the next **version** of its chain, and both of its keys
  (the user's and the server's) **pin** that version: :class:`Pin`.
- The chain records the **members** whose words a version's prompt showed
  *directly* (the turn's user; who triggered and who wrote the messages of the
  upgraded entries' windows; of other channels' recent messages rendered), each
  with the first version that showed them: a version holds the words of every
  member whose first version is at or below it.
- When a prompt showed another chain's notes, the chain gets an **edge** to it:
  from the version written, to the version shown. Edges are bounded per pair of
  chains (:func:`merge_edges`).

So an upgrade stores what its own prompt showed and nothing else, and a purge
resolves what it must clear by walking the edges (:class:`PurgePlanner`):

- ``complete`` follows every edge: notes written from a prompt that showed
  notes holding the person's words hold them too (a model may copy them);
- ``direct`` follows only the **own** edges, the notes' own earlier content (a
  category write that keeps fields another chain wrote): it clears every version
  whose prompt showed the person's words directly, and every later version of
  the same notes, but not notes that only copied other notes.

A purge clears, in every chain it reaches, each version from the first that may
hold the person's words: a :class:`Range`. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

__all__ = [
    "EDGES_PER_PAIR",
    "ERASURE_POLICIES",
    "Edge",
    "Erasure",
    "Lineage",
    "Pin",
    "PurgePlanner",
    "Range",
    "covers",
    "merge_edges",
]

Erasure = Literal["complete", "direct"]
ERASURE_POLICIES: tuple[str, ...] = get_args(Erasure)

# Edges kept per (child chain, parent chain, own): older ones are merged, which can only
# make a purge clear more, never less (see merge_edges).
EDGES_PER_PAIR = 4


@dataclass(frozen=True, slots=True)
class Pin:
    """A version of a chain: what an entry's distilled content was written as."""

    chain: int
    version: int


@dataclass(frozen=True, slots=True)
class Lineage:
    """What the prompt of one upgrade showed the model, as provenance needs it.

    ``direct``: everyone whose words it showed directly. ``own``: the notes' own
    earlier content it kept or showed; ``other``: other channels' notes it showed.
    Each shown note is its pin, or its scope key when its pin was not known yet (an
    upgrade not yet committed): the store then takes the key's pin at commit, which is
    the same or newer, so it errs on clearing more.
    """

    direct: frozenset[int]
    own: tuple[Pin | str, ...] = ()
    other: tuple[Pin | str, ...] = ()


@dataclass(frozen=True, slots=True)
class Edge:
    """Versions ``child_version`` and later of ``child`` were written from a prompt that
    showed ``parent`` at ``parent_version`` (or later)."""

    child: int
    parent: int
    own: bool
    parent_version: int
    child_version: int


@dataclass(frozen=True, slots=True)
class Range:
    """Every version of ``chain`` from ``from_version`` on: cleared by a purge."""

    chain: int
    from_version: int


def covers(ranges: Iterable[Range] | dict[int, int], pin: Pin | None) -> bool:
    """True when ``pin`` falls in one of ``ranges`` (a purge cleared that version)."""
    if pin is None:
        return False
    starts = ranges if isinstance(ranges, dict) else {r.chain: r.from_version for r in ranges}
    start = starts.get(pin.chain)
    return start is not None and pin.version >= start


def merge_edges(
    held: Sequence[tuple[int, int]], new: tuple[int, int], limit: int = EDGES_PER_PAIR
) -> list[tuple[int, int]]:
    """The ``(parent_version, child_version)`` edges of one pair of chains once ``new`` is
    added, at most ``limit``.

    An edge is dominated, and dropped, when another reaches the child as early from a
    parent version at least as late. Past ``limit``, the two edges of the oldest parent
    versions merge into one from the later parent version to the earlier child version:
    a purge of the parent from a version between the two then clears the child from the
    earlier version, more than it must, never less.
    """
    # From the latest parent version down (the earliest child version first among equal
    # parent versions): keep an edge only if it reaches the child earlier than every edge
    # kept from a parent version at least as late.
    edges = sorted({*held, new}, key=lambda edge: (-edge[0], edge[1]))
    kept: list[tuple[int, int]] = []
    for parent_version, child_version in edges:
        if not kept or child_version < kept[-1][1]:
            kept.append((parent_version, child_version))
    kept.reverse()
    while len(kept) > limit:
        (_, first_child), (second_parent, _) = kept[0], kept[1]
        kept[0:2] = [(second_parent, first_child)]
    return kept


@dataclass(slots=True)
class PurgePlanner:
    """Which versions of which chains a purge clears, found by following edges.

    Seeded with the chains whose members include the person (their first version
    each); the store then asks :meth:`next_parent` for a chain to look up, answers
    with its edges to children (``(child, own, parent_version, child_version)``) through
    :meth:`children`, until :meth:`next_parent` returns None. ``ranges`` is the answer.
    Each chain is looked up again only when it is reached from an earlier version.
    """

    policy: Erasure
    ranges: dict[int, int] = field(default_factory=dict)
    _todo: dict[int, int] = field(default_factory=dict)

    def seed(self, chain: int, from_version: int) -> None:
        """The person's words were shown directly to ``chain`` from ``from_version``."""
        self._reach(chain, from_version)

    def _reach(self, chain: int, from_version: int) -> None:
        held = self.ranges.get(chain)
        if held is None or from_version < held:
            self.ranges[chain] = from_version
            self._todo[chain] = from_version

    def next_parent(self) -> tuple[int, int] | None:
        """A chain whose children must be looked up, and the version it is cleared from."""
        if not self._todo:
            return None
        chain = next(iter(self._todo))
        return chain, self._todo.pop(chain)

    def children(self, parent_from: int, edges: Iterable[tuple[int, bool | int, int, int]]) -> None:
        """The edges from the chain just returned by :meth:`next_parent`, cleared from
        ``parent_from``: ``(child, own, parent_version, child_version)`` each."""
        for child, own, parent_version, child_version in edges:
            if parent_version < parent_from:
                continue  # written from a version before the person's words arrived
            if self.policy == "direct" and not own:
                continue
            self._reach(child, child_version)

    def result(self) -> list[Range]:
        """Every chain reached, with the version it is cleared from."""
        return [Range(chain, start) for chain, start in sorted(self.ranges.items())]
