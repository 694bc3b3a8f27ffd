"""Following the change feed: what other processes committed, applied to this process's cache.

Several processes may share one database, each with its own cache. Every change
another process must honour is in the store's change feed (``store/_base.py``).
The follower reads the feed in the background, in position order, and applies
each change that another process made:

- an upgrade: the key's distilled memory is dropped at once and its row read
  again (the crude messages this process holds stay: they exist only here); a key
  not held here whose server's channels this process recalls is read in, so notes
  written elsewhere are recalled in the server's other channels here too;
- a channel clear, a server forgotten, a user purge: the same as the local ones
  (``_drops.py``), crude messages held only by this process included (a server's
  channels that have no rows too), and recorded in the deletion log, so reads in
  flight and turns that began earlier are overtaken exactly as by a local delete; a
  purge's ranges are read with it (``Store.purge_ranges``), so this cache drops the
  same notes the store cleared;
- settings and opt-outs: reloaded; a janitor's deletion: the entry is dropped;
- messages deleted or edited on Discord (``_messages.py``): they leave this
  process's windows (an edit's new text is not in the feed).

It reads when woken (SQLite's ``data_version`` moved, a PostgreSQL NOTIFY) and
at least every quarter of the coherence bound, so a lost wake-up costs at most
that. When it has not been able to read the feed for longer than the bound (the
database unreachable) or it fell behind the feed's retention, it drops the
whole cache: what it might still show could have been deleted elsewhere.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import Any

from ._cache import GroupKey, MemoryCache, group_of
from ._deletions import Purge
from ._drops import (
    clear_channel,
    clear_ranges,
    clear_server,
    drop_everything,
    drop_key,
    purge_user,
)
from ._keys import parse_key
from ._lineage import Erasure
from ._messages import RecentlyForgotten, forget_messages, nudge_upgrade
from ._models import TurnContext
from ._readthrough import ReadThrough
from ._settings import SettingsBook
from ._writer import Writer
from .store._base import Change, RestoreNotes, Store

__all__ = ["Follower"]

log = logging.getLogger("stm")

# How many times per coherence bound the feed is read when nothing wakes the follower.
READS_PER_BOUND = 4


class Follower:
    """Applies other processes' changes to this process's cache within ``coherence_seconds``."""

    def __init__(
        self,
        store: Store,
        cache: MemoryCache,
        reads: ReadThrough,
        settings: SettingsBook,
        writer: Writer,
        spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]],
        *,
        coherence_seconds: float,
        erasure: Erasure = "complete",
        forgotten: RecentlyForgotten,
    ) -> None:
        self.store = store
        self.cache = cache
        self.reads = reads
        self.settings = settings
        self._writer = writer
        self._spawn = spawn
        self.coherence_seconds = coherence_seconds
        # The erasure policy of the processes sharing the store (one configuration): what
        # another process's purge removes from windows here besides its ranges' notes.
        self.erasure: Erasure = erasure
        # The feed position whose changes (and every earlier one) the cache reflects.
        self.position = 0
        # When the newest complete read of the feed began: the cache reflects every
        # change committed before it.
        self.current_at = time.monotonic()
        self.applied = 0
        self.dropped_caches = 0
        self._failing = False
        # One read of the feed at a time: two interleaved would apply changes twice and
        # could move ``position`` back to where the slower began.
        self._reading = asyncio.Lock()
        # Purges applied to the cache whose ranges could not be read yet, by position.
        self._unplanned: dict[int, Purge] = {}
        # Keys another process upgraded that this one does not hold but whose server's
        # channels it recalls: read in together, once per page of the feed.
        self._adopting: dict[str, GroupKey] = {}
        # Message ids deleted or edited on Discord lately, shared with the memory's captures.
        self.forgotten = forgotten

    async def start(self) -> None:
        """Take the feed's position; call before the cache serves anything."""
        self.position = await self.store.current_position()
        self.current_at = time.monotonic()

    def lag_seconds(self) -> float:
        """How far behind the feed this cache may be: the time since the newest complete
        read of the feed began. Every change committed before then has been applied."""
        return max(0.0, time.monotonic() - self.current_at)

    def mark_turn_start(self, ctx: TurnContext) -> None:
        """Remember the position this turn's view is current with (once per turn): its
        upgrade is refused if a delete after it touched what the prompt showed."""
        if ctx._feed_position is None:
            ctx._feed_position = self.position

    async def catch_up(self) -> int:
        """Read and apply every change committed so far; returns how many were applied. A
        call made while another reads waits for it, then reads what came after."""
        async with self._reading:
            return await self._catch_up()

    async def _catch_up(self) -> int:
        started = time.monotonic()
        applied = 0
        await self._planned()
        while True:
            page = await self.store.read_changes(self.position)
            if page.fell_behind:
                self._drop_everything("it fell behind the change feed's retention")
            if any(change.origin != self.store.origin for change in page.changes):
                # The keys of rows the others deleted go with them, not at this store's
                # next transaction (any change of another process may be a delete).
                await self.store.forget_keys()
            for change in page.changes:
                if change.origin != self.store.origin:
                    if change.kind == "purge_user" and change.user_id is not None:
                        await self._purge(change)
                    else:
                        self._apply(change)
                    applied += 1
                # Applied: a read that fails later in the page starts after it.
                self.position = change.position
            if self._adopting:
                adopting, self._adopting = self._adopting, {}
                self._spawn(self.reads.adopt(adopting), f"stm-adopt {len(adopting)} keys")
            self.position = page.next_after
            if not page.more:
                break
        self.current_at = started
        self.applied += applied
        return applied

    async def run(self) -> None:
        """Follow the feed until cancelled."""
        interval = self.coherence_seconds / READS_PER_BOUND
        while True:
            try:
                await self.catch_up()
                if self._failing:
                    self._failing = False
                    log.warning("short-term memory follows the change feed again")
            except Exception as exc:
                if not self._failing:
                    self._failing = True
                    log.warning("short-term memory cannot read the change feed: %s", exc)
                # Only a feed that cannot be read counts, not a slow read on a busy
                # machine: a slow read still brings every change.
                if time.monotonic() - self.current_at > self.coherence_seconds:
                    self._drop_everything(
                        f"the change feed could not be read for {self.coherence_seconds:g} s "
                        "(STM_COHERENCE_SECONDS)"
                    )
                    self.current_at = time.monotonic()
            try:
                if await self.store.wait_for_change(interval):
                    # Another connection committed: the "every row is cached" shortcut
                    # taken at opening no longer holds.
                    self.reads.rows_left_cache()
            except Exception:
                await asyncio.sleep(interval)

    # -- applying one change --------------------------------------------------------------
    async def _purge(self, change: Change) -> None:
        """Another process's purge: what the cache knows at once, then the notes in its
        ranges (pending, so not shown, until they are read)."""
        assert change.user_id is not None
        self.reads.rows_left_cache()
        purge = self._unplanned.pop(change.position, None)
        if purge is None:
            purge = purge_user(
                self.cache,
                self.reads,
                self._writer,
                change.user_id,
                change.server_id,
                self.erasure,
            )
            purge.position = change.position
        self._unplanned[change.position] = purge
        await self._planned()

    async def _planned(self) -> None:
        """Apply the ranges of other processes' purges as soon as their plans are complete
        (a purge of a wide reach is planned over several transactions); until then each
        stays pending, and what it may reach is not shown. A read that fails leaves them so,
        and the feed is read again from the change that failed."""
        for position, purge in list(self._unplanned.items()):
            ranges = await self.store.purge_ranges(position)
            if ranges is not None:
                del self._unplanned[position]
                clear_ranges(self.cache, purge, ranges)

    def _apply(self, change: Change) -> None:
        self.reads.rows_left_cache()
        writer = self._writer
        match change.kind:
            case "clear_channel" if change.channel_id is not None:
                clear_channel(self.cache, self.reads, writer, change.channel_id)
            case "forget_server" if change.server_id is not None:
                # Its channels held here without rows, which no clear_channel named.
                clear_server(self.cache, self.reads, writer, change.server_id)
            case "upgrade" if change.key is not None:
                self._replaced(change.key)
            case "restore" if change.key is not None:
                # Notes brought back from their history: turns here that write the key and
                # began before it are overtaken, and the row is read again.
                self.reads.deletions.record(
                    RestoreNotes(change.key, change.version or 0), frozenset((change.key,))
                )
                self._replaced(change.key)
            case "expire" if change.key is not None:
                drop_key(self.cache, self.reads, writer, change.key)
            case "delete_messages" | "edit_messages" if change.channel_id is not None:
                # Deleted, or edited (the feed never holds the new text): gone from windows.
                ids = change.message_ids
                for message_id in ids:
                    self.forgotten.note(message_id, None)
                done = forget_messages(self.cache, self.reads, change.channel_id, ids)
                cadence = self.settings.for_server
                for entry in nudge_upgrade(done, lambda s: cadence(s).refresh_cadence):
                    writer.mark_dirty(entry)
            case "settings" | "opt_out":
                self._spawn(self._reload_settings(), "stm-reload-settings")
            case _:
                log.warning("short-term memory ignored an unknown change: %r", change)

    def _replaced(self, key: str) -> None:
        """Another process wrote the key's distilled memory: stop showing ours, read theirs.
        A key this process does not hold may be one its prompts recall from another channel:
        when they recall its group, its row is read in, in the background."""
        entry = self.cache.peek(key)
        if entry is None:
            scope = parse_key(key)
            if scope.scope == "server":  # only a server's group recalls other channels
                group = group_of("server", scope.owner_id, None, scope.persona_id)
                if self.reads.recalls(group):
                    self._adopting[key] = group  # read in with the page's others
            return
        self.cache.drop_distilled(entry)
        self._spawn(self.reads.reload(key), f"stm-reload {key}")

    async def _reload_settings(self) -> None:
        self.settings.load(
            await self.store.load_server_settings(), await self.store.load_opt_outs()
        )

    def _drop_everything(self, why: str) -> None:
        dropped = drop_everything(self.cache, self.reads, self._writer)
        self.dropped_caches += 1
        log.warning("short-term memory dropped its cache (%d keys): %s", dropped, why)
