"""What a durable store is: the rows it keeps, the operations it runs in one transaction,
and the change feed other processes follow.

Several processes may share one database. Each keeps its own cache, so every
change another process must honour (an upgrade, a channel clear, a user
purge, settings, an opt-out, a janitor deletion) is also written, in the same
transaction, as a :class:`Change` in the database's change feed. A follower
(one per process) reads the feed in position order and applies each change
to its cache. The contract a follower can rely on, on every store:

- positions are integers that increase by one per change, are never reused,
  and commit in position order: once a read returns position ``n``, no change
  with a smaller position can appear later, so ``after`` never skips one;
- a change is visible exactly when the data change it describes is;
- :meth:`Store.read_changes` says when the follower fell behind the feed's
  retention (changes it never saw were pruned): it must then drop its whole
  cache and continue from the position the page gives;
- :meth:`Store.wait_for_change` wakes a follower when something may have
  been committed; it can wake for nothing and a wake-up can be lost (a
  dropped connection), so a follower also reads on a timer.

A follower's loop, in outline::

    position = await store.current_position()  # at open, before serving
    while True:
        page = await store.read_changes(position)
        if page.fell_behind:
            drop_the_whole_cache()
        for change in page.changes:
            if change.origin != store.origin:
                apply_to_cache(change)
        position = page.next_after
        if not page.more:
            await store.wait_for_change(coherence_seconds / 2)

What else the store gives a process that shares its database:

- an upgrade whose turn began at feed position ``p`` is saved with
  ``SaveDistilled(row, Guard(after=p, ...))``: inside the writing transaction
  the store refuses it (result :class:`Overtaken`, nothing written) when a
  change after ``p``, from any process, cleared a channel its prompt showed,
  purged a user whose words it showed, or cleared a version of notes it showed
  (the purge's ranges, see ``_lineage.py``); a turn that began before the
  follower caught up uses the follower's position, which is only older, so the
  check errs on refusing;
- a purge's change names no rows: its :class:`~stm._lineage.Range` list, kept
  with its position (:meth:`Store.purge_ranges`), says which versions of which
  chains it cleared; a follower clears the entries it holds at those versions;
- ``empty_at_open`` (see :class:`Store`) holds at the moment of opening only:
  the "every row is in the cache" shortcut ends at the first change another
  process committed (a change in the feed whose origin is not ours, or
  :meth:`Store.poll_changed` on SQLite, which also sees identity rows);
- ``settings`` and ``opt_out`` changes name the server or user; the follower
  reloads them with :meth:`Store.load_server_settings` and
  :meth:`Store.load_opt_outs`;
- the feed grows until :meth:`Store.prune_changes` is called (by one
  process's janitor, say, keeping well over the coherence bound); changes
  hold ids and keys, never memory text.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple, Protocol, runtime_checkable

from .._keys import Scope
from .._lineage import Erasure, Lineage, Pin, Range

__all__ = [
    "EXPIRE_CHUNK",
    "EXPIRE_SPAN",
    "MESSAGE_KINDS",
    "PROVENANCE_TABLES",
    "READS",
    "Change",
    "ChangeKind",
    "CheckReport",
    "DeleteChannel",
    "DeleteExpired",
    "Expired",
    "FeedPage",
    "ForgetMessages",
    "ForgetServer",
    "Guard",
    "Inspector",
    "LoadChannelKeys",
    "LoadDepartures",
    "LoadHistory",
    "LoadRecent",
    "LoadRows",
    "MarkDeparture",
    "NoteVersion",
    "Op",
    "Overtaken",
    "PreviewPurge",
    "PurgePhase",
    "PurgePreview",
    "PurgeResult",
    "PurgeTotals",
    "PurgeUser",
    "RestoreNotes",
    "Restored",
    "SaveDistilled",
    "SaveOptOut",
    "SaveServerSettings",
    "Saved",
    "Scrub",
    "SharedChange",
    "Store",
    "StoreStats",
    "StoredRow",
    "SweepPurge",
    "SweepStep",
    "Touch",
    "UserHoldings",
    "deleted_since",
    "overtaking",
    "reads_only",
]


@dataclass(frozen=True, slots=True)
class StoredRow:
    """One durable scope: everything of an entry except its crude messages."""

    key: str
    scope: Scope
    server_id: int | None
    user_id: int | None
    channel_id: int
    persona_id: int | None
    parent_channel_id: int | None
    channel_name: str | None
    server_name: str | None
    channel_private: bool
    summary: str | None
    categories: dict[str, str]
    turns_since_refresh: int
    last_refreshed_turn: int
    updated_at: float
    counters_known: bool = True
    # Bumped by every write of the distilled content; the feed names it, so that a
    # follower can tell whether the row it holds is older than a change.
    version: int = 0
    # The version of its chain the distilled content was written as (None: no content).
    pin: Pin | None = None


# The tables that hold provenance (who may have words in distilled memory), on every store:
# what a purge must resolve, and what operators and benchmarks measure as its cost.
PROVENANCE_TABLES: tuple[str, ...] = (
    "stm_chains",
    "stm_chain_members",
    "stm_chain_edges",
    "stm_purge_ranges",
)


# The columns of a row, in the order ``row_from_columns`` reads them after the row id;
# both stores select them so (a query adds ``version``, the chain and its version, and
# whether a purge is still clearing the row, at the end: ``SELECT_TAIL``).
ROW_COLUMNS = (
    "key, scope, server_id, user_id, channel_id, persona_id, parent_channel_id, channel_name, "
    "server_name, channel_private, summary, categories, turns_since_refresh, "
    "last_refreshed_turn, updated_at"
)
# What a row read adds after ROW_COLUMNS, ``m`` being the memories table: a row whose
# version a purge has begun to clear reads as cleared (the sweep reaches it soon).
SELECT_TAIL = (
    "m.version, m.chain_id, m.chain_version, EXISTS (SELECT 1 FROM stm_purge_ranges r "
    "WHERE r.done = 0 AND r.chain_id = m.chain_id AND r.from_version <= m.chain_version)"
)


def row_from_columns(row: Sequence[Any], summary: str | None, categories: str | None) -> StoredRow:
    """A ``StoredRow`` from ``id, ROW_COLUMNS, SELECT_TAIL`` as a store selected them, with
    the distilled text as the store reads it (decrypted first)."""
    (_, key, scope, server_id, user_id, channel_id, persona_id, parent, channel_name,
     server_name, private, _, _, turns, refreshed, updated_at, version, chain, chain_version,
     purging) = row  # fmt: skip
    if purging or chain is None:
        summary, categories, pin = None, None, None
    else:
        pin = Pin(int(chain), int(chain_version))
    loaded = json.loads(categories) if categories else {}
    return StoredRow(
        key=key,
        scope="server" if scope == "server" else "user",
        server_id=server_id,
        user_id=user_id,
        channel_id=channel_id,
        persona_id=persona_id,
        parent_channel_id=parent,
        channel_name=channel_name,
        server_name=server_name,
        channel_private=bool(private),
        summary=summary,
        categories={str(k): str(v) for k, v in loaded.items()} if isinstance(loaded, dict) else {},
        turns_since_refresh=int(turns),
        last_refreshed_turn=int(refreshed),
        updated_at=float(updated_at),
        version=int(version),
        pin=pin if (summary or loaded) else None,
    )


@dataclass(frozen=True, slots=True)
class Touch:
    """Write identity, activity and counters of many rows; never their distilled content.

    A row whose ``counters_known`` is False (not hydrated yet) adds its counters to the
    row's (its entry's turns not added before; the entry, once it reads the row, counts
    the row's less what it added) and takes its identity and ``updated_at``. ``after``
    is the feed position this process's view was current with when the rows were taken:
    a row whose channel another process cleared after it, or whose user (or, for a
    server row, nothing: its words are not in the row) another process purged after it,
    is not written, so that write-behind cannot bring back what another process
    deleted. A row whose stored copy has expired by ``crude_before``/``summary_before``
    is deleted first, so that activity cannot bring expired memory back.
    """

    rows: tuple[StoredRow, ...]
    after: int | None = None
    crude_before: float | None = None
    summary_before: float | None = None


@dataclass(frozen=True, slots=True)
class Guard:
    """What an upgrade's prompt showed, to refuse it when another process deleted some of it.

    ``after`` is the feed position the turn's view was current with (the follower's
    position when the turn began). The save is refused when a change after it, from
    any process, cleared one of ``channels`` (the channels whose memory the prompt
    showed, its own included) or purged one of ``users`` (everyone whose words it
    showed directly) everywhere or in ``server_id``. The check
    runs inside the writing transaction, where the feed cannot move, so it is exact.
    ``pins`` are refused when a purge after ``after`` cleared them (its ranges).
    """

    after: int
    channels: frozenset[int]
    users: frozenset[int]
    server_id: int | None
    # The origin whose deletes do not count: the saving process's own, which its
    # deletion log already checked (the turn's position may predate their commit).
    own_origin: str = ""
    # The versions of notes the prompt showed, and the notes' own content kept: refused
    # when a purge after ``after`` cleared one of them.
    pins: frozenset[Pin] = frozenset()


@dataclass(frozen=True, slots=True)
class Overtaken:
    """The result of a guarded :class:`SaveDistilled` that was refused; nothing was written.

    ``position`` is the change that overtook it.
    """

    position: int


def overtaking(
    guard: Guard,
    deletes: Iterable[Change],
    ranges: Mapping[int, Mapping[int, int] | None] | None = None,
    keys: Collection[str] = (),
) -> Overtaken | None:
    """The first of ``deletes`` (in position order) that refuses ``guard``'s upgrade;
    ``ranges`` holds each purge's ranges by its position (chain -> first version cleared),
    None for a purge still being planned (it refuses every upgrade in its scope);
    ``keys`` are the rows the upgrade writes: a restore of one of them refuses it (its
    notes were written from the notes the restore replaced).

    The one definition of "overtaken by another process" both stores use.
    """
    for change in deletes:
        if change.position <= guard.after or (
            guard.own_origin and change.origin == guard.own_origin
        ):
            continue
        if change.kind == "clear_channel" and change.channel_id in guard.channels:
            return Overtaken(change.position)
        if (
            change.kind == "forget_server"
            and guard.server_id is not None
            and change.server_id == guard.server_id
        ):
            # The turn's server was forgotten: its channels without rows were cleared too.
            return Overtaken(change.position)
        if change.kind == "restore" and change.key in keys:
            return Overtaken(change.position)
        if change.kind in MESSAGE_KINDS and change.channel_id in guard.channels:
            # A message deleted or edited on Discord in a channel whose recent messages the
            # prompt showed: the upgrade may carry its old words (the feed does not say
            # whether that prompt showed the very message, so this errs on refusing).
            return Overtaken(change.position)
        if change.kind == "purge_user":
            if change.user_id in guard.users and (
                change.server_id is None or change.server_id == guard.server_id
            ):
                return Overtaken(change.position)
            if change.server_id is not None and change.server_id != guard.server_id:
                continue
            known = ranges or {}
            if change.position in known and known[change.position] is None:
                return Overtaken(change.position)  # not planned yet: it may reach anything
            cleared = known.get(change.position)
            if cleared and any(
                pin.chain in cleared and pin.version >= cleared[pin.chain] for pin in guard.pins
            ):
                return Overtaken(change.position)
    return None


def deleted_since(row: StoredRow, deletes: Iterable[Change]) -> bool:
    """True when one of ``deletes`` (another process's, after the row was taken) cleared
    the row's channel or its server, or purged the user whose own row it is: writing it behind would
    bring back what was deleted. The one definition both stores use for ``Touch``."""
    for change in deletes:
        if change.kind == "clear_channel" and change.channel_id == row.channel_id:
            return True
        if (
            change.kind == "forget_server"
            and row.server_id is not None
            and change.server_id == row.server_id
        ):
            return True
        if (
            change.kind == "purge_user"
            and row.scope == "user"
            and change.user_id == row.user_id
            and (change.server_id is None or change.server_id == row.server_id)
        ):
            return True
    return False


@dataclass(frozen=True, slots=True)
class SaveDistilled:
    """Write a whole row with its distilled content, as the next version of its chain.

    Consecutive saves of one batch that share one ``lineage`` object (an upgrade's
    user and server rows) are one version: both rows pin it. The chain is the one the
    live row pins (the server row in a server, the user row in a DM), extended; a new
    one when it pins none. The version records ``lineage``: its direct members, its
    edges to the notes it showed. Without a lineage, a save is a version of its own
    that credits no one.

    Its result is :class:`Saved`, or :class:`Overtaken` when ``guard`` refused it (or
    the live row is being cleared by a purge: nothing may extend what it clears).
    """

    row: StoredRow
    guard: Guard | None = None
    lineage: Lineage | None = None
    # Note history (``STMConfig.note_history``): how many earlier versions of the notes
    # are kept besides the ones written (0: none, and the version is not recorded), and
    # whose turn wrote them.
    history: int = 0
    by: int | None = None


@dataclass(frozen=True, slots=True)
class Saved:
    """A committed save: the row's id and the version its content now pins."""

    memory_id: int
    pin: Pin


@dataclass(frozen=True, slots=True)
class DeleteChannel:
    """Delete every row of a channel, any scope or persona."""

    channel_id: int


@dataclass(frozen=True, slots=True)
class ForgetMessages:
    """Messages deleted (or, with ``edited``, edited) on Discord: crude messages are never
    stored, so nothing is deleted; the change goes to the feed (kind ``delete_messages``
    or ``edit_messages``), for every other process to drop them from its windows."""

    channel_id: int
    message_ids: tuple[int, ...]
    edited: bool = False

    def feed_key(self) -> str:
        """The ids as the feed's ``key`` column holds them: decimal, comma-separated."""
        return ",".join(str(i) for i in self.message_ids)


@dataclass(frozen=True, slots=True)
class MarkDeparture:
    """Record that the bot was removed from a server at ``left_at`` (epoch seconds), or, with
    None, that it is back (the record goes). Kept until the server's memory is cleared."""

    server_id: int
    left_at: float | None


@dataclass(frozen=True, slots=True)
class LoadDepartures:
    """Every recorded departure: server id -> when the bot was removed."""


@dataclass(frozen=True, slots=True)
class ForgetServer:
    """Delete a server's rows, channel by channel as :class:`DeleteChannel` does (a
    ``clear_channel`` change each), its settings (a ``settings`` change) and its departure
    record, in one transaction, and add a ``forget_server`` change, for the channels of the
    server other processes hold without rows; the result is the channels cleared."""

    server_id: int


@dataclass(frozen=True, slots=True)
class PurgeUser:
    """Delete the user's own rows, and clear every version of notes that may hold the
    user's words under ``erasure`` (see ``_lineage.py``).

    Its first transaction deletes the own rows, plans the ranges, records them with
    the purge's feed position and clears a first bounded chunk; the result
    (:class:`PurgeResult`) says whether more is left, which :class:`SweepPurge`
    clears in later transactions, interleaved with other work. Rows in ranges not yet
    cleared read as cleared meanwhile, and nothing may extend them.
    """

    user_id: int
    server_id: int | None
    erasure: Erasure = "complete"


@dataclass(frozen=True, slots=True)
class PurgeResult:
    """What a purge's first transaction did: its feed position, the own rows it deleted,
    its ranges (None while it is still being planned: a later ``SweepPurge`` gives them),
    the rows cleared so far, and whether anything is left to do; once planned, ``reach``:
    the other rows its ranges reach and the distilled rows held, by server, as
    :class:`PreviewPurge` counts them but for the user's own distilled rows, counted before
    they went in ``own_distilled`` (of a purge of wide reach, later ``SweepPurge`` steps
    tell its ranges and what they reach a page at a time: :class:`SweepStep`).
    While a purge everywhere is still being planned, ``servers`` says where it may reach,
    so that memory elsewhere need not wait for its plan."""

    position: int
    removed: int
    ranges: tuple[Range, ...] | None
    cleared: int
    more: bool
    reach: PurgePreview | None = None
    own_distilled: dict[int | None, int] = field(default_factory=dict)
    # While it is still being planned (a purge everywhere): the servers its plan may
    # reach, those of the notes the user is a member of (lineage stays in its server).
    servers: frozenset[int | None] | None = None

    def __bool__(self) -> bool:
        """True when it removed or cleared anything (and so left something to scrub)."""
        return bool(self.removed or self.cleared)


# The kinds of work a purge's later steps do, in the order a purge does them: seed its
# plan from the user's memberships, follow the edges of the chains reached, tell its
# ranges a page at a time, clear their rows, finish their chains. A unit of each costs
# differently, so the writer sizes each kind on its own (``SweepPurge.sizes``).
PurgePhase = Literal["seed", "follow", "page", "clear", "finish"]


class PurgeTotals(NamedTuple):
    """What a whole purge did, as the store kept it with the purge, whichever processes
    carried out its steps: the rows it cleared, and (of a purge of wide reach, told a page
    at a time) what all its pages reached; None when the first transaction told it all."""

    cleared: int
    reach: PurgePreview | None = None


class SweepStep(NamedTuple):
    """What a :class:`SweepPurge` step did: the rows it cleared, whether more is left and,
    once the purge is planned, a page of its ranges in chain order (``told`` on the last
    page: the pages are all of them) with what that page reaches (each page also counts
    the distilled rows of the servers it reaches rows in); ``phases``, the kinds of work
    it did, in order (a step that ends one kind may go on with the next)."""

    cleared: int
    more: bool
    ranges: tuple[Range, ...] | None = None
    reach: PurgePreview | None = None
    told: bool = False
    phases: tuple[PurgePhase, ...] = ()
    # Of a page: the chain its ranges come after (0: the first page). A process that
    # sees a page start after a chain other than its last page's end, another process
    # told the pages between.
    after: int = 0
    # Of the purge's last step: what the whole purge did.
    totals: PurgeTotals | None = None


@dataclass(frozen=True, slots=True)
class SweepPurge:
    """The next step of the purge at ``position``: plan further, tell a page of its ranges
    and count what they reach, clear a chunk of its rows, or finish its chains (the result
    is a :class:`SweepStep`)."""

    position: int
    # The share of each chunk this step takes (at most 1): the writer sizes steps by how
    # long the last ones held the write lock. ``sizes`` gives the share of each kind of
    # work on its own (``PurgePhase``); a kind it does not name takes ``size``.
    size: float = 1.0
    sizes: tuple[tuple[str, float], ...] = ()

    def size_of(self, phase: PurgePhase) -> float:
        """The share of its chunk the work of ``phase`` takes in this step."""
        for named, size in self.sizes:
            if named == phase:
                return size
        return self.size


@dataclass(frozen=True, slots=True)
class PreviewPurge:
    """What :class:`PurgeUser` would delete and clear now, without doing it
    (:class:`PurgePreview`)."""

    user_id: int
    server_id: int | None
    erasure: Erasure = "complete"


@dataclass(frozen=True, slots=True)
class PurgePreview:
    """The user's own rows, and the other rows whose notes a purge would clear, by server
    (None: DMs), and the distilled rows each such server holds: counted only up to a
    bound proportional to what the purge clears there (``chains.COUNT_BEYOND`` times it),
    so that a purge of a few entries does not count a server of millions; past it, the
    count is a lower bound and the server is in ``distilled_at_least`` (the purge clears
    under ``1 / COUNT_BEYOND`` of its memory)."""

    own: int
    shared: int
    shared_by_server: dict[int | None, int] = field(default_factory=dict)
    distilled_by_server: dict[int | None, int] = field(default_factory=dict)
    distilled_at_least: frozenset[int] = frozenset()


# The most expired rows one janitor transaction deletes: a pass over many (a bot back
# after days away) is a run of bounded transactions with other work between them.
EXPIRE_CHUNK = 100
# The most rows one janitor transaction looks at: a pass reads the table in the order of
# its ids, a bounded range per transaction, through the primary key.
EXPIRE_SPAN = 5000


@dataclass(frozen=True, slots=True)
class DeleteExpired:
    """Delete rows inactive since before their TTL: of the next ``span`` rows after id
    ``after``, in the order of ids, the first ``limit`` that have expired (each row is
    looked at by one chunk of a pass, however many chunks the pass takes). The result is an
    :class:`Expired`."""

    crude_before: float
    summary_before: float
    limit: int = EXPIRE_CHUNK
    after: int = 0
    span: int = EXPIRE_SPAN


class Expired(NamedTuple):
    """What a :class:`DeleteExpired` chunk did: the rows it deleted, and the id after which
    the next chunk of the pass starts (None: the pass has looked at every row)."""

    deleted: int
    after: int | None = None

    def __bool__(self) -> bool:
        # True when it removed something (what the writer asks of every delete's result:
        # only then is a scrub due), as the row count it replaces was.
        return self.deleted > 0


@dataclass(frozen=True, slots=True)
class LoadRows:
    """Read rows by key; expired ones (by the same thresholds) are deleted instead."""

    keys: tuple[str, ...]
    crude_before: float
    summary_before: float


@dataclass(frozen=True, slots=True)
class LoadRecent:
    """Read the newest unexpired rows of one recall group."""

    scope: Scope
    owner_id: int
    server_id: int | None
    persona_id: int | None
    limit: int
    crude_before: float
    summary_before: float
    # Channels flagged private at capture too (a host's audience decides at each prompt).
    private: bool = False


@dataclass(frozen=True, slots=True)
class LoadChannelKeys:
    """The keys of a channel's unexpired rows, every scope and persona, in key order
    (read only: expired rows are left for the janitor)."""

    channel_id: int
    crude_before: float
    summary_before: float


@dataclass(frozen=True, slots=True)
class NoteVersion:
    """One version of an entry's notes as its history keeps it (never rendered).

    ``version`` names it (the row's write that made it, increasing); ``written_at`` and
    ``written_by`` say when and whose turn wrote it (None: the operator or the host);
    ``restored_from`` names the version it brought back, when a restore wrote it;
    ``pin`` is its place in its chain of provenance (``_lineage.py``); ``current`` marks
    the notes the entry holds now."""

    version: int
    summary: str | None
    categories: dict[str, str]
    written_at: float
    written_by: int | None
    restored_from: int | None
    pin: Pin | None
    current: bool = False


@dataclass(frozen=True, slots=True)
class LoadHistory:
    """The versions of a key's notes the history holds, newest first (the current notes
    first when recorded); empty when there is no row, no notes or no history."""

    key: str


@dataclass(frozen=True, slots=True)
class RestoreNotes:
    """Bring back ``version`` of the notes of ``key`` (a :class:`NoteVersion` of its
    history) as the current notes: a shared change (feed kind ``restore``), which
    refuses every upgrade of the key whose turn began before it (``overtaking``). The
    restored notes keep the row's pin: the chain's head, whose every range covers the
    version restored, so a purge that reaches the restored words reaches them. The
    result is :class:`Restored`; None when that version is no longer held (erased,
    pruned, or the row gone), and nothing changes. ``expected``: the row's version when
    the restore was asked; it applies only while the row is still at it, so a replay from
    the journal after it committed, or a retry that comes after newer notes, changes
    nothing (None: no such check)."""

    key: str
    version: int
    by: int | None = None
    at: float = 0.0
    history: int = 0
    expected: int | None = None


@dataclass(frozen=True, slots=True)
class Restored:
    """A committed restore: the row's new version and the one it brought back."""

    version: int
    restored_from: int


@dataclass(frozen=True, slots=True)
class Scrub:
    """Scrub from the files what committed deletes destroyed (run alone, outside a
    transaction; it fails, to be tried again later, while another connection's read
    transaction keeps the WAL from being emptied).

    On SQLite the destroyed data are the keys of crypto-shredded rows (see
    ``store/_shred.py``) and the cells secure delete zeroed; their old page images
    remain in the WAL until it is checkpointed and truncated.
    """


@dataclass(frozen=True, slots=True)
class SaveServerSettings:
    """Store a server's settings as JSON."""

    server_id: int
    settings_json: str


@dataclass(frozen=True, slots=True)
class SaveOptOut:
    """Store or clear a user's opt-out."""

    user_id: int
    opted_out: bool
    at: float


Op = (
    Touch
    | SaveDistilled
    | DeleteChannel
    | PurgeUser
    | SweepPurge
    | PreviewPurge
    | DeleteExpired
    | LoadRows
    | LoadRecent
    | LoadChannelKeys
    | SaveServerSettings
    | SaveOptOut
    | Scrub
    | ForgetMessages
    | MarkDeparture
    | LoadDepartures
    | ForgetServer
    | LoadHistory
    | RestoreNotes
)

# The changes every process must honour: a delete, a Discord event, a server's removal and
# its cancellation, settings, an opt-out. Each goes through ``Writer.submit_change``: queued
# in order, retried with backoff until durable, journaled while it is pending and replayed
# after a restart (``stm/_journal.py``). No caller waits on its transaction: whoever made it
# applied it here at once, and ``flush()`` says whether it is durable yet.
SharedChange = (
    DeleteChannel
    | PurgeUser
    | ForgetMessages
    | MarkDeparture
    | ForgetServer
    | SaveServerSettings
    | SaveOptOut
    | RestoreNotes
)

# The operations that only read memory rows (the read-through's). A batch of nothing else
# is a read: a store runs it without taking the write lock (``LoadRows`` starts it again as
# a write when it finds expired rows to delete), and the writer does not make it carry the
# write-behind of other keys.
READS = (LoadRows, LoadRecent, LoadChannelKeys)


def reads_only(ops: Sequence[Op]) -> bool:
    """True for a batch of reads alone (``READS``)."""
    return bool(ops) and all(isinstance(op, READS) for op in ops)


ChangeKind = Literal[
    "upgrade",
    "clear_channel",
    "purge_user",
    "settings",
    "opt_out",
    "expire",
    "delete_messages",
    "edit_messages",
    "restore",
    "forget_server",
]
# The kinds that remove crude messages by their Discord ids (see ``ForgetMessages``).
MESSAGE_KINDS: frozenset[str] = frozenset({"delete_messages", "edit_messages"})
# The kinds an upgrade's guard is checked against (``overtaking``), as SQL.
GUARD_KINDS_SQL = (
    "('clear_channel', 'purge_user', 'delete_messages', 'edit_messages', 'restore', "
    "'forget_server')"
)


@dataclass(frozen=True, slots=True)
class Change:
    """One entry of the change feed: what another process's cache must honour.

    ``kind`` says which fields are set:

    - ``upgrade``: ``key`` and ``version``, the row's distilled content after a
      :class:`SaveDistilled` (reload the row, or evict the key, when the cache
      holds an older version);
    - ``clear_channel``: ``channel_id`` (a :class:`DeleteChannel`);
    - ``purge_user``: ``user_id`` and ``server_id`` (None: everywhere), a
      :class:`PurgeUser` (its own rows, its crude messages in every entry, and
      the distilled content it contributed to);
    - ``settings``: ``server_id`` (reload that server's settings);
    - ``opt_out``: ``user_id`` (reload the opt-outs);
    - ``expire``: ``key``, a row deleted for inactivity (by the janitor or a read);
    - ``delete_messages``, ``edit_messages``: ``channel_id``, and the Discord message
      ids (``message_ids``, kept in ``key`` as decimal, comma-separated): messages
      deleted or edited on Discord, to drop from every window (an edit's new text is
      not in the feed: crude text is never written to the database);
    - ``restore``: ``key`` and ``version``, notes brought back from their history by a
      :class:`RestoreNotes` (reload the row, as for an upgrade; an upgrade of the key
      whose turn began before it is refused).
    - ``forget_server``: ``server_id``, a :class:`ForgetServer` (after the
      ``clear_channel`` of each channel that had rows): every entry of the server a
      process holds goes, rows or not, and an upgrade of the server whose turn began
      before it is refused.

    ``origin`` is the :attr:`Store.origin` of the store that wrote it, so a
    process skips its own changes; ``at`` is the writing store's :attr:`Store.clock`
    (its memory's clock) as its batch began.
    Changes hold ids and keys, never memory text.
    """

    position: int
    kind: ChangeKind
    origin: str
    at: float
    key: str | None = None
    version: int | None = None
    channel_id: int | None = None
    user_id: int | None = None
    server_id: int | None = None

    @property
    def message_ids(self) -> frozenset[int]:
        """The Discord message ids of a ``delete_messages`` or ``edit_messages`` change."""
        if self.kind not in MESSAGE_KINDS or not self.key:
            return frozenset()
        found = set()
        for part in self.key.split(","):
            if part.isdigit() and len(part) <= 19:
                found.add(int(part))
        return frozenset(found)


@dataclass(frozen=True, slots=True)
class FeedPage:
    """One read of the change feed.

    ``changes`` are in position order, all after the position asked for.
    ``next_after`` is where the next read starts. ``fell_behind`` is True when
    changes after the position asked for were pruned before this read: the
    follower must drop its whole cache (it cannot know what it missed);
    ``next_after`` is then the feed's position at this read and ``changes`` are
    empty. ``more`` is True when the page was cut at its limit.
    """

    changes: tuple[Change, ...]
    next_after: int
    fell_behind: bool = False
    more: bool = False


class Store(Protocol):
    """A durable store. Every call of ``run`` is one transaction: all of it or none.

    The library ships two (SQLite and PostgreSQL, from :func:`stm.store.open_store`). A
    host passes one to ``ShortTermMemory.open(config, store=...)``, or a wrapper that
    forwards to one (``stm.testing.FaultyStore`` is such a wrapper: it overrides ``run``
    and forwards the rest). A new kind of store is a change to the library, with the
    shared behaviour tests run against it: see ``docs/extending-the-store.md``.

    ``origin`` is a random token naming this open store, written with every change
    it makes to the feed. ``clock`` (epoch seconds, ``time.time`` unless set) stamps
    those changes' ``at``; a :class:`~stm.ShortTermMemory` sets it to its own clock
    when it takes the store, so that the feed's times, like every other time it
    keeps, are that clock's (and its janitor prunes by the same clock).
    """

    origin: str
    clock: Callable[[], float]

    @property
    def empty_at_open(self) -> bool:
        """True only when no durable row can exist that this process does not know of.

        That is: the database was created by this very open (its schema made from
        nothing, inside the write transaction, so of many processes opening a new
        file at once exactly one sees True) or is private to this process (SQLite
        ``:memory:``). Reopening an existing file, even an empty one, gives False:
        another process may have it open. It describes the moment of opening; a
        caller that relies on it afterwards (the "every row is in the cache"
        shortcut) must stop at the first change committed by another process,
        which :meth:`poll_changed` and the feed reveal. On PostgreSQL it is
        always False.
        """
        ...

    async def run(self, ops: Sequence[Op]) -> list[object]:
        """Run ``ops`` in order in one transaction; one result per op.

        The changes the ops make are written to the feed in the same transaction.
        """
        ...

    async def current_position(self) -> int:
        """The position of the newest committed change (0 when there was none)."""
        ...

    async def read_changes(self, after: int, limit: int = 1000) -> FeedPage:
        """The committed changes after position ``after``, oldest first, at most ``limit``."""
        ...

    async def prune_changes(
        self, *, older_than: float, keep_last: int = 0, keep_after: int | None = None
    ) -> int:
        """Delete changes stamped before ``older_than`` (in the writers' clocks), except
        the newest ``keep_last`` and every change after position ``keep_after`` (when
        given); return how many went. A follower that had not read them learns it from
        :attr:`FeedPage.fell_behind`."""
        ...

    async def poll_changed(self) -> bool:
        """True when another connection may have committed since the previous call
        (the first call compares with the moment of opening). Cheap: on SQLite one
        ``PRAGMA data_version``; a change of this process's own never counts there,
        while elsewhere it may (a spurious True is allowed, a missed change is not)."""
        ...

    async def wait_for_change(self, seconds: float) -> bool:
        """Wait until something may have been committed by another connection, at most
        ``seconds``; True when woken, False on timeout. A wake-up only: it may
        come for nothing or be lost, so a follower reads the feed on a timer as well."""
        ...

    async def purge_ranges(self, position: int) -> tuple[Range, ...] | None:
        """The ranges the purge at feed ``position`` cleared (empty when it cleared none,
        or when the feed no longer remembers it); None while it is still being planned."""
        ...

    async def pending_sweeps(self) -> list[int]:
        """Positions of purges whose ranges still hold rows to clear (a process stopped
        mid-way): the writer finishes them first."""
        ...

    async def unplanned_purges(
        self,
    ) -> list[tuple[int, PurgeUser, frozenset[int | None] | None]]:
        """The purges among them not planned yet, by position: whom and where each purges,
        and the servers a purge everywhere may reach (None: not said yet). Until planned,
        what each may reach is not read as cleared, so the memory hides it as it hides
        what a purge of its own may reach."""
        ...

    async def load_server_settings(self) -> dict[int, str]:
        """Every stored server's settings JSON."""
        ...

    async def preview_aside(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user would delete and clear now (as :class:`PreviewPurge`
        counts it), off the write path: no other work waits for it."""
        ...

    @property
    def held_keys(self) -> int:
        """How many rows' encryption keys this store holds in memory between transactions
        (a diagnostic; see :meth:`forget_keys`)."""
        ...

    async def forget_keys(self) -> None:
        """Drop every row's encryption key held in memory between transactions: another process
        committed changes (a purge, a clear), and the keys of rows it deleted must not
        outlive them here until this store's next transaction."""
        ...

    async def load_opt_outs(self) -> set[int]:
        """Every user who opted out."""
        ...

    async def close(self) -> None:
        """Close the store."""
        ...


# -- what a store tells an operator (the read-only view ``inspect.open_inspector`` opens) --


@dataclass(frozen=True, slots=True)
class StoreStats:
    """What the database holds, counted."""

    entries: int
    entries_by_scope: dict[str, int]
    distilled: int
    servers: int
    users: int
    expired: int
    near_expiry: int
    opt_outs: int
    server_settings: int
    schema_version: int
    database_bytes: int
    feed_position: int | None = None


@dataclass(frozen=True, slots=True)
class UserHoldings:
    """Everything a database holds about one user."""

    user_id: int
    own: list[StoredRow]
    # Other rows whose notes may hold the user's words (what a purge would clear).
    contributed: list[StoredRow]
    opted_out_since: float | None
    # The note history of each of the user's own rows (by key), newest first.
    history: dict[str, list[NoteVersion]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CheckReport:
    """The result of the database's own integrity and foreign-key checks."""

    schema_version: int
    code_version: int
    integrity: list[str] = field(default_factory=list)
    foreign_keys: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when the file is sound and its schema is the one this code writes."""
        return (
            self.integrity == ["ok"]
            and not self.foreign_keys
            and self.schema_version == self.code_version
        )


@runtime_checkable
class Inspector(Protocol):
    """The operator's read-only view of a store."""

    async def stats(self, thresholds: tuple[float, float], soon: tuple[float, float]) -> StoreStats:
        """Counts; ``thresholds`` and ``soon`` are (crude_before, summary_before) for now and
        for the end of the "near expiry" window."""
        ...

    async def row(self, key: str) -> StoredRow | None:
        """The row under ``key``, expired or not."""
        ...

    async def rows_of_channel(self, channel_id: int) -> list[StoredRow]:
        """Every row of a channel, any scope or persona."""
        ...

    async def note_history(self, key: str) -> list[NoteVersion]:
        """The versions of the notes of ``key`` its history keeps, newest first."""
        ...

    async def holdings_of_user(self, user_id: int, erasure: Erasure = "complete") -> UserHoldings:
        """The user's own rows, the other rows whose notes a purge of the user under
        ``erasure`` would clear (they may hold the user's words), and the opt-out."""
        ...

    async def members(self, pin: Pin) -> list[int]:
        """Everyone whose words a prompt of ``pin``'s chain showed directly, up to its
        version."""
        ...

    async def preview_purge(
        self, user_id: int, server_id: int | None, erasure: Erasure = "complete"
    ) -> PurgePreview:
        """What a purge of the user (within ``server_id``, when given) would delete and
        clear now, by server: what ``ShortTermMemory.preview_purge`` counts."""
        ...

    async def count_expired(self, thresholds: tuple[float, float]) -> int:
        """Rows the janitor would delete now."""
        ...

    async def check(self) -> CheckReport:
        """Integrity and foreign-key checks, and the schema version."""
        ...

    async def schema_version(self) -> int:
        """The schema version the database records."""
        ...

    async def close(self) -> None:
        """Close the store."""
        ...
