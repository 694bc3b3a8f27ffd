"""The crude window of one scope entry: its newest messages, oldest first.

A window is immutable: appending makes a new one. It has two forms with one
interface:

- **open**, while its entry is active: a tuple of ``StoredMessage``, which a
  capture extends and a render reads at no cost;
- **packed**, once its entry has gone quiet (the cache packs the windows of all
  but its most recently active entries): every message's content in one UTF-8
  ``bytes``, a fixed-size record per message (role, whether it has an author,
  author id, timestamp, the user whose turn it was, its length, its speaker as
  an index into the window's distinct speaker names), and those names. As a
  tuple of tuples each message cost about 200 bytes besides its text (the tuple,
  its timestamp float, the text's own object header); packed it costs 31 bytes.
  A window one of whose messages carries its Discord message id packs every
  message with an 8-byte id as well (39 bytes), so windows without ids cost
  nothing more. A packed window is opened again when its entry is next captured.

``first`` numbers a window's oldest message in the life of its entry, so a
message keeps its position as the window moves on (rendering reuses the lines
of positions it has rendered). Removing messages (a purge) numbers the kept
ones anew, past every position used before, so a position never stands for two
different messages; so does removing or editing a message by its Discord id
(``without_messages``, ``edited``).

A reply of the bot may carry its **sources** (:class:`Sources`): whose words,
which Discord messages and which note versions the prompt that produced it
showed, frozen when it was captured. The reply may quote any of it, so a purge
removes it with the person's own messages (:meth:`Window.without`), a delete or
edit on Discord with the message (:meth:`Window.without_messages`), and an
upgrade counts its sources as shown (:meth:`Window.quoted`). :meth:`Window.users`
stays the window's own words (turn users and authors): what the cache indexes by
user, so that the index never grows with what replies quoted. Most messages have
none; a packed window keeps the few it has in one tuple beside its records.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence
from typing import NamedTuple, overload

from ._lineage import Pin, covers

__all__ = ["EMPTY", "Sources", "StoredMessage", "Window", "words_of"]


class Sources(NamedTuple):
    """What the prompt of a reply showed besides its own turn: the users whose words it
    showed (other than the turn's user, whose words the reply is already counted with),
    the Discord messages among them, and the versions of notes it showed; each sorted.
    Bounded by what one prompt shows (see ``provenance.Shown.sources``). Immutable; one
    object is shared by the copies of a turn in its keys' windows."""

    users: tuple[int, ...]
    message_ids: tuple[int, ...] = ()
    pins: tuple[Pin, ...] = ()


class StoredMessage(NamedTuple):
    """A crude message as the cache keeps it; ``turn_user_id`` is who triggered its turn,
    ``message_id`` the Discord message it was (None when the host did not say)."""

    role: str
    content: str
    speaker_name: str
    author_id: int | None
    timestamp: float
    turn_user_id: int
    message_id: int | None = None
    sources: Sources | None = None


def words_of(message: StoredMessage) -> Iterator[int]:
    """The users whose words ``message`` may hold: who triggered its turn, who wrote it, and
    its sources' users (a reply). What a purge removes."""
    yield message[5]
    if message[3] is not None:
        yield message[3]
    sources = message[7]
    if sources is not None:
        yield from sources.users


# flags (bit 0: the assistant's; bit 1: has an author), author id, timestamp, turn user,
# content length in UTF-8 bytes, the speaker's name (an index into the window's distinct
# names: most windows have two or three). Ids are below 2**63 (``stm._ids``): signed 64-bit
# fits, and a window holds at most 1,000 messages, so 2**16 names do.
_RECORD = struct.Struct("<BqdqiH")
_SIZE = _RECORD.size
# The same with the Discord message id after it, for windows where any message has one:
# bit 3 of every record's flags says the window is in this form, bit 2 that the message
# has an id.
_RECORD_IDS = struct.Struct("<BqdqiHq")
_SIZE_IDS = _RECORD_IDS.size
_ASSISTANT = 1
_AUTHORED = 2
_HAS_ID = 4
_ID_FORM = 8
# Bit 4: the message has sources, the next of the window's ``_sources`` in order.
_SOURCED = 16
_new = object.__new__


class Window(Sequence[StoredMessage]):
    """An immutable window of crude messages, open or packed (see the module's docstring)."""

    __slots__ = ("_items", "_meta", "_names", "_said", "_sources", "_text", "first")

    _items: tuple[StoredMessage, ...] | None
    _meta: bytes
    _text: bytes
    _names: tuple[str, ...]
    # Packed only: the sources of the messages flagged ``_SOURCED``, in their order.
    _sources: tuple[Sources, ...]
    # What ``said`` read last: how many messages, and what they hold (unset until read).
    _said: tuple[int, tuple[set[int], set[int], list[Sources]]]

    def __init__(self, messages: Iterable[StoredMessage] = (), first: int = 0) -> None:
        self._items = messages if type(messages) is tuple else tuple(messages)
        self.first = first

    # -- reading ------------------------------------------------------------
    def __len__(self) -> int:
        items = self._items
        if items is not None:
            return len(items)
        meta = self._meta
        return len(meta) // (_SIZE_IDS if meta and meta[0] & _ID_FORM else _SIZE)

    def __bool__(self) -> bool:
        items = self._items
        return bool(items) if items is not None else bool(self._meta)

    @property
    def packed_form(self) -> bool:
        """True when the window is packed."""
        return self._items is None

    def _record(self) -> tuple[struct.Struct, int]:
        """The record format of this packed window, and its size."""
        meta = self._meta
        if meta and meta[0] & _ID_FORM:
            return _RECORD_IDS, _SIZE_IDS
        return _RECORD, _SIZE

    def _unpack(self, start: int, stop: int) -> list[StoredMessage]:
        meta, text, names = self._meta, self._text, self._names
        record, size_of = self._record()
        records = record.iter_unpack(meta[start * size_of : stop * size_of])
        # Offsets are counted from the nearer end: reads are mostly of the newest messages.
        if start > len(meta) // size_of - stop:
            tail = record.iter_unpack(meta[start * size_of :])
            offset = len(text) - sum(fields[4] for fields in tail)
        else:
            offset = sum(fields[4] for fields in record.iter_unpack(meta[: start * size_of]))
        out = []
        new = tuple.__new__
        held = self._sources
        sourced = 0
        if held:
            before = record.iter_unpack(meta[: start * size_of])
            sourced = sum(1 for fields in before if fields[0] & _SOURCED)
        for fields in records:
            flags, author, timestamp, turn_user, size, name = fields[:6]
            end = offset + size
            sources = None
            if flags & _SOURCED:
                sources = held[sourced]
                sourced += 1
            out.append(
                new(
                    StoredMessage,
                    (
                        "assistant" if flags & _ASSISTANT else "user",
                        text[offset:end].decode("utf-8", "surrogatepass"),
                        names[name],
                        author if flags & _AUTHORED else None,
                        timestamp,
                        turn_user,
                        fields[6] if flags & _HAS_ID else None,
                        sources,
                    ),
                )
            )
            offset = end
        return out

    def _all(self) -> tuple[StoredMessage, ...]:
        items = self._items
        return items if items is not None else tuple(self._unpack(0, len(self)))

    @overload
    def __getitem__(self, index: int) -> StoredMessage: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[StoredMessage]: ...

    def __getitem__(self, index: int | slice) -> StoredMessage | Sequence[StoredMessage]:
        items = self._items
        if items is not None:
            return items[index]
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return self._all()[index]
            return self._unpack(start, stop) if start < stop else []
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("window index out of range")
        return self._unpack(index, index + 1)[0]

    def __iter__(self) -> Iterator[StoredMessage]:
        return iter(self._all())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Window):
            return self._all() == other._all()
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return list(self) == list(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __repr__(self) -> str:
        return f"Window({list(self)!r}, first={self.first})"

    def users(self) -> set[int]:
        """Who has words of their own in the window: the user of each message's turn and each
        message's author. Not what replies quoted (``quoted``): this is what the cache
        indexes by user."""
        items = self._items
        users: set[int] = set()
        if items is not None:
            for message in items:
                users.add(message[5])
                if message[3] is not None:
                    users.add(message[3])
            return users
        record, _ = self._record()
        for fields in record.iter_unpack(self._meta):
            users.add(fields[3])
            if fields[0] & _AUTHORED:
                users.add(fields[1])
        return users

    def said(self, last: int) -> tuple[set[int], set[int], list[Sources]]:
        """What the newest ``last`` messages hold, in one pass: their users (as
        :meth:`users`), their Discord message ids, and their replies' sources. Read once
        per window (it never changes) and count: a window is shown to the prompts of
        several turns elsewhere before its channel speaks again. Callers must not change
        what it returns."""
        try:
            held = self._said
        except AttributeError:  # not read yet: the slot is unset
            pass
        else:
            if held[0] == last:
                return held[1]
        found = self._read_said(last)
        self._said = (last, found)
        return found

    def _read_said(self, last: int) -> tuple[set[int], set[int], list[Sources]]:
        items = self._items
        users: set[int] = set()
        ids: set[int] = set()
        quoted: list[Sources] = []
        if items is None:
            # Packed: the records alone, no text decoded.
            record, size_of = self._record()
            meta, held = self._meta, self._sources
            n = len(meta) // size_of
            start = (n - last if last < n else 0) * size_of
            k = sum(1 for f in record.iter_unpack(meta[:start]) if f[0] & _SOURCED) if held else 0
            for fields in record.iter_unpack(meta[start:]):
                flags = fields[0]
                users.add(fields[3])
                if flags & _AUTHORED:
                    users.add(fields[1])
                if flags & _HAS_ID:
                    ids.add(fields[6])
                if flags & _SOURCED:
                    quoted.append(held[k])
                    k += 1
            return users, ids, quoted
        if last < len(items):
            items = items[len(items) - last :]
        for message in items:
            users.add(message[5])
            if message[3] is not None:
                users.add(message[3])
            if message[6] is not None:
                ids.add(message[6])
            if message[7] is not None:
                quoted.append(message[7])
        return users, ids, quoted

    def quoted(self) -> list[Sources]:
        """The sources of the replies among the window's messages, oldest first."""
        return list(self._all_sources())

    def pins(self) -> set[Pin]:
        """The versions of notes the prompts of the window's replies showed: the replies may
        quote them."""
        return {pin for sources in self._all_sources() for pin in sources.pins}

    @property
    def has_sources(self) -> bool:
        """True when a reply in the window carries sources."""
        items = self._items
        if items is None:
            return bool(self._sources)
        return any(m[7] is not None for m in items)

    def _all_sources(self) -> Iterable[Sources]:
        """Every reply's sources, read without decoding any text: what tells a removal that
        it has nothing to do in this window before it reads the messages."""
        items = self._items
        if items is None:
            return self._sources
        return [m[7] for m in items if m[7] is not None]

    def quotes(self, message_ids: set[int] | frozenset[int]) -> bool:
        """True when a reply in the window was written from a prompt that showed one of
        these Discord messages (read without decoding any text)."""
        return any(not message_ids.isdisjoint(s.message_ids) for s in self._all_sources())

    def message_ids(self) -> set[int]:
        """The Discord message ids the window's messages carry."""
        items = self._items
        if items is not None:
            return {m[6] for m in items if m[6] is not None}
        record, _ = self._record()
        if record is _RECORD:
            return set()
        return {f[6] for f in record.iter_unpack(self._meta) if f[0] & _HAS_ID}

    # -- making new windows -------------------------------------------------
    def appended(
        self, messages: tuple[StoredMessage, ...], limit: int, newest: int
    ) -> tuple[Window, list[int] | None]:
        """This window, open, with ``messages`` appended and only its newest ``limit`` kept;
        and the users other than ``newest`` (the turn's user) who triggered or wrote a
        message that scrolled out (None when none did)."""
        items = self._items
        window = (items if items is not None else self._all()) + messages
        excess = len(window) - limit
        made = _new(Window)
        if excess <= 0:
            made._items, made.first = window, self.first
            return made, None
        made._items, made.first = window[excess:], self.first + excess
        # Most windows hold one user: when the first and last messages that scroll out are
        # the newest user's, and a turn's two messages are all that scroll out, no one goes.
        # (Fields by index: 3 is the author, 5 the turn's user; this runs on every capture.)
        first, last = window[0], window[excess - 1]
        if (
            excess <= 2
            and first[5] == newest
            and last[5] == newest
            and (first[3] is None or first[3] == newest)
            and (last[3] is None or last[3] == newest)
        ):
            return made, None
        gone = [m[5] for m in window[:excess] if m[5] != newest]
        gone += [m[3] for m in window[:excess] if m[3] is not None and m[3] != newest]
        return made, gone or None

    def packed(self) -> Window:
        """This window in its packed form (itself if it is packed already)."""
        items = self._items
        if items is None:
            return self
        meta: list[bytes] = []
        texts: list[bytes] = []
        names: dict[str, int] = {}
        sourced: list[Sources] = []
        with_ids = any(m[6] is not None for m in items)
        pack = _RECORD_IDS.pack if with_ids else _RECORD.pack
        for role, content, speaker, author, timestamp, turn_user, message_id, sources in items:
            data = content.encode("utf-8", "surrogatepass")
            flags = _ASSISTANT if role == "assistant" else 0
            if author is not None:
                flags |= _AUTHORED
            if sources is not None:
                flags |= _SOURCED
                sourced.append(sources)
            name = names.setdefault(speaker, len(names))
            if with_ids:
                flags |= _ID_FORM if message_id is None else _ID_FORM | _HAS_ID
                fields = (flags, author or 0, timestamp, turn_user, len(data), name)
                meta.append(pack(*fields, message_id or 0))
            else:
                meta.append(pack(flags, author or 0, timestamp, turn_user, len(data), name))
            texts.append(data)
        made = _new(Window)
        made._items = None
        made._meta = b"".join(meta)
        made._text = b"".join(texts)
        made._names = tuple(names)
        made._sources = tuple(sourced) if sourced else ()
        made.first = self.first
        return made

    def __add__(self, other: Iterable[StoredMessage]) -> Window:
        return Window(self._all() + tuple(other), self.first)

    def without(self, user_id: int) -> Window:
        """The window without the messages that may hold ``user_id``'s words (``words_of``:
        their turns, their messages, and replies whose prompt showed their words), in the
        same form; the same window when it has none. The kept messages are numbered anew,
        past every position this window's entry has used."""
        if user_id not in self.users() and not any(
            user_id in sources.users for sources in self._all_sources()
        ):
            return self
        held = self._all()
        kept = tuple(m for m in held if user_id not in words_of(m))
        return self._kept(held, kept)

    def without_pins(self, ranges: dict[int, int]) -> Window:
        """The window without the replies whose prompt showed a version of notes in
        ``ranges`` (chain -> first version cleared by a purge), in the same form; the same
        window when it has none."""
        if not any(covers(ranges, p) for sources in self._all_sources() for p in sources.pins):
            return self
        held = self._all()
        kept = tuple(
            m for m in held if m[7] is None or not any(covers(ranges, p) for p in m[7].pins)
        )
        return self._kept(held, kept)

    def _kept(self, held: tuple[StoredMessage, ...], kept: tuple[StoredMessage, ...]) -> Window:
        """The window of ``kept``, some of ``held``, in this one's form and numbered anew;
        this window itself when nothing was dropped."""
        if len(kept) == len(held):
            return self
        made = Window(kept, self.first + len(held) + 1)
        return made.packed() if self._items is None else made

    def without_messages(self, message_ids: set[int] | frozenset[int]) -> Window:
        """The window without the messages whose Discord id is in ``message_ids``, and the
        replies whose prompt showed one of them, in the same form; the same window when it
        holds none of them. Kept messages are numbered anew."""
        if message_ids.isdisjoint(self.message_ids()) and not self.quotes(message_ids):
            return self
        held = self._all()
        kept = tuple(
            m
            for m in held
            if (m[6] is None or m[6] not in message_ids)
            and (m[7] is None or message_ids.isdisjoint(m[7].message_ids))
        )
        return self._kept(held, kept)

    def edited(self, message_id: int, content: str) -> Window:
        """The window with the content of the message whose Discord id is ``message_id``
        replaced by ``content`` (already cleaned and bounded), in the same form; the same
        window when it does not hold it. The replies whose prompt showed the message leave
        (they may quote its old text). Messages are numbered anew, so that no line rendered
        from the old text is reused."""
        if message_id not in self.message_ids() and not self.quotes({message_id}):
            return self
        held = self._all()
        changed = tuple(
            m._replace(content=content) if m[6] == message_id else m
            for m in held
            if m[7] is None or message_id not in m[7].message_ids
        )
        if changed == held:
            return self
        made = Window(changed, self.first + len(held) + 1)
        return made.packed() if self._items is None else made


EMPTY = Window()
