"""The operations of ``_base.py``, written once for both stores as procedures.

What every ``Op`` does inside its batch's transaction: which statements it runs,
which changes it adds to the feed, what it returns; the guards of a run of
upgrades, write-behind that never brings back what another process deleted or
what expired, the expiry of rows read. As in ``chains``, a procedure yields what
it needs and receives the answer; besides ``chains.Step`` it yields the requests
only a store can answer, each a small class below:

- :class:`Rows`: memory rows selected, decoded (the store decrypts their text);
- :class:`Many`: one statement for many rows, bound by position (write-behind);
- :class:`Sealing` and :class:`Write`: an upgrade's rows written, their text
  encrypted under their own keys (``_shred.py``), read once per run;
- :class:`Dropped`: rows deleted (a store that remembers their keys forgets them);
- :class:`Reading`: whether the batch runs as a read (a batch of reads alone), and
  :class:`Writing`: the operation is about to write (such a batch is then run again as a
  write);
- ``feed.Position``: the position of a change, written now.

Each store answers them with its own connection (``SQLiteStore``'s thread,
asyncpg) and spells what differs through its :class:`~stm.store._dialect.Dialect`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .._lineage import Pin
from . import _chains as chains
from . import _shred as shred
from ._base import (
    GUARD_KINDS_SQL,
    ROW_COLUMNS,
    Change,
    ChangeKind,
    DeleteChannel,
    DeleteExpired,
    Expired,
    ForgetMessages,
    ForgetServer,
    LoadChannelKeys,
    LoadDepartures,
    LoadHistory,
    LoadRecent,
    LoadRows,
    MarkDeparture,
    NoteVersion,
    Op,
    Overtaken,
    PreviewPurge,
    PurgeUser,
    Restored,
    RestoreNotes,
    Saved,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    Scrub,
    StoredRow,
    SweepPurge,
    Touch,
    deleted_since,
    overtaking,
)
from ._chains import Step, live_of, upgrades
from ._dialect import Dialect
from ._feed import Changes, Position, deletes_after

__all__ = [
    "KEEPS_KEYS",
    "Dropped",
    "Many",
    "Procedure",
    "Reading",
    "Request",
    "Rows",
    "Sealing",
    "Writes",
    "Writing",
    "apply",
    "batch",
    "categories_json",
    "identity_values",
    "note_history",
    "refusal",
    "save_many",
    "save_sql",
    "save_values",
    "touch",
]

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Rows:
    """Memory rows, decoded: ``where`` (and what follows it) after the store's own
    ``SELECT m.id, ROW_COLUMNS, SELECT_TAIL ... FROM short_term_memories m``."""

    where: str
    params: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Sealing:
    """A run of upgrades will write these rows: their live keys are read now, once."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Writes:
    """Write each ``(row, pin)`` in order, the row with its distilled content as version
    ``pin``, under its own key (see :class:`Sealing`); the answer is each row's ``(id,
    version)``, in order. One request for a run of upgrades: PostgreSQL sends them in
    one round trip."""

    rows: tuple[tuple[StoredRow, Pin], ...]


@dataclass(frozen=True, slots=True)
class Many:
    """Run ``sql`` once per row of ``rows``, its values numbered (``Dialect.values``): for
    the statements run for many rows at once, which bind tuples faster than mappings."""

    sql: str
    rows: Sequence[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class Dropped:
    """These rows were deleted, and their keys with them."""

    keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Reading:
    """Whether the batch runs as a read transaction (``base.reads_only``): True or False.
    A read looks before it writes only then; in a write transaction it just writes."""


@dataclass(frozen=True, slots=True)
class Writing:
    """A read is about to write (``LoadRows`` found expired rows to delete). A store that
    runs a batch of reads alone (``base.reads_only``) as a read transaction starts it
    again as a write transaction; inside a write transaction the answer is None."""


Request = Step | Rows | Many | Sealing | Writes | Dropped | Reading | Writing | Position
Procedure = Generator[Request, Any, _T]

# Operations that change no row's key (upgrades follow the keys they change themselves);
# any other, a delete above all, may destroy keys a store remembers between batches.
KEEPS_KEYS = (
    SaveDistilled,
    Touch,
    LoadRecent,
    LoadChannelKeys,
    SaveServerSettings,
    SaveOptOut,
    PreviewPurge,
    LoadHistory,
)

# -- statements -------------------------------------------------------------------------
_IDENTITY_COLUMNS = (
    "key, scope, server_id, user_id, channel_id, persona_id, parent_channel_id, channel_name, "
    "server_name, channel_private, turns_since_refresh, last_refreshed_turn, updated_at"
)


@functools.cache
def _keep_identity(dialect: Dialect) -> str:
    return (
        "parent_channel_id = excluded.parent_channel_id, "
        "channel_name = coalesce(excluded.channel_name, m.channel_name), "
        "server_name = coalesce(excluded.server_name, m.server_name), "
        "channel_private = excluded.channel_private, "
        f"updated_at = {dialect.greatest}(m.updated_at, excluded.updated_at)"
    )


@functools.cache
def _identity(dialect: Dialect) -> str:
    values = dialect.values(len(_IDENTITY_COLUMNS.split(",")))
    return (
        f"INSERT INTO short_term_memories AS m ({_IDENTITY_COLUMNS}) VALUES ({values}) "
        f"ON CONFLICT (key) DO UPDATE SET {_keep_identity(dialect)}"
    )


@functools.cache
def _touch_sql(dialect: Dialect) -> str:
    return (
        _identity(dialect) + ", turns_since_refresh = excluded.turns_since_refresh, "
        "last_refreshed_turn = excluded.last_refreshed_turn"
    )


@functools.cache
def _deposit_sql(dialect: Dialect) -> str:
    """The write-behind of an entry whose row was not read yet: its turns not written
    before are added to the row's (the entry adds the row's count, less what it added, when
    it reads the row; ``ReadThrough._merge``)."""
    return (
        _identity(dialect) + ", turns_since_refresh = "
        "m.turns_since_refresh + excluded.turns_since_refresh, "
        f"last_refreshed_turn = {dialect.greatest}(m.last_refreshed_turn, "
        "excluded.last_refreshed_turn)"
    )


def save_sql(values: str, dialect: Dialect) -> str:
    """The upsert of an upgraded row, its ``values`` (in ``save_values`` order, then the
    row's version, 1) spelled by the store; it returns the row's id and version."""
    return (
        f"INSERT INTO short_term_memories AS m ({ROW_COLUMNS}, key_slot, chain_id, "
        f"chain_version, version) VALUES ({values}, 1) "
        f"ON CONFLICT (key) DO UPDATE SET {_keep_identity(dialect)}, "
        "summary = excluded.summary, categories = excluded.categories, "
        "turns_since_refresh = excluded.turns_since_refresh, "
        "last_refreshed_turn = excluded.last_refreshed_turn, key_slot = excluded.key_slot, "
        "chain_id = excluded.chain_id, chain_version = excluded.chain_version, "
        "version = m.version + 1 RETURNING id, version"
    )


def save_values(
    row: StoredRow, pin: Pin, sealed: tuple[Any, Any, int | None], dialect: Dialect
) -> tuple[Any, ...]:
    """What ``save_sql`` writes of ``row`` at ``pin``, its text ``sealed`` (summary,
    categories and key slot as stored): ``ROW_COLUMNS``, ``key_slot``, the chain and its
    version (none for a row without distilled content)."""
    summary, categories, slot = sealed
    version = chains.pinned(row, pin)
    return (
        row.key, row.scope, row.server_id, row.user_id, row.channel_id, row.persona_id,
        row.parent_channel_id, row.channel_name, row.server_name,
        dialect.flag(row.channel_private), summary, categories, row.turns_since_refresh,
        row.last_refreshed_turn, row.updated_at, slot,
        None if version is None else version.chain,
        None if version is None else version.version,
    )  # fmt: skip


def categories_json(row: StoredRow) -> str:
    """The row's categories as stored before sealing."""
    return json.dumps(row.categories, ensure_ascii=False) if row.categories else "{}"


def identity_values(row: StoredRow, dialect: Dialect) -> tuple[Any, ...]:
    """What the identity upserts write of ``row``, in ``_IDENTITY_COLUMNS`` order."""
    return (
        row.key, row.scope, row.server_id, row.user_id, row.channel_id, row.persona_id,
        row.parent_channel_id, row.channel_name, row.server_name,
        dialect.flag(row.channel_private), row.turns_since_refresh, row.last_refreshed_turn,
        row.updated_at,
    )  # fmt: skip


def _equal(column: str, name: str, value: int | None) -> str:
    return f"{column} IS NULL" if value is None else f"{column} = :{name}"


# -- the operations ---------------------------------------------------------------------
def batch(ops: Sequence[Op], feed: Changes, dialect: Dialect) -> Procedure[list[object]]:
    """Run ``ops`` in order inside the batch's transaction; one result per op. A run of
    upgrades (an upgrade storm's whole batch) shares its reads (``save_many``)."""
    results: list[object] = []
    index = 0
    while index < len(ops):
        end = index
        while end < len(ops) and isinstance(ops[end], SaveDistilled):
            end += 1
        if end > index:
            saves = [op for op in ops[index:end] if isinstance(op, SaveDistilled)]
            results.extend((yield from save_many(saves, feed, dialect)))
            index = end
        else:
            results.append((yield from apply(ops[index], feed, dialect)))
            index += 1
    return results


def apply(op: Op, feed: Changes, dialect: Dialect) -> Procedure[object]:
    """Run one operation inside the batch's transaction, adding the changes it makes to
    ``feed``; returns its result."""
    match op:
        case Scrub():
            return None  # done by the store after the commit, outside any transaction
        case Touch():
            return (yield from touch(op, feed, dialect))
        case SaveDistilled():
            return (yield from save_many([op], feed, dialect))[0]
        case ForgetMessages(channel_id):
            # The channel's notes are kept, marked for rewriting (``_messages.py``); their
            # earlier versions, which may hold the message and cannot be rewritten, go:
            # no restore can bring it back.
            yield Step(
                "DELETE FROM stm_note_versions WHERE memory_id IN "
                "(SELECT id FROM short_term_memories WHERE channel_id = :channel)",
                {"channel": channel_id},
                "exec",
            )
            kind: ChangeKind = "edit_messages" if op.edited else "delete_messages"
            feed.append((kind, op.feed_key(), None, channel_id, None, None))
            return len(op.message_ids)
        case MarkDeparture(server_id, left_at):
            if left_at is None:
                sql = "DELETE FROM stm_departures WHERE server_id = :server"
            else:
                sql = (
                    "INSERT INTO stm_departures (server_id, left_at) VALUES (:server, :at) "
                    "ON CONFLICT (server_id) DO NOTHING"
                )
            yield Step(sql, {"server": server_id, "at": left_at}, "exec")
            return None
        case LoadDepartures():
            rows = yield Step("SELECT server_id, left_at FROM stm_departures", {}, "all")
            return {int(row[0]): float(row[1]) for row in rows}
        case ForgetServer(server_id):
            # Every channel (threads included) that has rows, cleared as ``DeleteChannel``
            # clears one, in the same transaction as the settings and the departure: no
            # read before it that a failure could separate from it.
            rows = yield Step(
                "SELECT DISTINCT channel_id FROM short_term_memories WHERE server_id = :server",
                {"server": server_id},
                "all",
            )
            channels = sorted(int(row[0]) for row in rows)
            for channel_id in channels:
                yield from _delete_channel(channel_id, feed)
            for table in ("stm_server_settings", "stm_departures"):
                yield Step(
                    f"DELETE FROM {table} WHERE server_id = :server", {"server": server_id}, "exec"
                )
            feed.append(("settings", None, None, None, None, server_id))
            # Last: the server's channels that other processes hold without rows (recent
            # messages, entries not written behind yet) are cleared there too.
            feed.append(("forget_server", None, None, None, None, server_id))
            return channels
        case DeleteChannel(channel_id):
            return (yield from _delete_channel(channel_id, feed))
        case PurgeUser(user_id, server_id, erasure):
            position = yield Position(("purge_user", None, None, None, user_id, server_id))
            return (yield from chains.purge(user_id, server_id, erasure, position))
        case SweepPurge(position):
            return (yield from chains.sweep(position, op.size_of))
        case PreviewPurge(user_id, server_id, erasure):
            return (yield from chains.preview(user_id, server_id, erasure))
        case DeleteExpired():
            return (yield from _expire_chunk(op, feed, dialect))
        case LoadRows(keys, crude_before, summary_before):
            if not keys:
                return []
            where, named = dialect.in_list("key", "keys", keys, "text[]")
            # In a write transaction the expired rows are deleted at once; a read looks
            # for them first, so that one that finds none (most) writes nothing.
            reading = yield Reading()
            if reading:
                expired = yield Step(
                    f"SELECT key FROM short_term_memories WHERE {where} AND {dialect.expired()}",
                    {"crude": crude_before, "summary": summary_before, **named},
                    "all",
                )
                if expired:
                    yield Writing()  # raises: the batch is run again as a write
            else:
                yield from _expire(keys, crude_before, summary_before, feed, dialect)
            return (yield Rows(f"WHERE {where}", named))
        case LoadRecent():
            return (yield _recent(op, dialect))
        case LoadHistory(key):
            return (yield from note_history(key))
        case RestoreNotes():
            return (yield from _restore(op, feed))
        case LoadChannelKeys(channel_id, crude_before, summary_before):
            rows = yield Step(
                "SELECT key FROM short_term_memories WHERE channel_id = :channel "
                f"AND NOT ({dialect.expired()}) ORDER BY key",
                {"channel": channel_id, "crude": crude_before, "summary": summary_before},
                "all",
            )
            return [row[0] for row in rows]
        case SaveServerSettings(server_id, settings_json):
            yield Step(
                "INSERT INTO stm_server_settings (server_id, settings) VALUES (:server, :settings) "
                "ON CONFLICT (server_id) DO UPDATE SET settings = excluded.settings",
                {"server": server_id, "settings": settings_json},
                "exec",
            )
            feed.append(("settings", None, None, None, None, server_id))
            return None
        case SaveOptOut(user_id, opted_out, at):
            if opted_out:
                sql = (
                    "INSERT INTO stm_user_opt_outs (user_id, since) VALUES (:user, :at) "
                    "ON CONFLICT (user_id) DO NOTHING"
                )
            else:
                sql = "DELETE FROM stm_user_opt_outs WHERE user_id = :user"
            yield Step(sql, {"user": user_id, "at": at}, "exec")
            feed.append(("opt_out", None, None, None, user_id, None))
            return None
    raise TypeError(f"unknown store operation {op!r}")  # pragma: no cover


# -- note history ---------------------------------------------------------------------------
# The version just written, copied from its row (its text as sealed, under the row's key).
_RECORD_VERSION = (
    "INSERT INTO stm_note_versions (memory_id, seq, key_slot, chain_id, chain_version, "
    "summary, categories, written_at, written_by, restored_from) "
    "SELECT id, version, key_slot, chain_id, chain_version, summary, categories, "
    "CAST(:at AS DOUBLE PRECISION), CAST(:by AS BIGINT), CAST(:restored AS BIGINT) "
    "FROM short_term_memories WHERE id = :id AND key_slot IS NOT NULL"
)
# All but the newest ``keep`` versions of a row go (the current one and the earlier ones
# the setting keeps: ``history + 1``).
_PRUNE_VERSIONS = (
    "DELETE FROM stm_note_versions WHERE memory_id = :id AND seq <= (SELECT seq FROM "
    "stm_note_versions WHERE memory_id = :id ORDER BY seq DESC LIMIT 1 OFFSET :keep)"
)


def note_history(key: str) -> Procedure[list[NoteVersion]]:
    """The versions the history holds of the row ``key``'s notes, newest first: only those
    sealed under its live key (any other is erased), none while a purge clears the row."""
    rows = yield Step(
        "SELECT v.seq, v.summary, v.categories, v.written_at, v.written_by, v.restored_from, "
        "v.chain_id, v.chain_version, k.key, m.version FROM short_term_memories m "
        "JOIN stm_note_versions v ON v.memory_id = m.id AND v.key_slot = m.key_slot "
        "JOIN stm_keys k ON k.slot = m.key_slot WHERE m.key = :key AND NOT EXISTS ("
        "SELECT 1 FROM stm_purge_ranges r WHERE r.done = 0 AND r.chain_id = m.chain_id "
        "AND r.from_version <= m.chain_version) ORDER BY v.seq DESC",
        {"key": key},
        "all",
    )
    found = []
    for seq, summary, categories, at, by, restored, chain, chain_version, secret, now in rows:
        secret = bytes(secret)
        text = shred.open_stored(secret, key, summary)
        cats = shred.open_stored(secret, key, categories)
        loaded = json.loads(cats) if cats else {}
        found.append(
            NoteVersion(
                version=int(seq),
                summary=text,
                categories={str(k): str(v) for k, v in loaded.items()}
                if isinstance(loaded, dict)
                else {},
                written_at=float(at),
                written_by=None if by is None else int(by),
                restored_from=None if restored is None else int(restored),
                pin=None if chain is None else Pin(int(chain), int(chain_version)),
                current=int(seq) == int(now),
            )
        )
    return found


def _restore(op: RestoreNotes, feed: Changes) -> Procedure[Restored | None]:
    """Bring back a version the history holds as the row's notes (see ``RestoreNotes``)."""
    found = yield Step(
        "SELECT m.id, v.summary, v.categories FROM short_term_memories m "
        "JOIN stm_note_versions v ON v.memory_id = m.id AND v.key_slot = m.key_slot "
        "WHERE m.key = :key AND v.seq = :seq "
        "AND (CAST(:expected AS BIGINT) IS NULL OR m.version = CAST(:expected AS BIGINT)) "
        "AND NOT EXISTS (SELECT 1 FROM stm_purge_ranges r WHERE r.done = 0 "
        "AND r.chain_id = m.chain_id AND r.from_version <= m.chain_version)",
        {"key": op.key, "seq": op.version, "expected": op.expected},
        "one",
    )
    if found is None:
        # Erased, pruned, never held, or the row moved on since the restore was asked
        # (it committed already, or newer notes came): nothing comes back.
        return None
    memory_id, summary, categories = found
    # Same key, content not empty: the triggers neither destroy the key nor the history.
    row = yield Step(
        "UPDATE short_term_memories SET summary = :summary, categories = :categories, "
        "version = version + 1 WHERE id = :id RETURNING version",
        {"summary": summary, "categories": categories, "id": memory_id},
        "one",
    )
    version = int(row[0])
    if op.history > 0:
        yield Step(
            _RECORD_VERSION,
            {"at": op.at, "by": op.by, "restored": op.version, "id": memory_id},
            "exec",
        )
        yield Step(_PRUNE_VERSIONS, {"id": memory_id, "keep": op.history + 1}, "exec")
    feed.append(("restore", op.key, version, None, op.by, None))
    return Restored(version, op.version)


def _delete_channel(channel_id: int, feed: Changes) -> Procedure[int]:
    """Delete every row of a channel, any scope or persona; returns how many."""
    gone = yield Step(
        "DELETE FROM short_term_memories WHERE channel_id = :channel RETURNING key, chain_id",
        {"channel": channel_id},
        "all",
    )
    yield from chains.left([(row[0], row[1]) for row in gone])
    feed.append(("clear_channel", None, None, channel_id, None, None))
    return len(gone)


def _expire_chunk(op: DeleteExpired, feed: Changes, dialect: Dialect) -> Procedure[Expired]:
    """Delete the first ``op.limit`` expired rows of the ``op.span`` rows after id
    ``op.after``: a pass reads every row once, a bounded range of the primary key per
    transaction, however many chunks it takes. No index by time is kept for it: such an
    index changes with every row's time, and on PostgreSQL it held, between vacuums and
    after them, entries of times rows no longer had (W6: more than the table's other
    indexes together)."""
    edge = yield Step(
        "SELECT id FROM short_term_memories WHERE id > :after ORDER BY id LIMIT 1 OFFSET :skip",
        {"after": op.after, "skip": op.span - 1},
        "one",
    )
    until = None if edge is None else int(edge[0])
    found = yield Step(
        "SELECT id FROM short_term_memories WHERE id > :after"
        + ("" if until is None else " AND id <= :until")
        + f" AND {dialect.expired()} ORDER BY id LIMIT :limit",
        {"crude": op.crude_before, "summary": op.summary_before, "limit": op.limit}
        | {"after": op.after}
        | ({} if until is None else {"until": until}),
        "all",
    )
    gone: list[Any] = []
    if found:
        where, named = dialect.in_list("id", "ids", [row[0] for row in found], "bigint[]")
        gone = yield Step(
            f"DELETE FROM short_term_memories WHERE {where} RETURNING key, chain_id",
            named,
            "all",
        )
        yield from chains.left([(row[0], row[1]) for row in gone])
        feed.extend(("expire", row[0], None, None, None, None) for row in gone)
    yield from chains.collect()  # chains that clears and purges left end here too
    if len(found) == op.limit:
        return Expired(len(gone), int(found[-1][0]))
    return Expired(len(gone), until)


def _recent(op: LoadRecent, dialect: Dialect) -> Rows:
    """The newest unexpired rows of one recall group."""
    if op.scope == "server":
        where = "scope = 'server' AND server_id = :owner AND user_id IS NULL"
    else:
        where = f"scope = 'user' AND {_equal('server_id', 'server', op.server_id)} "
        where += "AND user_id = :owner"
    where += f" AND {_equal('persona_id', 'persona', op.persona_id)}"
    if not op.private:
        where += " AND channel_private = FALSE"
    params: dict[str, Any] = {"owner": op.owner_id, "limit": op.limit}
    params |= {"crude": op.crude_before, "summary": op.summary_before}
    if op.server_id is not None and op.scope == "user":
        params["server"] = op.server_id
    if op.persona_id is not None:
        params["persona"] = op.persona_id
    return Rows(
        f"WHERE {where} AND NOT ({dialect.expired()}) "
        "ORDER BY updated_slot DESC, updated_at DESC LIMIT :limit",
        params,
    )


def _expire(
    keys: Sequence[str], crude_before: float, summary_before: float, feed: Changes, dialect: Dialect
) -> Procedure[None]:
    """Delete those of the rows ``keys`` that have expired (an expired row is absent)."""
    where, named = dialect.in_list("key", "keys", keys, "text[]")
    gone = yield Step(
        f"DELETE FROM short_term_memories WHERE {where} AND {dialect.expired()} "
        "RETURNING key, chain_id",
        {"crude": crude_before, "summary": summary_before, **named},
        "all",
    )
    rows = [(row[0], row[1]) for row in gone]
    yield from chains.left(rows)
    feed.extend(("expire", key, None, None, None, None) for key, _ in rows)
    if rows:
        yield Dropped(tuple(key for key, _ in rows))


# Deletes that write-behind must not undo (see ``deleted_since``).
_TOUCH_KINDS_SQL = "('clear_channel', 'purge_user', 'forget_server')"


def touch(op: Touch, feed: Changes, dialect: Dialect) -> Procedure[int]:
    """Write behind identity rows and counters, never over what others deleted or what
    expired (see ``Touch``); returns how many rows were written."""
    rows = op.rows
    if op.crude_before is not None and op.summary_before is not None and rows:
        # An expired row is absent: activity starts a new one, it does not revive the old.
        keys = [row.key for row in rows]
        yield from _expire(keys, op.crude_before, op.summary_before, feed, dialect)
    if op.after is not None and rows:
        deletes = yield from deletes_after(op.after, _TOUCH_KINDS_SQL, feed.origin)
        if deletes:
            rows = tuple(row for row in rows if not deleted_since(row, deletes))
    known = [identity_values(r, dialect) for r in rows if r.counters_known]
    unknown = [identity_values(r, dialect) for r in rows if not r.counters_known]
    if known:
        yield Many(_touch_sql(dialect), known)
    if unknown:
        yield Many(_deposit_sql(dialect), unknown)
    return len(rows)


def save_many(
    saves: Sequence[SaveDistilled], feed: Changes, dialect: Dialect
) -> Procedure[list[object]]:
    """A run of upgrades, in order; one result per save (``Saved``, or ``Overtaken``).

    The guards share one read of the feed's deletes; the saves of one upgrade (one
    lineage) are one version of their chain."""
    results: list[object] = [None] * len(saves)
    guards = [save.guard for save in saves if save.guard is not None]
    deletes: list[Change] = []
    ranges: dict[int, dict[int, int] | None] = {}
    pruned_through = 0
    if guards:
        after = min(guard.after for guard in guards)
        row = yield Step("SELECT pruned_through FROM stm_feed WHERE id = 1", {}, "one")
        pruned_through = int(row[0])
        deletes = yield from deletes_after(after, GUARD_KINDS_SQL)
        ranges = yield from chains.guard_ranges(guards, deletes)
    # Distilled text is stored encrypted under the row's own key (see _shred.py).
    yield Sealing(tuple(save.row.key for save in saves))
    groups = upgrades(saves)
    versions = chains.Versions(dialect)
    shown = (
        item
        for save in saves
        if save.lineage is not None
        for item in (*save.lineage.own, *save.lineage.other)
        if isinstance(item, str)
    )
    yield from versions.load([*(saves[live_of(g, saves)].row.key for g in groups), *shown])
    writes: list[tuple[int, Pin]] = []  # (save, its version), in order
    for group in groups:
        refused = refusal(group, saves, pruned_through, deletes, ranges)
        pin: Pin | int | None = None
        if refused is None:
            live = saves[live_of(group, saves)].row
            pin = yield from versions.extend(live.key, live.server_id)
            if isinstance(pin, int):
                refused = Overtaken(pin)  # a purge is clearing what it would extend
        if refused is not None or not isinstance(pin, Pin):
            for index in group:
                results[index] = refused
            continue
        lineage = saves[group[0]].lineage
        if lineage is not None:
            versions.record(pin, lineage, live.server_id)
        for index in group:
            writes.append((index, pin))
            versions.wrote(saves[index].row, pin)
    if writes:
        written = yield Writes(tuple((saves[index].row, pin) for index, pin in writes))
        recorded = []
        for (index, pin), (memory_id, version) in zip(writes, written, strict=True):
            feed.append(("upgrade", saves[index].row.key, int(version), None, None, None))
            results[index] = Saved(int(memory_id), pin)
            recorded.append((int(memory_id), saves[index]))
        # Note history: the versions just written, and all but the newest few go; with
        # history off, none is written and those kept before it was turned off go.
        if any(s.history > 0 for _, s in recorded):
            yield Step(
                _RECORD_VERSION,
                [
                    {"at": s.row.updated_at, "by": s.by, "restored": None, "id": i}
                    for i, s in recorded
                    if s.history > 0
                ],
                "many",
            )
        yield Step(
            _PRUNE_VERSIONS,
            [{"id": i, "keep": s.history + 1 if s.history else 0} for i, s in recorded],
            "many",
        )
    yield from versions.finish()
    return results


def refusal(
    group: Sequence[int],
    saves: Sequence[SaveDistilled],
    pruned_through: int,
    deletes: list[Change],
    ranges: Mapping[int, Mapping[int, int] | None],
) -> Overtaken | None:
    """Why one upgrade's guard refuses it, or None."""
    for index in group:
        guard = saves[index].guard
        if guard is None:
            continue
        if guard.after < pruned_through:
            return Overtaken(pruned_through)  # what came after it is no longer known
        keys = [saves[i].row.key for i in group]
        overtaken = overtaking(guard, deletes, ranges, keys) if deletes else None
        if overtaken is not None:
            return overtaken
    return None
