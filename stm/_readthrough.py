"""Keeping the cache consistent with the store: read-through, hydration, warming, deletions.

The cache answers the turn path; the store holds what survives a restart. An
entry created by a capture before its row was read is *not hydrated*: its row
(if any) is read in the background and merged in. A recall group is *warmed*
once per process by reading its newest rows. Every read goes through the
writer's queue, so it is ordered after every earlier delete, and the deletions
made while it was in flight are applied to what it returns (the deletion log).
A read does not wait for the write-behind: only the dirty entries whose rows it
reads are written, just ahead of it, and reads alone are a read transaction.
While the table was empty at open and nothing has left the cache except by a
delete, a key the cache does not hold has no row, and the read is skipped.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import replace
from typing import Any, Literal, TypeVar

from ._audience import Audience, admitter
from ._cache import NO_CATEGORIES, Entry, GroupKey, MemoryCache, group_of
from ._config import STMConfig
from ._convert import entry_from
from ._deletions import DeletionLog, Purge, apply_to_row, overtakes
from ._expiry import Expiry, Thresholds, row_expired
from ._keys import parse_key, turn_keys
from ._lineage import Pin
from ._metrics import Tally
from ._models import DialogueMessage, TurnContext
from ._provenance import Shown
from ._window import EMPTY
from ._writebehind import read_again, unread_turns
from ._writer import Writer
from .store._base import LoadChannelKeys, LoadRecent, LoadRows, StoredRow

__all__ = [
    "AGAIN",
    "ANY_SERVER",
    "ATTEMPTS",
    "NO_ROW",
    "Again",
    "ReadThrough",
    "Unavailable",
    "Unsettled",
    "describe",
    "settle",
]

log = logging.getLogger("stm")
_T = TypeVar("_T")
_E = TypeVar("_E", Entry, Entry | None)

# How often work that a concurrent delete or eviction overtook is tried again.
ATTEMPTS = 3
# With an audience, a cold group's first read loads this many times the rows a prompt
# shows, so that channels it refuses still leave enough to recall.
RECALL_ROWS_WITH_AUDIENCE = 4
# How long a turn waits for the store to plan a purge that may reach its memory (usually
# one commit); past it, what the purge may reach is left out of the turn.
PURGE_WAIT_SECONDS = 2.0
# ``planned`` for memory whose server is not known: every pending purge may reach it.
ANY_SERVER = -1


class Unavailable(Exception):
    """The durable row of a key could not be read."""


class Unsettled(Exception):
    """Every attempt was overtaken by concurrent changes."""


class _Again(enum.Enum):
    AGAIN = "again"


AGAIN = _Again.AGAIN


class _NoRow(enum.Enum):
    NO_ROW = "no row"


# What ``settled`` answers for a key that has neither an entry nor a row.
NO_ROW = _NoRow.NO_ROW
# What an attempt returns to be run again.
Again = Literal[_Again.AGAIN]


async def settle(attempt: Callable[[], Awaitable[_T | Again]], tries: int = ATTEMPTS) -> _T:
    """The first result of ``attempt`` that is not ``AGAIN``; raises Unsettled after ``tries``.

    Reads wait for the store, and meanwhile a delete, an eviction or a purge can
    change what they were for: the attempt checks and asks to be run again."""
    for _ in range(tries):
        result = await attempt()
        if result is not AGAIN:
            return result
    raise Unsettled


def describe(entry: Entry, ctx: TurnContext, private: bool | None = None) -> None:
    """Update the names and placement of ``entry``'s channel from this turn (``private``:
    whether the channel is private, when known better than ``ctx`` says)."""
    entry.channel_name = ctx.channel_name or entry.channel_name
    entry.server_name = ctx.server_name or entry.server_name
    entry.parent_channel_id = ctx.parent_channel_id
    entry.channel_private = ctx.channel_is_private if private is None else private


def turn_scope(ctx: TurnContext) -> tuple[str, str | None, GroupKey]:
    """The turn's keys (user key, server key or None in a DM) and its recall group, made
    once per turn: kept on the context with the ids they come from, and made again if a
    host changed one of them since."""
    held = ctx._keys
    user, channel, server, persona = ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id
    if (
        held is not None
        and held[0] is user
        and held[1] is channel
        and held[2] is server
        and held[3] is persona
    ):
        return held[4]  # type: ignore[no-any-return]
    user_k, server_k = turn_keys(user, channel, server, persona)
    group = group_of("user" if server_k is None else "server", server, user, persona)
    made = (user_k, server_k, group)
    ctx._keys = (user, channel, server, persona, made)
    return made


def _identity_of(old: Entry) -> Entry:
    """A new entry of ``old``'s key holding only what identifies it: no words, no notes, no
    counts."""
    return replace(
        old,
        messages=EMPTY,
        summary=None,
        categories=NO_CATEGORIES,
        pin=None,
        turns_since_refresh=0,
        last_refreshed_turn=0,
        hydrated=True,
        deposited=(),
        revision=0,
        scrolled=None,
    )


def _take_over(entry: Entry, old: Entry, read_seq: int | None = None) -> None:
    """Count in ``entry`` the turns ``old``, an evicted entry of its key whose row was never
    read, counted and did not add to the row ``entry`` has read at ``read_seq`` (None: will
    read, after every write so far; see ``WriteBehind.take_unread_counts``)."""
    entry.turns_since_refresh += unread_turns(old, read_seq)
    entry.last_refreshed_turn = max(entry.last_refreshed_turn, old.last_refreshed_turn)


class ReadThrough:
    """The cache over the store: reads that merge rows in, and the deletion log."""

    def __init__(
        self,
        config: STMConfig,
        cache: MemoryCache,
        writer: Writer,
        spawn: Callable[[Coroutine[Any, Any, Any], str], asyncio.Task[Any]],
        clock: Callable[[], float],
        *,
        empty_at_open: bool,
        tally: Tally,
        channel_is_private: Callable[[TurnContext], bool] | None = None,
        audience: Audience | None = None,
    ) -> None:
        self.config = config
        # Who may read which channel (``stm._audience``); None: the flag of capture decides.
        self.audience = audience
        # Asked about a server channel the host's context calls public (see describe).
        self._channel_is_private = channel_is_private
        self.cache = cache
        self.expiry = Expiry.hours(config.crude_ttl_hours, config.summary_ttl_hours)
        self._writer = writer
        self._spawn = spawn
        self.clock = clock
        # Recent deletions, so that work begun before one of them (a read in flight, a
        # turn's upgrade) can tell whether it was overtaken.
        self.deletions = DeletionLog()
        self._hydrating: dict[str, asyncio.Task[Any]] = {}
        self._warmed = cache.warmed  # bounded by the cap, and emptied with the cache
        # While True, every durable row belongs to an entry in the cache: the table was
        # empty at open, this process is its only writer, and no entry has left the cache
        # except by a delete. A key missing from the cache then has no row to read, so
        # new keys skip the read. The first eviction or expiry drop ends it for good.
        self._all_rows_cached = empty_at_open
        self._tally = tally

    # -- entries --------------------------------------------------------------
    def recall(self, ctx: TurnContext, group: GroupKey, now: float) -> list[Entry]:
        """The other channels' entries a prompt of this turn shows: the one choice of them,
        for the prompt and for what an upgrade records that a prompt would have shown."""
        audience = self.audience
        admit = (
            None
            if audience is None or ctx.server_id is None
            else admitter(audience, ctx.server_id, ctx.channel_id)
        )
        return self.cache.recall(group, ctx.channel_id, self.config.max_other_channels, now, admit)

    def describe(self, entry: Entry, ctx: TurnContext) -> None:
        """``describe(entry, ctx)``, with the channel private when the host's context says
        so or, in a server, when ``channel_is_private`` (the cog: Discord's own view, a
        thread's parent included) does: a host that forgets the flag leaks nothing."""
        ask = self._channel_is_private
        if ask is None or ctx.channel_is_private or ctx.server_id is None:
            describe(entry, ctx)
            return
        try:
            private = bool(ask(ctx))
        except Exception:
            log.exception("channel_is_private failed for channel %s", ctx.channel_id)
            private = True  # not knowing must not leak the channel into others
        describe(entry, ctx, private)

    def new_entry(self, key: str, ctx: TurnContext, now: float, *, hydrated: bool) -> Entry:
        """Put a new, empty entry for ``key`` of this turn into the cache."""
        scope = parse_key(key).scope
        entry = Entry(
            key=key,
            scope=scope,
            server_id=ctx.server_id,
            user_id=ctx.user_id if scope == "user" else None,
            channel_id=ctx.channel_id,
            persona_id=ctx.persona_id,
            messages=EMPTY,
            updated_at=now,
            hydrated=hydrated,
        )
        old = self._writer.write_behind.take_unread_counts(key)
        if old is not None:
            _take_over(entry, old)
        self.describe(entry, ctx)
        self.put(entry)
        return entry

    def put(self, entry: Entry, *, touched: bool = True) -> None:
        """Hold ``entry``; a group that lost an entry to eviction is warmed again."""
        for victim in self.cache.put(entry, touched=touched):
            self._warmed.discard(victim.group)

    def read_group_again(self, group: GroupKey) -> None:
        """Read the group's rows again on its next turn (an entry of it was deleted)."""
        self._warmed.discard(group)

    def rows_left_cache(self) -> None:
        """Entries left the cache while their rows stay: a missing key may have a row."""
        self._all_rows_cached = False

    def no_row_elsewhere(self) -> bool:
        """True when no durable row exists for a key the cache does not hold."""
        if self._all_rows_cached and self.cache.dropped:
            self._all_rows_cached = False
        return self._all_rows_cached

    def thresholds(self) -> Thresholds:
        """The expiry rule now, as the store applies it."""
        return self.expiry.thresholds(self.clock())

    # -- turns and deletions ----------------------------------------------------
    def mark_turn_start(self, ctx: TurnContext) -> None:
        """Remember how many deletions preceded this turn's first call (once per turn)."""
        if ctx._deletion_seq is None:
            ctx._deletion_seq = self.deletions.seq

    def note_shown(self, ctx: TurnContext, shown: Shown) -> None:
        """Record what this turn's prompt showed (added to what an earlier build showed)."""
        held = ctx._shown
        if held is None:
            ctx._shown = shown
        else:
            held.add(shown)

    def overtaken(self, ctx: TurnContext, messages: Iterable[DialogueMessage] = ()) -> bool:
        """Did a deletion since the turn began touch what its prompt showed, its own
        entries, or the authors of ``messages`` (the turn's own, when it is captured)? Its
        summary or its reply, written from what the model saw, must not bring the deleted
        words back. False for a turn whose beginning is unknown."""
        seq = ctx._deletion_seq
        if seq is None or seq == self.deletions.seq:
            return False
        later = self.deletions.since(seq)
        if later is None:
            return True
        shown = ctx._shown or Shown()
        own = Shown.own(ctx.user_id, ctx.channel_id)
        own.add(shown)
        own.add_users([m.author_id for m in messages if m.author_id is not None])
        user_k, server_k, _ = turn_scope(ctx)
        keys = (user_k,) if server_k is None else (user_k, server_k)
        return overtakes(later, own, keys, ctx.server_id, self.current_pins(own))

    def current_pins(self, shown: Shown) -> dict[str, Pin | None]:
        """The pins the cache holds now for notes ``shown`` showed before theirs was known."""
        current: dict[str, Pin | None] = {}
        for key, pin, _ in shown.notes:
            if pin is None:
                entry = self.cache.peek(key)
                current[key] = None if entry is None else entry.pin
        return current

    async def planned(self, server_id: int | None, wait: float = PURGE_WAIT_SECONDS) -> bool:
        """Wait until no purge whose plan may reach notes of ``server_id`` is pending, at
        most ``wait`` seconds and no longer than until the store fails (then nothing queued
        will be planned soon); False when one still is. A purge everywhere stops holding
        up the servers it cannot reach as soon as the store said which it may. A purge
        that one call already waited for in vain (``Purge.overdue``: its plan is not
        coming soon, as when the process that made it stopped) is not waited for again:
        the answer is False at once, and its reach stays hidden."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        trouble = self._writer.trouble()
        while True:
            pending = [
                p
                for p in self.deletions.pending
                if server_id == ANY_SERVER or p.may_reach(server_id)
            ]
            if not pending:
                return True
            if any(p.overdue for p in pending):
                return False
            left = deadline - loop.time()
            if left <= 0 and wait > 0:
                for purge in pending:
                    purge.overdue = True
            if left <= 0 or trouble.is_set():
                return False
            await self._progress(pending[0], left, trouble)

    async def planned_purge(self, purge: Purge, wait: float = PURGE_WAIT_SECONDS) -> bool:
        """Wait until the store planned ``purge``, at most ``wait`` seconds and no longer
        than until the store fails; False if it was not planned."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait
        trouble = self._writer.trouble()
        while purge.pending:
            left = deadline - loop.time()
            if left <= 0 or trouble.is_set():
                return False
            await self._progress(purge, left, trouble)
        return True

    @staticmethod
    async def _progress(purge: Purge, wait: float, trouble: asyncio.Event) -> None:
        """Wait for ``purge``'s next progress (where it may reach, or its plan), at most
        ``wait`` seconds, or until the store fails."""
        done = asyncio.Event()
        purge.waiting.append(done.set)
        waits = [asyncio.ensure_future(done.wait()), asyncio.ensure_future(trouble.wait())]
        try:
            await asyncio.wait(waits, timeout=wait, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
            if done.set in purge.waiting:
                purge.waiting.remove(done.set)

    def visible(self, entry: _E) -> _E:
        """``entry``, or a copy without its distilled content while it is ``hidden``."""
        if entry is None or not self.hidden(entry):
            return entry
        return replace(entry, summary=None, categories=NO_CATEGORIES, pin=None)

    def hidden(self, entry: Entry | None) -> bool:
        """True while a purge that may reach ``entry``'s distilled content is not planned yet:
        the content is neither shown nor returned until it is (or is cleared)."""
        pending = self.deletions.pending
        if not pending or entry is None or not (entry.summary or entry.categories):
            return False
        return any(purge.may_reach(entry.server_id) for purge in pending)

    # -- hydration --------------------------------------------------------------
    def hydrate_in_background(self, keys: list[str]) -> None:
        """Read and merge the rows of ``keys`` (entries created before their rows were read)."""
        # The name carries the scope keys: a failure is logged with them.
        task = self._spawn(self.hydrate(keys), "stm-hydrate " + ", ".join(keys))
        for key in keys:
            self._hydrating[key] = task

    async def hydrate(self, keys: list[str]) -> bool:
        """Read the rows of ``keys`` and merge them into the cache (inserting missing ones);
        False when they could not be read."""
        read = self._read(LoadRows(tuple(keys), *self.thresholds()), keys)
        queued = self._writer.last_queued  # the read's place: write-behind before it, it sees
        rows = await read
        try:
            if rows is None:
                return False
            found = {row.key: row for row in rows}
            for key in keys:
                row = found.get(key)
                entry = self.cache.peek(key)
                if entry is not None and not entry.hydrated:
                    self._merge(entry, row, queued)
                elif entry is None:
                    # Evicted while this read ran, or never held: the row, if any, with the
                    # turns an evicted entry counted before its row was read.
                    old = self._writer.write_behind.take_unread_counts(key)
                    if old is not None:
                        fresh = entry_from(row) if row is not None else _identity_of(old)
                        _take_over(fresh, old, queued)
                        self.put(fresh, touched=False)
                        # The row lacks them. Known now, they are written ahead of the
                        # key's next read even if this entry is evicted again.
                        self._writer.mark_dirty(fresh)
                    elif row is not None and not self._counted_past(key):
                        self.put(entry_from(row), touched=False)
            return True
        finally:
            for key in keys:
                if self._hydrating.get(key) is asyncio.current_task():
                    del self._hydrating[key]

    def _read(
        self, op: LoadRows | LoadRecent, keys: list[str]
    ) -> Coroutine[Any, Any, list[StoredRow] | None]:
        """Queue a read through the writer now (so it is ordered after every earlier delete
        and shares a round trip with the reads queued with it, without carrying the
        write-behind of other keys); await the result for its rows, with the deletions made
        while it was in flight applied."""
        since = self.deletions.seq
        future = self._writer.submit(op, what="read of " + ", ".join(keys[:3]))
        return self._read_result(future, since, keys)

    async def _read_result(
        self, future: asyncio.Future[Any], since: int, keys: list[str]
    ) -> list[StoredRow] | None:
        try:
            rows: list[StoredRow] = await future
        except Exception as exc:
            self._tally.hydration_failures += 1
            log.warning("short-term memory could not be read (%s): %s", ", ".join(keys[:3]), exc)
            return None
        self._tally.hydrations += 1
        self._tally.hydrated_keys += len(rows)
        later = self.deletions.since(since)
        if later is None:
            return None  # overtaken by more deletions than are remembered: read again later
        # The clock may have moved during the read, and a janitor pass may have dropped
        # the entry meanwhile: a row that has expired by now must not come back with it.
        thresholds = self.thresholds()
        result = []
        for row in rows:
            if row_expired(row.updated_at, bool(row.summary) or bool(row.categories), thresholds):
                continue
            kept: StoredRow | None = row
            for logged in later:
                if kept is not None:
                    kept = apply_to_row(kept, logged)
            if kept is not None:
                result.append(kept)
        return result

    def _merge(self, entry: Entry, row: StoredRow | None, read_seq: int) -> None:
        """Merge ``row``, read at ``read_seq`` in the writer's queue, into ``entry``: its
        turns are the row's and those the row did not hold of the entry's own."""
        entry.hydrated = True
        if row is not None:
            if not entry.distilled:
                entry.summary, entry.categories = row.summary, dict(row.categories)
                self.cache.set_pin(entry, row.pin)
            own = unread_turns(entry, read_seq)
            entry.turns_since_refresh = row.turns_since_refresh + own
            entry.last_refreshed_turn = max(entry.last_refreshed_turn, row.last_refreshed_turn)
        entry.deposited = ()
        if not entry.deleted:
            self._writer.mark_dirty(entry)

    def _counted_past(self, key: str) -> bool:
        """True when an evicted entry of ``key``, its row merged, still waits to write
        counters past what the row holds: they are written just ahead of the key's next
        read, so a row read before is not the key's."""
        evicted = self._writer.write_behind.evicted(key)
        return evicted is not None and evicted.hydrated

    async def live(self, key: str) -> Entry | None:
        """The hydrated entry under ``key`` (None when there is none), reading its row if
        needed; raises Unavailable when the row cannot be read."""
        try:
            return await settle(lambda: self._live_once(key))
        except Unsettled:
            raise Unavailable(key) from None

    async def _live_once(self, key: str) -> Entry | Again | None:
        pending = self._hydrating.get(key)
        if pending is not None:
            await asyncio.shield(pending)
        entry = self.cache.get(key)
        if entry is not None and entry.hydrated:
            return entry
        if entry is None and pending is None and self.no_row_elsewhere():
            return None
        if pending is None and not await self.hydrate([key]):
            raise Unavailable(key)
        entry = self.cache.get(key)
        if entry is None:
            return AGAIN if self._counted_past(key) else None
        return entry if entry.hydrated else AGAIN

    def settled(self, key: str, group: GroupKey) -> Entry | Literal[_NoRow.NO_ROW] | None:
        """What a turn's read of ``key`` and of its recall group would find, when it can be
        known without waiting: the hydrated entry, or NO_ROW; None when it must be read."""
        # Most turns: the entry is in the cache with its row merged, nothing is being read
        # for it, and its group was warmed. Then the read is a cache look-up, and the
        # coroutines of ``live`` and ``warm`` would only cost their set-up.
        if group not in self._warmed or key in self._hydrating:
            return None
        entry = self.cache.get(key)
        if entry is not None:
            return entry if entry.hydrated else None
        return NO_ROW if self.no_row_elsewhere() else None

    async def channel_keys(self, channel_id: int) -> list[str]:
        """The keys holding memory of a channel, every scope and persona: those the cache
        holds and those of the store's unexpired rows (answered from the cache alone when
        the store cannot be read)."""
        keys = set(self.cache.keys_of_channel(channel_id))
        op = LoadChannelKeys(channel_id, *self.thresholds())
        try:
            keys.update(await self._writer.submit(op, what=f"keys of channel {channel_id}"))
        except Exception as exc:
            log.warning("short-term memory could not list channel %s: %s", channel_id, exc)
        return sorted(keys)

    # -- warming ----------------------------------------------------------------
    def warm(self, group: GroupKey) -> Coroutine[Any, Any, None] | None:
        """Load the newest rows of a recall group once per process (after a restart): the
        read is queued now; await the result to merge the rows. None when nothing to read."""
        if group in self._warmed:
            return None
        self._warmed.add(group)
        if self.no_row_elsewhere() or group[0] != "server":
            # Every row of the group is already in the cache, or it is a DM user's, which
            # nothing recalls (``Cache.recall``).
            return None
        scope, owner, server_id, persona = group
        limit = self.config.max_other_channels + 1
        if self.audience is not None:
            # The audience decides at each prompt, whatever was flagged at capture, and may
            # refuse some: a few more rows, private-flagged ones too.
            limit *= RECALL_ROWS_WITH_AUDIENCE
        op = LoadRecent(
            scope,
            owner,
            server_id,
            persona,
            limit,
            *self.thresholds(),
            private=self.audience is not None,
        )
        return self._warmed_with(group, self._read(op, [f"{scope}:{owner}"]))

    async def _warmed_with(
        self, group: GroupKey, reading: Coroutine[Any, Any, list[StoredRow] | None]
    ) -> None:
        try:
            rows = await reading
        except BaseException:
            self._warmed.discard(group)  # cancelled: the next turn reads it again
            raise
        if rows is None:
            self._warmed.discard(group)
            return
        for row in rows:
            if self.cache.peek(row.key) is None:
                self.put(entry_from(row), touched=False)

    # -- another process's upgrade ----------------------------------------------
    def recalls(self, group: GroupKey) -> bool:
        """True when this process's prompts recall ``group``'s channels (it was read)."""
        return group in self._warmed

    async def adopt(self, keys: dict[str, GroupKey]) -> None:
        """Another process wrote the notes of ``keys``, which this one does not hold but
        whose groups it recalls: read their rows in, so the groups' next turns show them (a
        read here costs the turns nothing; deletions made while it runs are applied)."""
        rows = await self._read(LoadRows(tuple(keys), *self.thresholds()), list(keys))
        if rows is None:
            # Not read (the store failed, or too many deletions came meanwhile): the groups
            # are read again at their next turns instead.
            for group in set(keys.values()):
                self._warmed.discard(group)
            return
        for row in rows:
            if keys[row.key] in self._warmed and self.cache.peek(row.key) is None:
                self.put(entry_from(row), touched=False)

    async def reload(self, key: str) -> None:
        """Take the key's distilled content and counters from its row again (another process
        wrote them); the crude messages held here stay. A change made here meanwhile wins."""
        entry = self.cache.peek(key)
        if entry is None:
            return
        revision = entry.revision
        rows = await self._read(LoadRows((key,), *self.thresholds()), [key])
        if self.cache.peek(key) is not entry or entry.deleted or entry.revision != revision:
            return
        if rows is None:
            read_again(entry)  # the next turn reads the row
            return
        row = rows[0] if rows else None
        if row is None:
            self.cache.drop_distilled(entry)
            return
        entry.summary, entry.categories = row.summary, dict(row.categories)
        self.cache.set_pin(entry, row.pin)
        entry.turns_since_refresh = row.turns_since_refresh
        entry.last_refreshed_turn = row.last_refreshed_turn
        entry.hydrated, entry.deposited = True, ()
