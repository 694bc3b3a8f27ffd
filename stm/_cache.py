"""The in-process cache of scope entries: bounded, clock passed in.

Past its cap it evicts as a segmented LRU does: a new key waits in a probation part,
and a key used again while held moves to a protected part of at most half the cap (its
least recently used key going back to probation, as the newest there, when it is full).
Eviction takes the longest-waiting key of probation first. Half, not the usual four
fifths: probation must hold the new keys of every turn in flight until they are used
again (a turn's capture puts its keys, its upgrade reads them). A cache of two keys or
fewer has no protected part, so that a turn's two keys fit: it is plain LRU.

So the memory every turn of a busy channel reads (the channel's entry) is not pushed
out by thousands of members' own entries, each used for one turn now and then: with
plain LRU, a capped cache in a busy server made a store round trip every 10 to 13 turns
(W6), reads of a channel's entry among them, each having lost that channel's recent
messages. A member's entry used twice in one turn (a turn with an upgrade reads it
again) is protected as a channel's is: where more members upgrade between two turns of
a channel than half the cap holds, the channel's entry goes back to probation all the
same.

Pure data structure: no database, no event loop. It keeps the indexes the
facade needs so that no per-turn or per-delete operation scans every key:
by channel (``/refresh``), by user (purges), and per recall group (other-channel
memory, newest first). Every index holds only what the held entries refer to,
so each is bounded by the cap: a user whose turns scrolled out of a window
leaves that key's index, and a recall group leaves the warmed set when its
last key leaves the cache.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from ._audience import Admit
from ._expiry import HOUR, Expiry
from ._keys import Scope
from ._lineage import Pin
from ._window import EMPTY, StoredMessage, Window

__all__ = [
    "HOUR",
    "Entry",
    "GroupKey",
    "MemoryCache",
    "StoredMessage",
    "WarmedGroups",
    "Window",
    "group_of",
]

GroupKey = tuple[Scope, int, int | None, int | None]
NO_CATEGORIES: Mapping[str, str] = MappingProxyType({})


@dataclass(slots=True, eq=False)
class Entry:
    """The mutable state under one scope key."""

    key: str
    scope: Scope
    server_id: int | None
    user_id: int | None
    channel_id: int
    persona_id: int | None
    # The crude window, oldest first: immutable (``_window.py``), replaced whenever it
    # changes. So a window once read stays what it was (the prompt that showed it can be
    # credited later), and "is it the same window" is an identity test.
    messages: Window
    updated_at: float
    channel_name: str | None = None
    server_name: str | None = None
    parent_channel_id: int | None = None
    channel_private: bool = False
    summary: str | None = None
    # Replaced as a whole when it changes, never changed in place (rendering relies on it).
    # Most entries have none: they share one empty, read-only mapping.
    categories: Mapping[str, str] = field(default_factory=lambda: NO_CATEGORIES)
    # The version of its chain the distilled content is (``_lineage.py``): who may have
    # words in it is kept with the chain, in the store. None without distilled content,
    # and while an upgrade of it is being committed (the store then names the version).
    # Set through ``MemoryCache.set_pin``, which indexes it.
    pin: Pin | None = None
    turns_since_refresh: int = 0
    last_refreshed_turn: int = 0
    # False until the durable row (if any) has been merged in.
    hydrated: bool = True
    # While not hydrated: the turns its write-behind added to its row, with the place in
    # the writer's queue of each write (a read queued after it finds them in the row).
    deposited: tuple[tuple[int, int], ...] = field(default=(), repr=False)
    # Set when a delete removed this entry: background work must not write it back.
    deleted: bool = False
    # The revision: bumped on every change of the distilled content (not a chain's version).
    revision: int = 0
    # Users whose turns scrolled out of the window since the cache last looked: the
    # cache drops them from its user index unless they still have words here.
    scrolled: list[int] | None = field(default=None, repr=False)
    # The recall group: entries whose memory may be shown in each other's channels. Set
    # once, as the fields it derives from never change; it is read on every turn.
    group: GroupKey = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.group = group_of(self.scope, self.server_id, self.user_id, self.persona_id)
        if type(self.messages) is not Window:
            self.messages = Window(self.messages) if self.messages else EMPTY

    @property
    def distilled(self) -> bool:
        """True when the entry holds a summary or categories."""
        return bool(self.summary) or bool(self.categories)

    def expires_at(self, expiry: Expiry) -> float:
        """When the entry expires if untouched, in epoch seconds."""
        return expiry.expires_at(self.updated_at, self.distilled)

    def remember(self, messages: Sequence[StoredMessage], limit: int) -> None:
        """Append ``messages`` (one turn's) to the window, keeping its newest ``limit``."""
        turn = messages if type(messages) is tuple else tuple(messages)
        if not turn:
            return
        # Users who triggered a turn or wrote a message that scrolled out are noted: the
        # cache drops them from its user index unless they still have words here.
        self.messages, gone = self.messages.appended(turn, limit, turn[-1][5])
        if gone:
            self.scrolled = gone if self.scrolled is None else self.scrolled + gone

    def window_users(self) -> set[int]:
        """Users whose words are in the crude window: who triggered each turn, and who
        wrote each message (a turn may carry several authors' messages)."""
        return self.messages.users()


def group_of(
    scope: Scope, server_id: int | None, user_id: int | None, persona_id: int | None
) -> GroupKey:
    """Server scope recalls across the server; user scope (DMs) recalls nothing (``recall``)."""
    if scope == "server":
        assert server_id is not None
        return ("server", server_id, None, persona_id)
    assert user_id is not None
    return ("user", user_id, server_id, persona_id)


class WarmedGroups(dict[GroupKey, None]):
    """Recall groups whose newest rows were loaded, at most ``limit`` (oldest forgotten).

    A set in use (``in``, ``add``, ``discard``). Forgetting a group only costs a read
    when it is next recalled, so the bound can never lose memory.
    """

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = max(1, limit)

    def add(self, group: GroupKey) -> None:
        """Mark ``group`` loaded."""
        self[group] = None
        if len(self) > self.limit:
            del self[next(iter(self))]

    def discard(self, group: GroupKey) -> None:
        """Forget that ``group`` was loaded (its rows are read again when recalled)."""
        self.pop(group, None)


# An index from an id to the keys that belong to it: most ids (a DM user, a channel of one
# scope) have one key, held bare; a set is made when a second key arrives. At 100,000
# keys the two indexes' one-key sets were about 500 bytes per key.
_Index = dict[int, str | set[str]]


def _index_add(index: _Index, owner: int, key: str) -> None:
    held = index.get(owner)
    if held is None:
        index[owner] = key
    elif type(held) is str:
        if held != key:
            index[owner] = {held, key}
    else:
        held.add(key)  # type: ignore[union-attr]


def _index_discard(index: _Index, owner: int, key: str) -> None:
    held = index.get(owner)
    if held is None:
        return
    if type(held) is str:
        if held == key:
            del index[owner]
        return
    held.discard(key)  # type: ignore[union-attr]
    if len(held) <= 1:
        if held:
            index[owner] = next(iter(held))
        else:
            del index[owner]


def _index_keys(index: _Index, owner: int) -> list[str]:
    held = index.get(owner)
    if held is None:
        return []
    return [held] if type(held) is str else list(held)


@dataclass(slots=True)
class _Group:
    # Entries touched in this process, oldest first (a plain dict: an OrderedDict costs
    # about twice the memory, and a group is one per DM user); hydrated entries not yet
    # touched apart, in a dict made when the first one arrives.
    live: dict[str, Entry] = field(default_factory=dict)
    cold: dict[str, Entry] | None = None

    def __len__(self) -> int:
        return len(self.live) + (len(self.cold) if self.cold else 0)

    def make_live(self, entry: Entry) -> None:
        """``entry`` is the group's newest."""
        key = entry.key
        if self.cold is not None and self.cold.pop(key, None) is not None and not self.cold:
            self.cold = None
        self.live.pop(key, None)  # to the end: a plain dict keeps insertion order
        self.live[key] = entry

    def drop(self, key: str) -> None:
        """Drop ``key``."""
        self.live.pop(key, None)
        if self.cold is not None:
            self.cold.pop(key, None)
            if not self.cold:
                self.cold = None


class MemoryCache:
    """Scope entries by key, with TTLs in hours and a cap on how many keys are held."""

    def __init__(
        self,
        *,
        max_keys: int,
        crude_ttl_hours: float,
        summary_ttl_hours: float,
        clock: Callable[[], float],
        open_windows: int = 1024,
    ) -> None:
        self.max_keys = max_keys
        self.expiry = Expiry.hours(crude_ttl_hours, summary_ttl_hours)
        self._shortest_ttl = min(self.expiry)
        self.clock = clock
        # Every key is in one of two parts: ``_fresh`` (probation), new keys and keys the
        # protected part handed back, longest waiting first (a plain dict keeps insertion
        # order); and ``_entries`` (protected), keys used again while on probation, least
        # recently used first, at most ``_kept_max`` (none in a cache of two keys or fewer:
        # every key used goes to the end of probation, which is then plain LRU).
        self._entries: OrderedDict[str, Entry] = OrderedDict()
        self._fresh: dict[str, Entry] = {}
        self._kept_max = max_keys // 2 if max_keys > 2 else 0
        self._by_channel: _Index = {}
        self._by_user: _Index = {}
        # The entries that pin a version of each chain: what a purge's ranges clear.
        self._by_chain: _Index = {}
        # The entries whose window holds a reply carrying sources (what its prompt showed):
        # what a purge, its ranges and a Discord delete look through besides the indexes
        # above, so that no index grows with what replies quoted. At most the cache's keys;
        # a key may stay after its replies scrolled out, until the next walk looks.
        self._sourced: set[str] = set()
        # Recall groups: most (a DM user's) hold one live entry, kept bare; a _Group is
        # made when a second entry or an untouched one arrives.
        self._groups: dict[GroupKey, Entry | _Group] = {}
        # The most recently active entries, whose windows are kept open; the others' are
        # packed (``_window.py``), which takes a fraction of the memory.
        self.open_windows = max(1, min(max_keys, open_windows))
        self._open: OrderedDict[str, Entry] = OrderedDict()
        # Kept here so that it shrinks with the cache: a group is forgotten when one of
        # its keys is evicted (its row must be read again) or its last key leaves.
        self.warmed = WarmedGroups(max_keys)
        self.evicted = 0
        # Entries dropped for expiry (their durable row, if any, is left for the janitor).
        self.expired_drops = 0

    def __len__(self) -> int:
        return len(self._entries) + len(self._fresh)

    def __contains__(self, key: str) -> bool:
        return key in self._fresh or key in self._entries

    def __iter__(self) -> Iterator[Entry]:
        return iter([*self._fresh.values(), *self._entries.values()])

    def _held(self, key: str) -> Entry | None:
        """The entry under ``key`` in either part."""
        entry = self._fresh.get(key)
        return self._entries.get(key) if entry is None else entry

    def _used(self, key: str) -> None:
        """``key`` (held) was used: it is the most recently used of the protected part,
        which it joins if it was on probation (its least recently used key then goes back
        to probation, as the newest there, when the part is over its share)."""
        kept = self._entries
        entry = self._fresh.pop(key, None)
        if entry is None:
            kept.move_to_end(key)
            return
        kept[key] = entry
        if len(kept) > self._kept_max:
            oldest = next(iter(kept))
            self._fresh[oldest] = kept.pop(oldest)

    def is_expired(self, entry: Entry, now: float | None = None) -> bool:
        """True when ``entry`` has been inactive for its TTL."""
        now = self.clock() if now is None else now
        if entry.updated_at > now - self._shortest_ttl:
            return False  # active since the shorter TTL: most entries, one comparison
        # Entry.distilled, inlined: this runs for several entries on every turn.
        return self.expiry.expired(entry.updated_at, bool(entry.summary or entry.categories), now)

    def peek(self, key: str) -> Entry | None:
        """The entry under ``key``, expired or not, without counting it as used."""
        return self._held(key)

    def _unexpired(self, key: str, now: float | None) -> Entry | None:
        """The entry under ``key``; an expired one is dropped and None returned."""
        entry = self._held(key)
        if entry is not None and self.is_expired(entry, now):
            self.remove(key)
            self.expired_drops += 1
            return None
        return entry

    def get(self, key: str, now: float | None = None) -> Entry | None:
        """The live entry under ``key``; an expired one is dropped and None returned."""
        entry = self._unexpired(key, now)
        if entry is not None:
            self._used(key)
        return entry

    def put(self, entry: Entry, *, touched: bool = True) -> list[Entry]:
        """Hold ``entry``; return the entries evicted to stay under the cap."""
        key = entry.key
        old = self._held(key)
        if old is entry:
            self._used(key)
        else:
            # A new entry of a held key takes its place, in the same part; a new key starts
            # on probation.
            kept = key in self._entries
            if old is not None:
                self.remove(key)
            if kept:
                self._entries[key] = entry
            else:
                self._fresh[key] = entry
        _index_add(self._by_channel, entry.channel_id, entry.key)
        self.index_users(entry, entry.window_users())
        if entry.pin is not None:
            _index_add(self._by_chain, entry.pin.chain, entry.key)
        if entry.scope == "user" and entry.user_id is not None:
            _index_add(self._by_user, entry.user_id, entry.key)
        if touched:
            self._make_live(entry)
            self._keep_open(entry)
        elif self._groups.get(entry.group) is not entry:
            group = self._group(entry.group)
            if entry.key not in group.live:
                if group.cold is None:
                    group.cold = {}
                group.cold[entry.key] = entry
        evicted = []
        while len(self._entries) + len(self._fresh) > self.max_keys:
            victim = self._victim(key)
            self.remove(victim.key)
            self.warmed.discard(victim.group)
            evicted.append(victim)
            self.evicted += 1
        return evicted

    def _victim(self, newest: str) -> Entry:
        """The entry to evict next, never ``newest`` (the one just put): the longest
        waiting on probation, else the least recently used of the protected part."""
        fresh = self._fresh
        if fresh:
            first = next(iter(fresh))
            if first != newest or not self._entries:
                return fresh[first]
        return next(iter(self._entries.values()))

    def get_touched(self, key: str, now: float) -> Entry | None:
        """``get(key, now)`` then ``touch`` of what it found (every capture's)."""
        entry = self._unexpired(key, now)
        if entry is not None:
            self.touch(entry, now)
        return entry

    def _group(self, key: GroupKey) -> _Group:
        """The group under ``key`` as a _Group (made from a bare entry, or new)."""
        held = self._groups.get(key)
        if isinstance(held, _Group):
            return held
        group = _Group() if held is None else _Group({held.key: held})
        self._groups[key] = group
        return group

    def _make_live(self, entry: Entry) -> None:
        """``entry`` is the newest of its recall group."""
        held = self._groups.get(entry.group)
        if held is entry:
            return
        if type(held) is _Group:
            held.make_live(entry)
            return
        if held is None:
            self._groups[entry.group] = entry
            return
        if type(held) is Entry and held.key == entry.key:
            self._groups[entry.group] = entry  # a replaced entry
            return
        self._group(entry.group).make_live(entry)

    def _keep_open(self, entry: Entry) -> None:
        """``entry`` is active: keep its window open, and pack the least recently active
        open one past ``open_windows``."""
        opened, key = self._open, entry.key
        if key in opened:
            opened.move_to_end(key)
            return
        opened[key] = entry
        if len(opened) > self.open_windows:
            quiet = opened.popitem(last=False)[1]
            quiet.messages = quiet.messages.packed()

    def unindex_scrolled(self, entry: Entry) -> None:
        """Drop from the user index the users who scrolled out of ``entry``'s window and have
        no words left in it (after ``Entry.remember``)."""
        if entry.scrolled is not None:
            self._unindex_scrolled(entry)

    def touch(self, entry: Entry, now: float) -> None:
        """Mark ``entry`` active now: newest in its recall group, and used."""
        entry.updated_at = now
        if entry.scrolled is not None:
            self._unindex_scrolled(entry)
        self._used(entry.key)
        self._make_live(entry)
        self._keep_open(entry)

    def index_user(self, entry: Entry, user: int) -> None:
        """``index_users`` for one user (every capture's)."""
        _index_add(self._by_user, user, entry.key)

    def index_users(self, entry: Entry, users: set[int] | frozenset[int]) -> None:
        """Record that ``users`` have words in ``entry`` (so a purge finds it without a scan)."""
        if entry.scrolled is not None:
            self._unindex_scrolled(entry)
        for user in users:
            _index_add(self._by_user, user, entry.key)

    def index_sourced(self, entry: Entry) -> None:
        """``entry``'s window holds a reply carrying sources."""
        self._sourced.add(entry.key)

    def sourced(self, server_id: int | None = None) -> Iterator[Entry]:
        """The held entries whose window holds a reply carrying sources (of ``server_id``
        only, when given); forgets the keys that no longer hold one."""
        for key in list(self._sourced):
            entry = self._held(key)
            if entry is None or not entry.messages.has_sources:
                self._sourced.discard(key)
            elif server_id is None or entry.server_id == server_id:
                yield entry

    def _unindex_scrolled(self, entry: Entry) -> None:
        gone, entry.scrolled = entry.scrolled or (), None
        present = entry.window_users()
        for user in set(gone):
            if user not in present and user != entry.user_id:
                self._unindex_user(user, entry.key)

    def _unindex_user(self, user: int, key: str) -> None:
        _index_discard(self._by_user, user, key)

    def remove(self, key: str) -> Entry | None:
        """Drop ``key`` and its index entries; return what was held."""
        entry = self._fresh.pop(key, None)
        if entry is None:
            entry = self._entries.pop(key, None)
        if entry is None:
            return None
        self._open.pop(key, None)
        self._sourced.discard(key)
        _index_discard(self._by_channel, entry.channel_id, key)
        if entry.pin is not None:
            _index_discard(self._by_chain, entry.pin.chain, key)
        owners = {entry.user_id} if entry.user_id is not None else set()
        for user in entry.window_users() | owners | set(entry.scrolled or ()):
            self._unindex_user(user, key)
        entry.scrolled = None
        held = self._groups.get(entry.group)
        if type(held) is _Group:
            held.drop(key)
            if not held:
                del self._groups[entry.group]
                self.warmed.discard(entry.group)
        elif isinstance(held, Entry) and held.key == key:
            del self._groups[entry.group]
            self.warmed.discard(entry.group)
        return entry

    def keys_of_channel(self, channel_id: int) -> list[str]:
        """Every held key of ``channel_id``, any scope or persona."""
        return _index_keys(self._by_channel, channel_id)

    def index_sizes(self) -> dict[str, int]:
        """How many items each structure holds (each is bounded by ``max_keys``)."""
        return {
            "entries": len(self),
            "protected": len(self._entries),
            "channels": len(self._by_channel),
            "users": len(self._by_user),
            "chains": len(self._by_chain),
            "sourced": len(self._sourced),
            "user_keys": sum(
                1 if type(keys) is str else len(keys) for keys in self._by_user.values()
            ),
            "groups": len(self._groups),
            "warmed": len(self.warmed),
        }

    def keys_of_user(self, user_id: int) -> list[str]:
        """Every held key that is the user's own or whose window holds the user's words."""
        return _index_keys(self._by_user, user_id)

    def keys_of_chain(self, chain: int) -> list[str]:
        """Every held key whose distilled content pins a version of ``chain``."""
        return _index_keys(self._by_chain, chain)

    def set_pin(self, entry: Entry, pin: Pin | None) -> None:
        """Record the version ``entry``'s distilled content is (None: none, or not known yet)."""
        old = entry.pin
        if old == pin:
            return
        held = self._held(entry.key) is entry
        if old is not None and held:
            _index_discard(self._by_chain, old.chain, entry.key)
        entry.pin = pin
        if pin is not None and held:
            _index_add(self._by_chain, pin.chain, entry.key)

    def drop_distilled(self, entry: Entry) -> None:
        """Drop ``entry``'s distilled content (a purge or another process's upgrade)."""
        entry.summary, entry.categories = None, NO_CATEGORIES
        self.set_pin(entry, None)
        entry.revision += 1

    def recall(
        self,
        group: GroupKey,
        exclude_channel: int,
        limit: int,
        now: float,
        admit: Admit | None = None,
    ) -> list[Entry]:
        """Up to ``limit`` live entries of ``group`` other than ``exclude_channel``, newest first,
        never empty ones; nothing for a user's group (DMs). Without ``admit``, never private
        channels (as flagged at capture); with it, only the channels it admits, whatever
        the flag says: it is asked once for the newest ``limit`` candidates, and again for
        more at once only when it refused some."""
        if group[0] != "server":
            # A DM channel may hold other people (a group DM, a user-installed bot in a DM
            # between friends): a user's notes of one DM must never show in another.
            return []
        held = self._groups.get(group)
        if held is None or limit <= 0:
            return []
        if admit is not None:
            return self._admitted(held, exclude_channel, limit, now, admit)
        found: list[Entry] = []
        expired: list[str] = []
        if type(held) is _Group:
            live: Iterable[Entry] = reversed(held.live.values())
            cold = held.cold
        else:
            live, cold = (held,), None  # type: ignore[assignment]
        for entry in live:
            if entry.channel_id == exclude_channel or entry.channel_private:
                continue
            if self.is_expired(entry, now):
                expired.append(entry.key)
                continue
            if entry.messages or entry.summary or entry.categories:
                found.append(entry)
                if len(found) == limit:
                    break
        if cold:
            for entry in cold.values():
                if entry.channel_id == exclude_channel or entry.channel_private:
                    continue
                if self.is_expired(entry, now):
                    expired.append(entry.key)
                elif entry.messages or entry.distilled:
                    found.append(entry)
            found.sort(key=lambda e: e.updated_at, reverse=True)
            del found[limit:]
        self._drop_expired(expired)
        return found

    def _admitted(
        self, held: Entry | _Group, exclude_channel: int, limit: int, now: float, admit: Admit
    ) -> list[Entry]:
        """``recall`` with the host's audience: the candidates newest first, asked about in
        rounds (``limit``, then four times as many, then the rest) until ``limit`` pass."""
        ordered: Iterator[Entry]
        if type(held) is not _Group:
            ordered = iter((held,))  # type: ignore[arg-type]
        elif held.cold:
            every = (*held.live.values(), *held.cold.values())
            ordered = iter(sorted(every, key=lambda e: e.updated_at, reverse=True))
        else:
            ordered = reversed(held.live.values())
        is_expired = self.is_expired
        expired: list[str] = []
        found: list[Entry] = []
        size = limit
        while True:
            batch: list[Entry] = []
            ids: list[int] = []
            for entry in ordered:  # read lazily: a later round goes on where this one ends
                channel = entry.channel_id
                if channel == exclude_channel:
                    continue
                if is_expired(entry, now):
                    expired.append(entry.key)
                elif entry.messages or entry.summary or entry.categories:
                    batch.append(entry)
                    ids.append(channel)
                    if len(ids) == size:
                        break
            if not ids:
                break
            allowed = admit(ids)
            for entry in batch:
                if entry.channel_id in allowed:
                    found.append(entry)
                    if len(found) == limit:
                        break
            if len(found) == limit or len(ids) < size:
                break
            size = 4 * limit if size == limit else len(self)
        self._drop_expired(expired)
        return found

    def _drop_expired(self, expired: list[str]) -> None:
        if expired:
            for key in expired:
                self.remove(key)
            self.expired_drops += len(expired)

    @property
    def dropped(self) -> int:
        """Entries that left the cache without a delete: their rows may still exist."""
        return self.evicted + self.expired_drops

    def provenance_bytes(self) -> int:
        """Bytes of memory the held entries spend on provenance (who may have words in their
        distilled memory), objects shared between entries counted once: a diagnostic.

        That is each entry's pin and the index of entries by chain; who was shown to each
        chain is kept in the store, not here."""
        seen: set[int] = set()
        total = sys.getsizeof(self._by_chain)
        for held in self._by_chain.values():
            if type(held) is not str:
                total += sys.getsizeof(held)
        for entry in self:
            pin = entry.pin
            if pin is None or id(pin) in seen:
                continue
            seen.add(id(pin))
            total += sys.getsizeof(pin) + sys.getsizeof(pin.chain) + sys.getsizeof(pin.version)
        return total

    def expired_keys(self, now: float) -> list[str]:
        """Keys whose entries have expired (the janitor drops them)."""
        return [e.key for e in self if self.is_expired(e, now)]
