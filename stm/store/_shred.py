"""Crypto-shredding: distilled text is stored encrypted under a key of its row's own, and
erasing it means overwriting that key, wherever old copies of the ciphertext remain.

Why: SQLite leaves stale copies of cells in the unused middle of b-tree pages
when it rebalances them (the rebuilt page is written from its end and the gap
between the cell-pointer array and the cell content is not cleared, even with
``secure_delete``). Only rewriting the whole file removes those copies, and
that costs time in proportion to the file. A 32-byte key erased in place costs
the same at any size.

The keys live in ``stm_keys``, a table of fixed-size slots that is only ever
appended to (a new slot goes at the right edge of the b-tree, which SQLite
splits without moving existing cells) and overwritten in place (a same-size
update rewrites the cell where it is). A destroyed slot holds zeros and is
reused. So a key's bytes exist in one cell of the file, plus the WAL until the
next checkpoint: erasing is overwriting the cell and emptying the WAL.
Triggers (see the migration) destroy the key when its row is deleted or its
distilled content is cleared, so every delete path erases without knowing it.
"""

from __future__ import annotations

import base64
import os
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

from ._dialect import SQLITE

__all__ = [
    "DEAD_KEY",
    "MIGRATION",
    "PLAIN_VIEW",
    "TEXT_PREFIX",
    "KnownKeys",
    "LiveKey",
    "Sealer",
    "TextSealer",
    "keys_of",
    "new_key",
    "open_sealed_text",
    "open_stored",
    "open_text",
    "readable",
    "seal_legacy",
    "seal_params",
]

KEY_BYTES = 32
NONCE_BYTES = 12
DEAD_KEY = bytes(KEY_BYTES)
_DEAD = "X'" + "00" * KEY_BYTES + "'"
_FORMAT = b"\x01"  # ChaCha20-Poly1305, nonce, ciphertext and tag

MIGRATION = f"""
    CREATE TABLE stm_keys (
        slot INTEGER PRIMARY KEY,
        key BLOB NOT NULL CHECK (length(key) = {KEY_BYTES})
    );
    CREATE INDEX stm_free_keys ON stm_keys (slot) WHERE key = {_DEAD};
    ALTER TABLE short_term_memories ADD COLUMN key_slot INTEGER;
    CREATE TRIGGER stm_shred_on_delete AFTER DELETE ON short_term_memories
    WHEN old.key_slot IS NOT NULL BEGIN
        UPDATE stm_keys SET key = {_DEAD} WHERE slot = old.key_slot;
    END;
    CREATE TRIGGER stm_shred_on_clear AFTER UPDATE OF summary, categories, key_slot
    ON short_term_memories
    WHEN old.key_slot IS NOT NULL AND (new.key_slot IS NOT old.key_slot
        OR (new.summary IS NULL AND new.categories = '{{}}')) BEGIN
        UPDATE stm_keys SET key = {_DEAD} WHERE slot = old.key_slot;
        UPDATE short_term_memories SET key_slot = NULL
        WHERE id = new.id AND new.summary IS NULL AND new.categories = '{{}}';
    END;
"""


def _new_key(db: sqlite3.Connection) -> tuple[int, bytes]:
    """A new encryption key, in a free (or a new) slot."""
    secret = os.urandom(KEY_BYTES)
    free = db.execute(f"SELECT slot FROM stm_keys WHERE key = {_DEAD} LIMIT 1").fetchone()
    if free is not None:
        db.execute("UPDATE stm_keys SET key = ? WHERE slot = ?", (secret, free[0]))
        return int(free[0]), secret
    slot = db.execute("INSERT INTO stm_keys (key) VALUES (?) RETURNING slot", (secret,)).fetchone()
    return int(slot[0]), secret


# Scope keys per statement when reading their rows' encryption keys.
_CHUNK = 500
# Nonces drawn from the OS at once.
_NONCES = 256


# A row's live key as a run of writes uses it: its slot, the key, and a cipher under it.
LiveKey = tuple[int, bytes, ChaCha20Poly1305]


class _Nonces:
    """Nonces for one sealer, drawn from the system ``_NONCES`` at a time."""

    _nonces = b""
    _at = 0

    def _nonce(self) -> bytes:
        at = self._at
        if at + NONCE_BYTES > len(self._nonces):
            self._nonces, at = os.urandom(NONCE_BYTES * _NONCES), 0
        self._at = at + NONCE_BYTES
        return self._nonces[at : at + NONCE_BYTES]


class Sealer(_Nonces):
    """Seals the distilled text of a run of rows written in one transaction.

    The live keys of the rows are read in one statement per few hundred rows, not one
    per row; ``live``, when given, already holds the live keys of some rows (exactly
    as stored: the caller keeps it so) and is kept exact by the run. What the run does
    to a row's key is followed: its first write with content gives it a key (which its
    later writes use), a write without content leaves it none (the trigger destroys
    the old one). So the rows must be written in the order they are sealed, and
    nothing else may change their keys meanwhile."""

    def __init__(
        self,
        db: sqlite3.Connection,
        scope_keys: Iterable[str],
        live: dict[str, LiveKey] | None = None,
    ) -> None:
        self._db = db
        live = {} if live is None else live
        wanted = [scope_key for scope_key in dict.fromkeys(scope_keys) if scope_key not in live]
        for start in range(0, len(wanted), _CHUNK):
            chunk = wanted[start : start + _CHUNK]
            condition, params = SQLITE.in_list("m.key", "keys", chunk, "text[]")
            for scope_key, slot, stored in db.execute(
                "SELECT m.key, k.slot, k.key FROM short_term_memories m "
                f"JOIN stm_keys k ON k.slot = m.key_slot WHERE {condition}",
                params,
            ):
                if stored != DEAD_KEY:
                    secret = bytes(stored)
                    live[scope_key] = (int(slot), secret, ChaCha20Poly1305(secret))
        self._live = live

    def seal(
        self, scope_key: str, summary: str | None, categories_json: str
    ) -> tuple[bytearray | None, bytearray | str, int | None]:
        """As ``seal_params``, for the next row of the run."""
        if summary is None and categories_json == "{}":
            self._live.pop(scope_key, None)
            return None, "{}", None
        found = self._live.get(scope_key)
        if found is None:
            slot, secret = _new_key(self._db)
            found = self._live[scope_key] = (slot, secret, ChaCha20Poly1305(secret))
        slot, _, cipher = found
        aad = scope_key.encode()
        # As bytearrays: the sqlite3 module binds those as they are, while for bytes it
        # first looks for an adapter, which costs more than the copy.
        sealed = None
        if summary is not None:
            nonce = self._nonce()
            sealed = bytearray(_FORMAT + nonce + cipher.encrypt(nonce, summary.encode(), aad))
        cats: bytearray | str = "{}"
        if categories_json != "{}":
            nonce = self._nonce()
            cats = bytearray(_FORMAT + nonce + cipher.encrypt(nonce, categories_json.encode(), aad))
        return sealed, cats, slot


class KnownKeys:
    """The live encryption keys of recently upgraded rows (by scope key), with their
    ciphers, as one connection last wrote or read them (SQLite's, between its batches):
    an upgrade of the same row then neither reads its key nor sets up a cipher for it
    again.

    Exact, or empty: it is dropped when another connection committed since this one's
    last batch (``PRAGMA data_version``), when a batch holds an operation that may change
    keys otherwise (a delete, a read that deletes expired rows, see ``ops.KEEPS_KEYS``),
    when a batch fails, and when anything else runs SQL on the connection
    (``SQLiteStore.execute``).
    """

    LIMIT = 20_000  # rows remembered; the oldest go first

    def __init__(self) -> None:
        self.keys: dict[str, LiveKey] = {}
        self._data_version = -1

    def clear(self) -> None:
        """Drop every encryption key held."""
        self.keys.clear()

    def usable(self, db: sqlite3.Connection, keeps_keys: bool) -> KnownKeys | None:
        """Self, made exact for a batch that has begun on ``db``; None when the batch must
        not use it (``keeps_keys`` False: it may change keys otherwise; it is then empty,
        and stays so)."""
        version = int(db.execute("PRAGMA data_version").fetchone()[0])
        if version != self._data_version:
            self._data_version = version
            self.clear()
        if not keeps_keys:
            self.clear()
            return None
        keys = self.keys
        while len(keys) > self.LIMIT:
            del keys[next(iter(keys))]
        return self


# PostgreSQL keeps distilled text in TEXT columns: sealed text is this prefix and the
# base64 of what SQLite stores as bytes (format byte, nonce, ciphertext and tag).
TEXT_PREFIX = "stm1:"


class TextSealer(_Nonces):
    """Seals distilled text as text, under keys the caller looks up or makes (PostgreSQL)."""

    def seal(self, cipher: ChaCha20Poly1305, scope_key: str, text: str) -> str:
        """``text`` encrypted under ``cipher`` for the row ``scope_key``, as text."""
        nonce = self._nonce()
        sealed = _FORMAT + nonce + cipher.encrypt(nonce, text.encode(), scope_key.encode())
        return TEXT_PREFIX + base64.b64encode(sealed).decode("ascii")


def new_key() -> bytes:
    """A fresh encryption key."""
    return os.urandom(KEY_BYTES)


def open_sealed_text(key: bytes | None, scope_key: str, value: str | None) -> str | None:
    """The plain text of a value ``TextSealer`` stored (None: erased); a value without the
    prefix was stored in the clear by an earlier version and is returned as it is."""
    if value is None or not value.startswith(TEXT_PREFIX):
        return value
    try:
        sealed = base64.b64decode(value[len(TEXT_PREFIX) :], validate=True)
    except ValueError:
        return None
    return open_text(key, scope_key, sealed)


def open_stored(key: bytes | None, scope_key: str, value: Any) -> str | None:
    """The plain text of a sealed value as either store keeps it: bytes (SQLite), or text
    with ``TEXT_PREFIX`` (PostgreSQL)."""
    if isinstance(value, str):
        return open_sealed_text(key, scope_key, value)
    return open_text(key, scope_key, value)


def open_text(key: bytes | None, scope_key: str, value: Any) -> str | None:
    """The plain text of a stored ``summary`` or ``categories`` value (None: erased)."""
    if value is None or isinstance(value, str):
        return value  # nothing stored, or written before encryption was introduced
    if key is None or len(value) < 1 + NONCE_BYTES or bytes(value[:1]) != _FORMAT:
        return None
    try:
        data = ChaCha20Poly1305(key).decrypt(
            bytes(value[1 : 1 + NONCE_BYTES]), bytes(value[1 + NONCE_BYTES :]), scope_key.encode()
        )
    except InvalidTag:
        return None
    return data.decode()


def seal_params(
    db: sqlite3.Connection, scope_key: str, summary: str | None, categories_json: str
) -> tuple[bytearray | None, bytearray | str, int | None]:
    """``summary``, ``categories`` and ``key_slot`` as stored: encrypted under the row's key,
    or left empty (no key) when the row holds no distilled content."""
    if summary is None and categories_json == "{}":
        return None, "{}", None
    return Sealer(db, (scope_key,)).seal(scope_key, summary, categories_json)


def keys_of(db: sqlite3.Connection, ids: Sequence[int]) -> dict[int, bytes]:
    """The live key of each of these rows that has one."""
    condition, params = SQLITE.in_list("m.id", "ids", ids, "bigint[]")
    return {
        int(memory_id): bytes(key)
        for memory_id, key in db.execute(
            "SELECT m.id, k.key FROM short_term_memories m JOIN stm_keys k ON k.slot = m.key_slot "
            f"WHERE {condition}",
            params,
        )
    }


def seal_legacy(db: sqlite3.Connection) -> int:
    """Encrypt distilled text stored in the clear by an earlier version; returns how many
    rows (the caller then rewrites the file once, so that no plain copy survives)."""
    rows = db.execute(
        "SELECT id, key, summary, categories FROM short_term_memories "
        "WHERE typeof(summary) = 'text' OR (typeof(categories) = 'text' AND categories != '{}')"
    ).fetchall()
    sealer = Sealer(db, [row[1] for row in rows])
    for memory_id, scope_key, summary, categories in rows:
        sealed, cats, slot = sealer.seal(scope_key, summary, categories)
        db.execute(
            "UPDATE short_term_memories SET summary = ?, categories = ?, key_slot = ? WHERE id = ?",
            (sealed, cats, slot, memory_id),
        )
    return len(rows)


PLAIN_VIEW = "plain_short_term_memories"


def readable(db: sqlite3.Connection) -> str:
    """Give ``db`` (an inspection connection: tests, an operator's shell) the temporary view
    ``plain_short_term_memories``: the memories table with distilled text decrypted where
    its key is live. Returns the view's name."""
    db.create_function("stm_open_text", 3, open_text, deterministic=True)
    columns = [row[1] for row in db.execute("PRAGMA table_info(short_term_memories)")]
    select = ", ".join(
        f"stm_open_text(k.key, m.key, m.{c}) AS {c}" if c in ("summary", "categories") else f"m.{c}"
        for c in columns
    )
    db.execute(
        f"CREATE TEMP VIEW IF NOT EXISTS {PLAIN_VIEW} AS SELECT {select} "
        "FROM short_term_memories m LEFT JOIN stm_keys k ON k.slot = m.key_slot"
    )
    return PLAIN_VIEW
