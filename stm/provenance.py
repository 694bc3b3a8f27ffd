"""What a turn's prompt showed from memory: what its upgrade records, which deletions overtake it.

A summary is a distillation of everything the model saw: the words of everyone
the prompt showed directly (recorded as members of the version it writes) and
the notes it showed (recorded as edges to their versions, ``lineage.py``). A
deletion of any of it during the turn means the turn's summary and capture could
bring the deleted words back. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .lineage import Pin
from .window import Sources, StoredMessage

__all__ = ["Note", "Said", "Shown", "with_sources"]

# A distilled block shown: its scope key, its pin when known (None while an upgrade of it
# is being committed), and whether it is the notes' own (the same-channel block).
Note = tuple[str, Pin | None, bool]


class Said(Protocol):
    """A window of crude messages, as far as provenance needs it."""

    def users(self, last: int | None = None) -> set[int]:
        """Turn users and authors of the newest ``last`` messages (all when None), and the
        sources' users of the replies among them."""
        ...

    def pins(self, last: int | None = None) -> set[Pin]:
        """The notes the prompts of the replies among the newest ``last`` messages showed."""
        ...


@dataclass(slots=True)
class Shown:
    """The channels whose memory a turn's prompt showed (its own included), and the users
    whose words it showed (its own user included).

    Crude messages shown are kept as the windows shown (a window never changes) and
    read only when an upgrade, a capture or a deletion needs them: a busy channel's
    window may have moved on by then, and the turn path stays cheap. A reply among them
    counts with its sources: its users as shown directly, its notes as notes shown
    (``window_pins``), so what is written from it is treated as if its prompt had shown
    them.
    """

    channels: set[int] = field(default_factory=set)
    _users: set[int] = field(default_factory=set)
    _windows: list[tuple[Said, int]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    _window_pins: set[Pin] = field(default_factory=set)

    @classmethod
    def own(cls, user_id: int, channel_id: int) -> Shown:
        """What any turn shows the model: its own channel and its user's words."""
        return cls({channel_id}, {user_id})

    def add_users(self, users: Sequence[int] | frozenset[int] | set[int]) -> None:
        """Credit users whose words were shown directly."""
        self._users.update(users)

    def add_note(self, key: str, pin: Pin | None, own: bool) -> None:
        """A distilled block was shown: the notes under ``key``, at ``pin``."""
        self.notes.append((key, pin, own))

    def pins(self, current: Mapping[str, Pin | None] | None = None) -> Iterable[Pin]:
        """The versions of notes shown, by a block or through a reply shown; a note shown
        before its pin was known takes the key's pin in ``current`` (the same or newer),
        when given."""
        for key, pin, _ in self.notes:
            if pin is None and current is not None:
                pin = current.get(key)
            if pin is not None:
                yield pin
        yield from self.window_pins

    @property
    def window_pins(self) -> set[Pin]:
        """The versions of notes that the prompts of the replies shown showed."""
        self._read_windows()
        return self._window_pins

    def sources(
        self,
        user_id: int,
        authors: Iterable[int] = (),
        current: Mapping[str, Pin | None] | None = None,
    ) -> Sources | None:
        """What a reply written from this prompt may quote, besides its own turn's user
        ``user_id``: the users whose words were shown (the turn's other ``authors`` among
        them) and the notes shown (``current`` as for :meth:`pins`); None when that is
        nothing."""
        users = self.users | set(authors)
        users.discard(user_id)
        shown = set(self.pins(current))
        pins = tuple(sorted(shown, key=lambda pin: (pin.chain, pin.version)))
        if not users and not pins:
            return None
        return Sources(frozenset(users), pins)

    def add_window(self, window: Said, last: int) -> None:
        """Credit the turn users and authors of the newest ``last`` messages of ``window``,
        which were shown."""
        self._windows.append((window, last))

    def add(self, other: Shown) -> None:
        """Also what ``other`` showed."""
        self.channels |= other.channels
        self._users |= other._users
        self._windows += other._windows
        self.notes += other.notes
        self._window_pins |= other._window_pins

    @property
    def users(self) -> set[int]:
        """Every user whose words were shown."""
        self._read_windows()
        return self._users

    def _read_windows(self) -> None:
        """Credit the windows shown, once: their users, and their replies' sources."""
        if self._windows:
            users, pins = self._users, self._window_pins
            for window, last in self._windows:
                users |= window.users(last)
                pins |= window.pins(last)
            self._windows = []


def with_sources(
    messages: tuple[StoredMessage, ...],
    shown: Shown,
    user_id: int,
    current: Callable[[Shown], Mapping[str, Pin | None]],
    previous: Callable[[], Sources | None] = lambda: None,
) -> tuple[tuple[StoredMessage, ...], Sources | None]:
    """A turn's messages as they enter a window, the one way they do: each reply of the bot
    carrying what the turn's prompt showed (``Shown.sources``, with the authors of the
    turn's own messages other than the bot's; ``current`` gives the pins of notes shown
    before theirs was known), and that record (None when there is nothing to carry). A
    user's message needs none: its author and its turn's user are its provenance. A record
    equal to ``previous`` (the channel's last reply's) is that one: a busy channel's
    turns often showed the same, and its window then holds one record, not one a turn."""
    if not any(m[0] == "assistant" for m in messages):
        return messages, None
    authors = [m[3] for m in messages if m[0] != "assistant" and m[3] is not None]
    sources = shown.sources(user_id, authors, current(shown) if shown.notes else None)
    if sources is None:
        return messages, None
    before = previous()
    if before == sources:
        sources = before
    sourced = tuple([m._replace(sources=sources) if m[0] == "assistant" else m for m in messages])
    return sourced, sources
