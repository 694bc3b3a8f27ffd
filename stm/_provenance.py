"""What a turn's prompt showed from memory: what its upgrade records, what its replies
carry, which deletions overtake it.

A summary is a distillation of everything the model saw: the words of everyone
the prompt showed directly (recorded as members of the version it writes) and
the notes it showed (recorded as edges to their versions, ``_lineage.py``). A
reply of the bot is written from the same prompt, so it carries the same record
(:class:`~stm._window.Sources`): a purge or a Discord delete reaches it as it
reaches the words it may quote. A deletion of any of it during the turn means the
turn's summary and capture could bring the deleted words back. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from ._lineage import Erasure, Pin
from ._window import Sources, StoredMessage

__all__ = ["SOURCES_BOUND", "TOO_WIDE", "Note", "Said", "Shown", "with_sources"]

# A distilled block shown: its scope key, its pin when known (None while an upgrade of it
# is being committed), and whether it is the notes' own (the same-channel block).
Note = tuple[str, Pin | None, bool]

# The most users, or versions of notes, one reply's sources name under ``complete``.
# Under ``direct`` a reply names only what its own prompt showed, which the settings
# bound (other channels shown, recent messages each). Under ``complete`` it names
# also what the replies its prompt showed had named, which in a server whose channels
# keep quoting each other could grow without end: a reply past the bound is not
# remembered (``with_sources``), so that a purge never meets a reply whose sources were
# cut short, and no record grows with a server's users.
SOURCES_BOUND: Final = 64


def _pin_order(pin: Pin) -> tuple[int, int]:
    return pin.chain, pin.version


class _TooWide:
    """The sources of a reply that would name more than ``SOURCES_BOUND``."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "TOO_WIDE"


TOO_WIDE: Final = _TooWide()


class Said(Protocol):
    """A window of crude messages, as far as provenance needs it."""

    def said(self, last: int) -> tuple[set[int], set[int], list[Sources]]:
        """The turn users and authors of the newest ``last`` messages, their Discord
        message ids, and the sources of the replies among them."""
        ...


@dataclass(slots=True)
class Shown:
    """The channels whose memory a turn's prompt showed (its own included), and the users
    whose words it showed (its own user included).

    Crude messages shown are kept as the windows shown (a window never changes) and
    read only when an upgrade, a capture of a reply or a deletion needs them: a busy
    channel's window may have moved on by then, and the turn path stays cheap. A reply
    among them counts with its sources: its users as shown, its notes as notes shown
    (``window_pins``), so what is written from it is treated as if its prompt had
    shown them.
    """

    channels: set[int] = field(default_factory=set)
    _users: set[int] = field(default_factory=set)
    _windows: list[tuple[Said, int]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)
    # Read from the windows (``_read_windows``): the Discord messages shown, and the
    # sources of the replies shown, merged into what they had been shown (their users,
    # their notes) only when an upgrade or a deletion asks (``_read_replies``).
    _message_ids: set[int] = field(default_factory=set)
    _replies: list[Sources] = field(default_factory=list)
    _quoted_users: set[int] = field(default_factory=set)
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
        yield from self._note_pins(current)
        yield from self.window_pins

    def _note_pins(self, current: Mapping[str, Pin | None] | None) -> Iterable[Pin]:
        for key, pin, _ in self.notes:
            if pin is None and current is not None:
                pin = current.get(key)
            if pin is not None:
                yield pin

    @property
    def window_pins(self) -> set[Pin]:
        """The versions of notes that the prompts of the replies shown showed."""
        self._read_replies()
        return self._window_pins

    def sources(
        self,
        user_id: int,
        erasure: Erasure,
        authors: Iterable[int] = (),
        current: Mapping[str, Pin | None] | None = None,
    ) -> Sources | _TooWide | None:
        """What a reply written from this prompt may quote, besides its own turn's user
        ``user_id``: the users whose words were shown (the turn's other ``authors`` among
        them), the Discord messages shown, and, under ``complete``, the notes shown
        (``current`` as for :meth:`pins`) and what the replies shown carried. None when
        that is nothing; ``TOO_WIDE`` past ``SOURCES_BOUND``."""
        self._read_windows()
        users = self._users.union(authors) if authors else set(self._users)
        pins: set[Pin] = set()
        if erasure == "complete":
            # A note shown matters to a reply only where a purge follows it to the reply:
            # under ``complete``; ``direct`` clears only what showed the words directly.
            self._read_replies()
            users |= self._quoted_users
            pins.update(self._note_pins(current))
            pins |= self._window_pins
        users.discard(user_id)
        ids = self._message_ids
        if not users and not pins and not ids:
            return None
        if erasure == "complete" and (len(users) > SOURCES_BOUND or len(pins) > SOURCES_BOUND):
            return TOO_WIDE
        ordered: tuple[Pin, ...] = tuple(sorted(pins, key=_pin_order)) if pins else ()
        return tuple.__new__(Sources, (tuple(sorted(users)), tuple(sorted(ids)), ordered))

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
        self._message_ids |= other._message_ids
        self._replies += other._replies
        self._quoted_users |= other._quoted_users
        self._window_pins |= other._window_pins

    @property
    def users(self) -> set[int]:
        """Every user whose words were shown: directly, or through a reply shown."""
        self._read_replies()
        return self._users | self._quoted_users if self._quoted_users else self._users

    def _read_windows(self) -> None:
        """Credit the windows shown, once: their users, their message ids, and their
        replies' sources."""
        if self._windows:
            users, ids, replies = self._users, self._message_ids, self._replies
            for window, last in self._windows:
                said, said_ids, quoted = window.said(last)
                users |= said
                ids |= said_ids
                replies += quoted
            self._windows = []

    def _read_replies(self) -> None:
        """Credit what the replies shown had been shown, once."""
        self._read_windows()
        if self._replies:
            quoted, pins = self._quoted_users, self._window_pins
            for sources in self._replies:
                quoted.update(sources.users)
                if sources.pins:
                    pins.update(sources.pins)
            self._replies = []


def with_sources(
    messages: tuple[StoredMessage, ...],
    shown: Shown,
    user_id: int,
    erasure: Erasure,
    current: Callable[[Shown], Mapping[str, Pin | None]],
    previous: Sources | None = None,
) -> tuple[tuple[StoredMessage, ...], Sources | _TooWide | None]:
    """A turn's messages as they enter a window, the one way they do: each reply of the bot
    carrying what the turn's prompt showed (``Shown.sources``, with the authors of the
    turn's own messages other than the bot's; ``current`` gives the pins of notes shown
    before theirs was known), and that record (None when there is nothing to carry). A
    user's message needs none: its author and its turn's user are its provenance. Replies
    whose sources are ``TOO_WIDE`` are left out. A record equal to ``previous`` (the last
    one made) is that one: a busy channel's turns often showed the same, and its window
    then holds one record, not one a turn."""
    if not any(m[0] == "assistant" for m in messages):
        return messages, None
    authors = [m[3] for m in messages if m[0] != "assistant" and m[3] is not None]
    current_pins = current(shown) if shown.notes and erasure == "complete" else None
    sources = shown.sources(user_id, erasure, authors, current_pins)
    if sources is None:
        return messages, None
    if sources is TOO_WIDE:
        return tuple([m for m in messages if m[0] != "assistant"]), TOO_WIDE
    assert isinstance(sources, Sources)
    if previous == sources:
        sources = previous
    new = tuple.__new__  # NamedTuple._replace costs a dict and a call per message
    sourced = tuple(
        [new(StoredMessage, (*m[:7], sources)) if m[0] == "assistant" else m for m in messages]
    )
    return sourced, sources
