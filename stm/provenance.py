"""What a turn's prompt showed from memory: what its upgrade records, which deletions overtake it.

A summary is a distillation of everything the model saw: the words of everyone
the prompt showed directly (recorded as members of the version it writes) and
the notes it showed (recorded as edges to their versions, ``lineage.py``). A
deletion of any of it during the turn means the turn's summary and capture could
bring the deleted words back. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from .lineage import Pin

__all__ = ["Note", "Said", "Shown"]

# A distilled block shown: its scope key, its pin when known (None while an upgrade of it
# is being committed), and whether it is the notes' own (the same-channel block).
Note = tuple[str, Pin | None, bool]


class Said(Protocol):
    """A window of crude messages, as far as provenance needs it."""

    def users(self, last: int | None = None) -> set[int]:
        """Turn users and authors of the newest ``last`` messages (all when None)."""
        ...


@dataclass(slots=True)
class Shown:
    """The channels whose memory a turn's prompt showed (its own included), and the users
    whose words it showed (its own user included).

    Crude messages shown are kept as the windows shown (a window never changes) and
    read only when an upgrade or a deletion needs them: a busy channel's window may
    have moved on by then, and the turn path stays cheap.
    """

    channels: set[int] = field(default_factory=set)
    _users: set[int] = field(default_factory=set)
    _windows: list[tuple[Said, int]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

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
        """The versions of notes shown; a note shown before its pin was known takes the
        key's pin in ``current`` (the same or newer), when given."""
        for key, pin, _ in self.notes:
            if pin is None and current is not None:
                pin = current.get(key)
            if pin is not None:
                yield pin

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

    @property
    def users(self) -> set[int]:
        """Every user whose words were shown."""
        if self._windows:
            users = self._users
            for window, last in self._windows:
                users |= window.users(last)
            self._windows = []
        return self._users
