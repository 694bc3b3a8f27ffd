"""Messages deleted or edited on Discord: what they change in this process's cache.

A captured message may carry its Discord message id (``DialogueMessage.message_id``).
When Discord says a message was deleted, it leaves every window of its channel that
holds it; when it says a message was edited, the held text is replaced by the new
one (cleaned and bounded as a capture would), or the message leaves the window when
the new text cannot be read. Either way the bot's replies whose prompt showed the
message (their sources name it, ``window.Sources``) leave every window: they may
quote it. One definition for both origins: an event this process
received, and another process's change that the follower applies (which names the
message but not its new text, so there an edit removes the message).

The deletion is recorded in the deletion log with the keys it changed, so a turn in
flight whose prompt showed the channel's recent messages is overtaken (its upgrade
refused, its capture left out), as after a channel clear. And a message id deleted
here is remembered for a while (``RecentlyForgotten``): a turn captured after its
message was deleted (the delete came while the model was answering) leaves that
message out, and one captured after an edit holds the edited text.

Distilled notes are not cleared: the library records whose words a version of notes
may hold, not which messages; an entry whose window held the message and that holds
notes is marked so that its next turn nudges the model to upgrade them (see
docs/data.md, "What Discord events remove"). Pure: no I/O.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from ._cache import Entry, MemoryCache
from ._readthrough import ReadThrough
from ._window import StoredMessage
from .store._base import ForgetMessages

__all__ = [
    "Forgotten",
    "RecentlyForgotten",
    "edit_message",
    "forget_messages",
    "nudge_upgrade",
]

# How long a process remembers deleted and edited message ids for the captures of turns
# still being answered (far longer than any generation), and how many at most: a bound on
# memory that a busy bot's deletes do not reach in that time (16 bytes of id and time and
# the dict's slot each, about 6 MB at most).
REMEMBER_SECONDS = 900.0
REMEMBERED = 65_536


@dataclass(slots=True)
class Forgotten:
    """What a delete or edit changed here: the keys whose windows changed, how many
    messages left or changed, and the entries holding notes that should be rewritten."""

    keys: list[str] = field(default_factory=list)
    messages: int = 0
    stale_notes: list[Entry] = field(default_factory=list)


class RecentlyForgotten:
    """Message ids deleted (None) or edited (their new text) in the last
    ``REMEMBER_SECONDS``, at most ``REMEMBERED`` of them, oldest forgotten first."""

    def __init__(self) -> None:
        # Read on every capture (an empty dict is false without a call).
        self.ids: OrderedDict[int, str | None] = OrderedDict()
        self._ids = self.ids
        self._noted: OrderedDict[int, float] = OrderedDict()

    def __bool__(self) -> bool:
        return bool(self._ids)

    def note(self, message_id: int, content: str | None) -> None:
        """``message_id`` was deleted (``content`` None) or now reads ``content``."""
        now = time.monotonic()
        self._ids[message_id] = content
        self._ids.move_to_end(message_id)
        self._noted[message_id] = now
        self._noted.move_to_end(message_id)
        noted, ids, stale = self._noted, self._ids, now - REMEMBER_SECONDS
        while noted:
            oldest, at = next(iter(noted.items()))
            if at >= stale and len(noted) <= REMEMBERED:
                break
            del noted[oldest]
            ids.pop(oldest, None)

    def applied(self, messages: tuple[StoredMessage, ...], limit: int) -> tuple[StoredMessage, ...]:
        """A turn's messages without those deleted since, with the text of those edited."""
        ids = self._ids
        out = []
        for message in messages:
            message_id = message[6]
            if message_id is None or message_id not in ids:
                out.append(message)
                continue
            content = ids[message_id]
            if content is not None:
                out.append(message._replace(content=content[:limit]))
        return tuple(out)

    def get(self, message_id: int) -> tuple[bool, str | None]:
        """(known, the new text or None when deleted) for ``message_id``."""
        if message_id in self._ids:
            return True, self._ids[message_id]
        return False, None


def _windows_showing(cache: MemoryCache, channel_id: int, ids: frozenset[int]) -> list[Entry]:
    """The entries whose window may hold one of these messages of the channel, or a reply
    whose prompt showed one: the channel's, and those of the entries holding sourced replies
    whose sources name one (a message is only ever in its own channel's windows, so the
    others are looked at for their replies' sources alone, without reading their text)."""
    entries = [e for key in cache.keys_of_channel(channel_id) if (e := cache.peek(key))]
    held = {e.key for e in entries}
    entries += [e for e in cache.sourced() if e.key not in held and e.messages.quotes(ids)]
    return entries


def _changed(cache: MemoryCache, reads: ReadThrough, channel_id: int, keys: list[str]) -> None:
    if keys:
        reads.deletions.record(ForgetMessages(channel_id, ()), frozenset(keys))


def forget_messages(
    cache: MemoryCache, reads: ReadThrough, channel_id: int, message_ids: Iterable[int]
) -> Forgotten:
    """Remove the messages with these Discord ids from every window of the channel, and
    the replies whose prompt showed one of them from every window."""
    ids = frozenset(message_ids)
    done = Forgotten()
    if not ids:
        return done
    for entry in _windows_showing(cache, channel_id, ids):
        key = entry.key
        kept = entry.messages.without_messages(ids)
        if kept is entry.messages:
            continue
        done.messages += len(entry.messages) - len(kept)
        entry.messages = kept
        done.keys.append(key)
        if entry.distilled:
            done.stale_notes.append(entry)
    _changed(cache, reads, channel_id, done.keys)
    return done


def edit_message(
    cache: MemoryCache, reads: ReadThrough, channel_id: int, message_id: int, content: str
) -> Forgotten:
    """Replace the text of the message with this Discord id in every window of the
    channel by ``content`` (cleaned and bounded already, not empty), and remove the replies
    whose prompt showed it (they may quote the old text) from every window."""
    done = Forgotten()
    for entry in _windows_showing(cache, channel_id, frozenset([message_id])):
        key = entry.key
        changed = entry.messages.edited(message_id, content)
        if changed is entry.messages:
            continue
        done.messages += 1
        entry.messages = changed
        done.keys.append(key)
        if entry.distilled:
            done.stale_notes.append(entry)
    _changed(cache, reads, channel_id, done.keys)
    return done


def held_as(cache: MemoryCache, channel_id: int, message_id: int, content: str) -> bool:
    """True when a window of the channel here holds the message with this very text: an
    edit to it changes nothing (Discord sends updates with unchanged content)."""
    for key in cache.keys_of_channel(channel_id):
        entry = cache.peek(key)
        if entry is None or message_id not in entry.messages.message_ids():
            continue
        return any(m.message_id == message_id and m.content == content for m in entry.messages)
    return False


def nudge_upgrade(done: Forgotten, cadence: Callable[[int | None], int]) -> list[Entry]:
    """Mark the entries whose notes were written while their window held a message that
    is gone or changed now: their next turn nudges the model to upgrade the notes
    (``cadence`` gives a server's cadence). Returns them (to write behind)."""
    marked = []
    for entry in done.stale_notes:
        if entry.deleted:
            continue
        due = cadence(entry.server_id)
        if entry.turns_since_refresh < due:
            entry.turns_since_refresh = due
        marked.append(entry)
    return marked
