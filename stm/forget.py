"""What a channel clear or a user purge removes from this process's cache.

One definition for both origins: a clear or purge made here, and one another
process made that the follower applies. Either way the deletion is recorded in
the deletion log, so that reads in flight and upgrades whose turn began before
it can tell they were overtaken. Pure: no I/O.
"""

from __future__ import annotations

from .cache import MemoryCache
from .readthrough import ReadThrough
from .store.base import DeleteChannel, PurgeUser
from .writer import Writer

__all__ = ["forget_channel", "forget_everything", "forget_key", "forget_user"]


def forget_channel(cache: MemoryCache, reads: ReadThrough, writer: Writer, channel_id: int) -> int:
    """Drop every scope and persona of the channel, crude messages included; returns keys."""
    keys = cache.keys_of_channel(channel_id)
    for key in keys:
        entry = cache.remove(key)
        if entry is not None:
            entry.deleted = True
            reads.forget_group(entry.group)
    writer.forget_dirty(keys)
    reads.deletions.record(DeleteChannel(channel_id))
    return len(keys)


def forget_user(
    cache: MemoryCache, reads: ReadThrough, writer: Writer, user_id: int, server_id: int | None
) -> int:
    """Drop the user's own entries, the crude messages of turns they triggered or wrote,
    and the distilled content they contributed to (within ``server_id`` when given)."""
    touched: list[str] = []
    for key in cache.keys_of_user(user_id):
        entry = cache.peek(key)
        if entry is None or (server_id is not None and entry.server_id != server_id):
            continue
        touched.append(key)
        if entry.scope == "user" and entry.user_id == user_id:
            cache.remove(key)
            entry.deleted = True
            writer.forget_dirty([key])
            continue
        kept = entry.messages.without(user_id)
        if len(kept) != len(entry.messages):
            entry.messages = kept
        if user_id in entry.contributors:
            entry.summary, entry.categories, entry.contributors = None, {}, frozenset()
            entry.version += 1
    # The keys it changed: a turn in one of them was overtaken (see ``ReadThrough.overtaken``).
    reads.deletions.record(PurgeUser(user_id, server_id), frozenset(touched))
    return len(touched)


def forget_key(cache: MemoryCache, reads: ReadThrough, writer: Writer, key: str) -> bool:
    """Drop one entry whose row another process deleted for inactivity."""
    entry = cache.remove(key)
    writer.forget_dirty([key])
    if entry is None:
        return False
    entry.deleted = True
    reads.forget_group(entry.group)
    return True


def forget_everything(cache: MemoryCache, reads: ReadThrough, writer: Writer) -> int:
    """Drop the whole cache: what another process deleted can no longer be told apart."""
    keys = [entry.key for entry in cache]
    for key in keys:
        forget_key(cache, reads, writer, key)
    reads.rows_left_cache()
    # Every turn in flight began before what was missed: refuse its upgrade.
    reads.deletions.forget_all()
    return len(keys)
