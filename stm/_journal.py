"""Changes acknowledged as pending, kept in a local file until the database has them.

When a change other processes must honour (``SharedChange``: a purge, a channel
clear, a message deleted or edited on Discord, a server's removal or return, a
server's settings, an opt-out) cannot be committed (the database is locked, full,
unreachable), it is already in force in this process and whoever made it was told
it is done or pending. The writer appends the change, fsynced, to this journal
(appending needs neither the database nor its lock) and replays it at the head of
its queue when the memory is next opened, before any read can serve what it
deleted; once a change is committed its record is removed. A record holds ids,
times and a server's settings, never a message's text.

Where (``STM_JOURNAL``, else a default per store):

- SQLite: ``<database>-stm-pending`` beside the file, which it follows when the
  file is moved or backed up;
- PostgreSQL: ``pending-<hash>`` in the user's state folder
  (``$XDG_STATE_HOME/discord-stm``, else ``~/.local/state/discord-stm``), the
  hash being of the URL without its password, so two databases never share a
  journal and a bot finds its own whatever folder it is started from. The
  pending changes are not kept in the database itself: they are written
  exactly when the database cannot take them.
- ``:memory:``: none (nothing survives a restart to be undone).

The file survives what crashes leave:

- each record is one line, ``<crc32 in hex> <json>``, and every append starts
  with a newline, so a record torn by a power loss ends at the next newline and
  never swallows the record after it;
- reading takes any bytes (bad encodings, deep nesting, huge lines, truncation
  at any offset): what does not check out is skipped, and the number skipped is
  logged;
- several processes may share one journal (shards of a bot, the operator's
  command line): appends and removals hold an exclusive ``flock`` and re-open
  the file if another process replaced it meanwhile;
- lines of the first format (one JSON object per line, no checksum) are still
  read, so a journal left by an earlier version is replayed; a whole record of a
  kind this version does not know is kept as it is, for the version that wrote it.

An append that fails raises OSError: the writer reports the changes it held as
at risk (``DurabilityError.at_risk``) instead of only logging it.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import logging
import math
import os
import re
import secrets
import time
import zlib
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from ._config import MAX_NOTE_HISTORY, STMConfig
from ._errors import StoreError
from ._keys import parse_key
from ._lineage import ERASURE_POLICIES, Erasure
from ._redact import redact_url
from .store import is_postgres_url
from .store._base import (
    DeleteChannel,
    ForgetMessages,
    ForgetServer,
    MarkDeparture,
    PurgeUser,
    RestoreNotes,
    SaveOptOut,
    SaveServerSettings,
    SharedChange,
)

__all__ = ["MAX_RECORD", "SUFFIX", "Journal", "Pending", "default_path"]

log = logging.getLogger("stm.journal")
SUFFIX = "-stm-pending"
# Most records take some 100 bytes; a server's settings (25 categories of 1,100
# characters, escaped) or a thousand message ids a few hundred KB at most. A longer line
# is damage, skipped without being held whole.
MAX_RECORD = 1 << 20
_CHUNK = 1 << 16
# How long an append waits for another process's append or removal (a few ms each).
_LOCK_WAIT_SECONDS = 2.0
_ID_LIMIT = 2**63
# Where a record starts: its checksum, a space, its JSON object; and how long that object
# can be.
_START = re.compile(rb"[0-9a-f]{8} \{")
_MAX_PAYLOAD = MAX_RECORD - 9
# The most message ids one record holds (``memory.MAX_MESSAGE_IDS``).
_MAX_MESSAGE_IDS = 1000


@dataclass(frozen=True, slots=True)
class Pending:
    """One pending change and the id of its record."""

    id: str
    op: SharedChange


def default_path(database: str) -> Path | None:
    """Where the journal of ``database`` is kept when ``STM_JOURNAL`` is not set."""
    if not database or database == ":memory:" or database.startswith("file::memory:"):
        return None
    if is_postgres_url(database):
        identity = redact_url(database.replace("postgres://", "postgresql://", 1))
        digest = hashlib.sha256(identity.encode()).hexdigest()[:20]
        return _state_folder() / f"pending-{digest}"
    return Path(database + SUFFIX).expanduser()


def _state_folder() -> Path:
    state = os.environ.get("XDG_STATE_HOME", "").strip()
    base = Path(state) if state and os.path.isabs(state) else Path.home() / ".local" / "state"
    return base / "discord-stm"


class Journal:
    """The pending-change journal of one database."""

    def __init__(self, path: Path) -> None:
        self.path = path
        # Each process's records are told apart by this prefix of their ids.
        self._prefix = secrets.token_hex(6)
        self._count = 0
        # Damaged lines the last ``load`` skipped.
        self.skipped = 0

    @classmethod
    def for_config(cls, config: STMConfig) -> Journal | None:
        """``STM_JOURNAL``, else the default of the store ``STM_DATABASE`` names."""
        if config.journal is not None:
            return cls(Path(config.journal).expanduser())
        path = default_path(config.database)
        return None if path is None else cls(path)

    def new_id(self) -> str:
        """An id no other record of any process has."""
        self._count += 1
        return f"{self._prefix}-{self._count}"

    # -- reading --------------------------------------------------------------------
    def load(self, *, replaying: bool = True) -> list[Pending]:
        """The changes still pending, in order, each once (``replaying=False``: only read,
        as the command line reads them to leave out what they remove; logged at DEBUG).

        Damaged records are skipped and counted in one log line; a journal that exists
        but cannot be read stops the open (StoreError): its changes would be lost."""
        try:
            with _opened(self.path, os.O_RDONLY) as fd:
                _lock(fd, shared=True, wait=_LOCK_WAIT_SECONDS, required=False)
                records, skipped = _parse(_lines(fd))
        except (FileNotFoundError, NotADirectoryError):
            return []  # nothing was ever written there
        except OSError as exc:
            raise StoreError(
                f"cannot read the pending-change journal {self.path} (STM_JOURNAL): {exc}"
            ) from exc
        self.skipped = skipped
        pending: list[Pending] = []
        seen: set[str] = set()
        for record in records:
            if record.pending is not None and record.pending.id not in seen:
                seen.add(record.pending.id)
                pending.append(record.pending)
        if skipped:
            log.warning(
                "skipped %d damaged lines of the pending-change journal %s", skipped, self.path
            )
        if pending and replaying:
            log.warning("replaying %d pending changes from %s", len(pending), self.path)
        elif pending:
            log.debug("%d pending changes in %s", len(pending), self.path)
        return pending

    # -- writing --------------------------------------------------------------------
    def append(self, records: Sequence[Pending]) -> None:
        """Add ``records`` and make them durable before returning; raises OSError."""
        data = b"\n" + b"".join(_encode(record) for record in records)
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with self._locked(create=True) as (fd, created):
            _write_all(fd, data)
            os.fsync(fd)
        if created:
            _sync_folder(self.path)

    def drop_damaged(self) -> None:
        """Rewrite the journal without its damaged lines, once the writer took what ``load``
        read: a line judged damaged is never read again, whatever happens to its bytes
        later. Failures are logged; the lines stay skipped."""
        try:
            self._remove(set())
        except OSError as exc:
            log.warning("could not drop the damaged lines of %s: %s", self.path, exc)
        self.skipped = 0

    def remove(self, ids: Collection[str]) -> None:
        """Drop the records of these ids (their changes are durable); the file goes with
        its last record. Failures are logged: the changes are durable either way, and a
        record left behind is only applied once more."""
        if not ids:
            return
        try:
            self._remove(set(ids))
        except OSError as exc:
            log.warning("could not update %s (its changes are durable): %s", self.path, exc)

    def _remove(self, ids: set[str]) -> None:
        try:
            with self._locked(create=False) as (fd, _):
                os.lseek(fd, 0, os.SEEK_SET)
                records, _skipped = _parse(_lines(fd))
                kept = [r for r in records if r.pending is None or r.pending.id not in ids]
                if len(kept) == len(records) and not _skipped:
                    return
                if not kept:
                    self.path.unlink()
                else:
                    temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
                    out = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                    try:
                        _write_all(out, b"".join(b"\n" + _kept(r) for r in kept) + b"\n")
                        os.fsync(out)
                    finally:
                        os.close(out)
                    # Replaced while locked: an appender that opened the old file sees
                    # that it was replaced once it holds the lock, and opens it again.
                    os.replace(temporary, self.path)
        except FileNotFoundError:
            return
        _sync_folder(self.path)

    @contextlib.contextmanager
    def _locked(self, *, create: bool) -> Iterator[tuple[int, bool]]:
        """The journal open for appending, under an exclusive lock, as the path names it
        now (not a file another process removed or replaced while this one waited)."""
        deadline = time.monotonic() + _LOCK_WAIT_SECONDS
        while True:
            existed = self.path.exists()
            flags = os.O_RDWR | os.O_APPEND | (os.O_CREAT if create else 0)
            with _opened(self.path, flags, 0o600) as fd:
                _lock(fd, shared=False, wait=max(0.0, deadline - time.monotonic()))
                try:
                    current = os.stat(self.path).st_ino == os.fstat(fd).st_ino
                except FileNotFoundError:
                    current = False
                if current:
                    yield fd, not existed
                    return
            if time.monotonic() > deadline:
                raise OSError(errno.EAGAIN, f"{self.path} kept changing under this process")


# -- the format --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class _Record:
    line: bytes  # as it is written, checksum included, without the newline
    pending: Pending | None  # None: a record this version does not know (kept as is)


def _kept(record: _Record) -> bytes:
    """How a record that stays is written again: as it was, but a record of the first
    format in the current one, so that its id (made from its content and position) stays
    the one replayed."""
    if record.pending is not None and record.pending.id.startswith("v1-"):
        return _encode(record.pending).rstrip(b"\n")
    return record.line


def _encode(record: Pending) -> bytes:
    body: dict[str, object] = {"id": record.id}
    match record.op:
        case PurgeUser(user_id, server_id, erasure):
            body |= {"op": "purge_user", "user_id": user_id, "server_id": server_id}
            body["erasure"] = erasure
        case DeleteChannel(channel_id):
            body |= {"op": "clear_channel", "channel_id": channel_id}
        case ForgetMessages(channel_id, message_ids, edited):
            body |= {"op": "forget_messages", "channel_id": channel_id}
            body |= {"message_ids": list(message_ids), "edited": edited}
        case MarkDeparture(server_id, left_at):
            body |= {"op": "departure", "server_id": server_id, "left_at": left_at}
        case ForgetServer(server_id):
            body |= {"op": "forget_server", "server_id": server_id}
        case SaveServerSettings(server_id, settings_json):
            body |= {"op": "settings", "server_id": server_id, "settings": settings_json}
        case SaveOptOut(user_id, opted_out, at):
            body |= {"op": "opt_out", "user_id": user_id, "opted_out": opted_out, "at": at}
        case RestoreNotes(key, version, by, at, history, expected):
            body |= {"op": "restore", "key": key, "version": version, "by": by, "at": at}
            body |= {"history": history, "expected": expected}
    payload = json.dumps(body, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return b"%08x %s\n" % (zlib.crc32(payload), payload)


def _parse(lines: Iterator[bytes | None]) -> tuple[list[_Record], int]:
    """The records of these lines (None: a line too long to hold one) and how many lines
    held damage (bytes that are not a whole record)."""
    records: list[_Record] = []
    damaged = 0
    occurrence: dict[str, int] = {}
    for line in lines:
        if line is None:
            damaged += 1
            continue
        line = line.strip(b" \t\r")
        if not line:
            continue
        legacy = _legacy(line)
        if legacy is not None:
            # The id comes from the content and its occurrence, so that it stays the same
            # when the file is rewritten.
            occurrence[legacy.id] = occurrence.get(legacy.id, 0) + 1
            pending = Pending(f"{legacy.id}-{occurrence[legacy.id]}", legacy.op)
            records.append(_Record(line, pending))
            continue
        found, harmed = _scan(line)
        records.extend(found)
        damaged += harmed
    return records, damaged


def _legacy(line: bytes) -> Pending | None:
    """A line of the first format: one JSON object, no checksum and no id."""
    if not line.startswith(b"{"):
        return None
    data = _json(line)
    op = None if data is None else _op(data)
    return None if op is None else Pending(f"v1-{zlib.crc32(line):08x}", op)


def _scan(line: bytes) -> tuple[list[_Record], bool]:
    """The checksummed records in one line, and whether it held anything else.

    A line holds one record; after damage (a newline lost, bytes glued on, a byte
    changed) the records still whole in it are found by their checksums, so damage
    costs only the record it hit."""
    found: list[_Record] = []
    damaged = False
    at = 0
    while (match := _START.search(line, at)) is not None:
        start = match.start()
        damaged = damaged or bool(line[at:start].strip())
        end = _record_end(line, start)
        if end is None:
            damaged, at = True, start + 1
            continue
        found.append(_record(line[start:end]))
        at = end
    return found, damaged or bool(line[at:].strip())


def _record_end(line: bytes, start: int) -> int | None:
    """Where the record that starts at ``start`` ends: the first ``}`` after which its
    payload's checksum matches; None if there is none within MAX_PAYLOAD."""
    want = int(line[start : start + 8], 16)
    begin = start + 9
    limit = min(len(line), begin + _MAX_PAYLOAD)
    crc, done = 0, begin
    close = line.find(b"}", begin, limit)
    while close != -1:
        crc = zlib.crc32(line[done : close + 1], crc)
        done = close + 1
        if crc == want:
            return done
        close = line.find(b"}", done, limit)
    return None


def _record(text: bytes) -> _Record:
    """A record whose checksum matched: what this version reads of it."""
    data = _json(text[9:])
    op = None if data is None else _op(data)
    record_id = None if data is None else data.get("id")
    if op is None or not isinstance(record_id, str) or not record_id:
        return _Record(text, None)  # whole, but not this version's: kept as it is
    return _Record(text, Pending(record_id, op))


def _json(text: bytes) -> dict[str, object] | None:
    try:
        data = json.loads(text.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    return data if isinstance(data, dict) else None


def _op(data: dict[str, object]) -> SharedChange | None:
    """The change a record holds, or None when it holds none this version can apply."""

    def as_id(value: object) -> int | None:
        return value if type(value) is int and 0 <= value < _ID_LIMIT else None

    def as_time(value: object) -> float | None:
        if type(value) not in (int, float):
            return None
        at = float(cast(float, value))
        return at if math.isfinite(at) and at >= 0 else None

    kind = data.get("op")
    if kind == "purge_user":
        user, server = as_id(data.get("user_id")), data.get("server_id")
        server_id = None if server is None else as_id(server)
        # Written before erasure policies: the transitive one, which it was.
        erasure = data.get("erasure", "complete")
        if user is None or (server is not None and server_id is None):
            return None
        if erasure not in ERASURE_POLICIES:
            return None
        return PurgeUser(user, server_id, cast(Erasure, erasure))
    if kind == "clear_channel":
        channel = as_id(data.get("channel_id"))
        return None if channel is None else DeleteChannel(channel)
    if kind == "forget_messages":
        channel, ids = as_id(data.get("channel_id")), data.get("message_ids")
        edited = data.get("edited")
        if channel is None or type(edited) is not bool or not isinstance(ids, list):
            return None
        message_ids = tuple(as_id(i) for i in ids)
        if not message_ids or len(message_ids) > _MAX_MESSAGE_IDS or None in message_ids:
            return None
        return ForgetMessages(channel, cast(tuple[int, ...], message_ids), edited)
    if kind == "departure":
        server_id, left = as_id(data.get("server_id")), data.get("left_at")
        left_at = None if left is None else as_time(left)
        if server_id is None or (left is not None and left_at is None):
            return None
        return MarkDeparture(server_id, left_at)
    if kind == "forget_server":
        server_id = as_id(data.get("server_id"))
        return None if server_id is None else ForgetServer(server_id)
    if kind == "settings":
        server_id, settings = as_id(data.get("server_id")), data.get("settings")
        if server_id is None or not isinstance(settings, str):
            return None
        return SaveServerSettings(server_id, settings)
    if kind == "opt_out":
        user, opted_out, at = as_id(data.get("user_id")), data.get("opted_out"), data.get("at")
        when = as_time(at)
        if user is None or type(opted_out) is not bool or when is None:
            return None
        return SaveOptOut(user, opted_out, when)
    if kind == "restore":
        key, version, by, at = data.get("key"), data.get("version"), data.get("by"), data.get("at")
        history = data.get("history")
        who = None if by is None else as_id(by)
        when = as_time(at)
        if not isinstance(key, str) or not _is_key(key) or as_id(version) is None:
            return None
        if (by is not None and who is None) or when is None:
            return None
        if type(history) is not int or not 0 <= history <= MAX_NOTE_HISTORY:
            return None
        expected = data.get("expected")
        row_version = None if expected is None else as_id(expected)
        if expected is not None and row_version is None:
            return None
        return RestoreNotes(key, cast(int, version), who, when, history, row_version)
    return None


def _is_key(key: str) -> bool:
    try:
        parse_key(key)
    except ValueError:
        return False
    return True


# -- files -------------------------------------------------------------------------------
def _lines(fd: int) -> Iterator[bytes | None]:
    """The lines of the open file, read in chunks; None for a line longer than
    MAX_RECORD, which is never held whole in memory."""
    partial = b""
    too_long = False  # the line being read is too long: its bytes are dropped
    while chunk := os.read(fd, _CHUNK):
        *complete, rest = (partial + chunk).split(b"\n")
        for line in complete:
            yield None if too_long or len(line) > MAX_RECORD else line
            too_long = False
        partial = rest
        if len(partial) > MAX_RECORD:
            too_long, partial = True, b""
    if too_long or partial:
        yield None if too_long or len(partial) > MAX_RECORD else partial


@contextlib.contextmanager
def _opened(path: Path, flags: int, mode: int = 0o600) -> Iterator[int]:
    fd = os.open(path, flags, mode)
    try:
        yield fd
    finally:
        os.close(fd)


def _lock(fd: int, *, shared: bool, wait: float, required: bool = True) -> None:
    """``flock`` the file, waiting at most ``wait`` seconds (a process frozen while it
    holds the lock must not freeze this one); without ``required``, go on unlocked."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: one process per journal
        return
    kind = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, kind)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                if not required:
                    return
                raise
            time.sleep(0.005)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _sync_folder(path: Path) -> None:
    # The file's creation, replacement or removal is durable only once its folder is.
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
