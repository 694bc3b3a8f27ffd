"""What a channel clear or a user purge removes from this process's cache.

One definition for both origins: a clear or purge made here, and one another
process made that the follower applies. Either way the deletion is recorded in
the deletion log, so that reads in flight and upgrades whose turn began before
it can tell they were overtaken. A purge is applied in two steps: at once, what
the cache knows without the store (the user's own entries, their messages in
every window); then, once the store has planned which versions of which notes
may hold their words (its ranges), the entries that pin those versions. Until
then the purge is pending and the notes it may reach are not shown
(``ReadThrough.hidden``). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable

from ._cache import Entry, MemoryCache
from ._deletions import Purge
from ._lineage import Erasure, Range
from ._readthrough import ReadThrough
from ._writebehind import read_again
from ._writer import Writer
from .store._base import DeleteChannel, ForgetServer, PurgeUser

__all__ = [
    "clear_channel",
    "clear_ranges",
    "clear_server",
    "drop_everything",
    "drop_key",
    "drop_quoting_replies",
    "drop_unplanned",
    "own_entry",
    "purge_user",
]


def clear_channel(cache: MemoryCache, reads: ReadThrough, writer: Writer, channel_id: int) -> int:
    """Drop every scope and persona of the channel, crude messages included; returns keys."""
    keys = cache.keys_of_channel(channel_id)
    for key in keys:
        entry = cache.remove(key)
        if entry is not None:
            entry.deleted = True
            reads.read_group_again(entry.group)
    writer.drop_dirty(keys)
    reads.deletions.record(DeleteChannel(channel_id), frozenset(keys))
    return len(keys)


def clear_server(
    cache: MemoryCache, reads: ReadThrough, writer: Writer, server_id: int
) -> list[int]:
    """Drop every entry of the server, channel by channel as ``clear_channel`` drops them
    (rows or not: recent messages and entries not written behind yet go too), and log the
    server forgotten, which overtakes its turns begun before; returns the channels held."""
    held = sorted({entry.channel_id for entry in cache if entry.server_id == server_id})
    keys: set[str] = set()
    for channel_id in held:
        keys.update(cache.keys_of_channel(channel_id))
        clear_channel(cache, reads, writer, channel_id)
    reads.deletions.record(ForgetServer(server_id), frozenset(keys))
    return held


def own_entry(entry: Entry, user_id: int, server_id: int | None) -> bool:
    """Whether a purge of ``user_id`` (within ``server_id`` when given) deletes ``entry``
    whole: the user's own (user scope), as the store deletes their own rows."""
    return (
        entry.scope == "user"
        and entry.user_id == user_id
        and (server_id is None or entry.server_id == server_id)
    )


def purge_user(
    cache: MemoryCache,
    reads: ReadThrough,
    writer: Writer,
    user_id: int,
    server_id: int | None,
    erasure: Erasure = "complete",
) -> Purge:
    """Drop the user's own entries, the crude messages of turns they triggered or wrote,
    and the replies whose prompt showed their words (within ``server_id`` when given); the
    purge stays pending until ``clear_ranges``."""
    touched: list[str] = []
    keys = cache.keys_of_user(user_id)
    for key in keys:
        entry = cache.peek(key)
        if entry is None or (server_id is not None and entry.server_id != server_id):
            continue
        touched.append(key)
        if own_entry(entry, user_id, server_id):
            cache.remove(key)
            entry.deleted = True
            writer.drop_dirty([key])
            continue
        kept = entry.messages.without(user_id)
        if len(kept) != len(entry.messages):
            entry.messages = kept
    # Replies quoting them in windows where they have no words of their own: a walk of the
    # entries holding sourced replies, not an index by every user a reply quoted.
    indexed = set(keys)
    for entry in cache.sourced(server_id):
        if entry.key not in indexed:
            kept = entry.messages.without(user_id)
            if kept is not entry.messages:
                entry.messages = kept
                touched.append(entry.key)
    # The keys it changed: a turn in one of them was overtaken (see ``ReadThrough.overtaken``).
    return reads.deletions.record_purge(PurgeUser(user_id, server_id, erasure), touched)


def clear_ranges(cache: MemoryCache, purge: Purge, ranges: Iterable[Range]) -> int:
    """The store planned ``purge``: drop the distilled content of every entry that pins a
    version in its ranges, and under ``complete`` the replies whose prompt showed such a
    version (they may quote it); returns how many entries had notes cleared."""
    ranges = tuple(ranges)
    cleared = 0
    for found in ranges:
        for key in cache.keys_of_chain(found.chain):
            entry = cache.peek(key)
            pin = None if entry is None else entry.pin
            if entry is not None and pin is not None and pin.version >= found.from_version:
                cache.drop_distilled(entry)
                purge.keys.add(key)
                cleared += 1
    if ranges and purge.deletion.erasure == "complete":
        drop_quoting_replies(cache, purge, ranges)
    purge.resolve(ranges)
    return cleared


def drop_quoting_replies(cache: MemoryCache, purge: Purge, ranges: Iterable[Range]) -> int:
    """Drop from every window the replies whose prompt showed a version of notes in
    ``ranges``; returns how many. Looks only through the entries whose window holds a
    reply carrying sources (at most the cache's keys, never the users)."""
    starts: dict[int, int] = {}
    for found in ranges:
        held = starts.get(found.chain)
        starts[found.chain] = found.from_version if held is None else min(held, found.from_version)
    dropped = 0
    for entry in cache.sourced():
        window = entry.messages
        kept = window.without_pins(starts)
        if kept is not window:
            dropped += len(window) - len(kept)
            entry.messages = kept
            purge.keys.add(entry.key)
    return dropped


def drop_unplanned(cache: MemoryCache, purge: Purge) -> int:
    """The store has not planned ``purge`` in time (it is failing, or far behind): drop the
    distilled content of every entry it may reach, to be read again from its row once the
    store answers (the read is queued behind the purge, so it sees what the purge left).
    Returns how many. Costs a walk of the cache, on this rare path only."""
    dropped = 0
    for entry in cache:
        if (entry.summary or entry.categories) and purge.may_reach(entry.server_id):
            cache.drop_distilled(entry)
            read_again(entry)
            purge.keys.add(entry.key)
            dropped += 1
    return dropped


def drop_key(cache: MemoryCache, reads: ReadThrough, writer: Writer, key: str) -> bool:
    """Drop one entry whose row another process deleted for inactivity."""
    entry = cache.remove(key)
    writer.drop_dirty([key])
    if entry is None:
        return False
    entry.deleted = True
    reads.read_group_again(entry.group)
    return True


def drop_everything(cache: MemoryCache, reads: ReadThrough, writer: Writer) -> int:
    """Drop the whole cache: what another process deleted can no longer be told apart."""
    keys = [entry.key for entry in cache]
    for key in keys:
        drop_key(cache, reads, writer, key)
    reads.rows_left_cache()
    # Every turn in flight began before what was missed: refuse its upgrade.
    reads.deletions.overtake_all()
    return len(keys)
