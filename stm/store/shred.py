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

import os
import sqlite3
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305

__all__ = [
    "DEAD_KEY",
    "MIGRATION",
    "PLAIN_VIEW",
    "keys_of",
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


def _key_for(db: sqlite3.Connection, row_key: str) -> tuple[int, bytes]:
    """The row's live key, or a new one in a free (or a new) slot."""
    found = db.execute(
        "SELECT k.slot, k.key FROM short_term_memories m JOIN stm_keys k ON k.slot = m.key_slot "
        "WHERE m.key = ?",
        (row_key,),
    ).fetchone()
    if found is not None and found[1] != DEAD_KEY:
        return int(found[0]), bytes(found[1])
    key = os.urandom(KEY_BYTES)
    free = db.execute(f"SELECT slot FROM stm_keys WHERE key = {_DEAD} LIMIT 1").fetchone()
    if free is not None:
        db.execute("UPDATE stm_keys SET key = ? WHERE slot = ?", (key, free[0]))
        return int(free[0]), key
    slot = db.execute("INSERT INTO stm_keys (key) VALUES (?) RETURNING slot", (key,)).fetchone()
    return int(slot[0]), key


def _seal(key: bytes, row_key: str, text: str) -> bytes:
    nonce = os.urandom(NONCE_BYTES)
    return _FORMAT + nonce + ChaCha20Poly1305(key).encrypt(nonce, text.encode(), row_key.encode())


def open_text(key: bytes | None, row_key: str, value: Any) -> str | None:
    """The plain text of a stored ``summary`` or ``categories`` value (None: erased)."""
    if value is None or isinstance(value, str):
        return value  # nothing stored, or written before encryption was introduced
    if key is None or len(value) < 1 + NONCE_BYTES or bytes(value[:1]) != _FORMAT:
        return None
    try:
        data = ChaCha20Poly1305(key).decrypt(
            bytes(value[1 : 1 + NONCE_BYTES]), bytes(value[1 + NONCE_BYTES :]), row_key.encode()
        )
    except InvalidTag:
        return None
    return data.decode()


def seal_params(
    db: sqlite3.Connection, row_key: str, summary: str | None, categories_json: str
) -> tuple[bytes | None, bytes | str, int | None]:
    """``summary``, ``categories`` and ``key_slot`` as stored: encrypted under the row's key,
    or left empty (no key) when the row holds no distilled content."""
    if summary is None and categories_json == "{}":
        return None, "{}", None
    slot, key = _key_for(db, row_key)
    sealed = None if summary is None else _seal(key, row_key, summary)
    cats: bytes | str = "{}" if categories_json == "{}" else _seal(key, row_key, categories_json)
    return sealed, cats, slot


def keys_of(db: sqlite3.Connection, ids: Sequence[int]) -> dict[int, bytes]:
    """The live key of each of these rows that has one."""
    marks = ",".join("?" * len(ids))
    return {
        int(memory_id): bytes(key)
        for memory_id, key in db.execute(
            "SELECT m.id, k.key FROM short_term_memories m JOIN stm_keys k ON k.slot = m.key_slot "
            f"WHERE m.id IN ({marks})",
            list(ids),
        )
    }


def seal_legacy(db: sqlite3.Connection) -> int:
    """Encrypt distilled text stored in the clear by an earlier version; returns how many
    rows (the caller then rewrites the file once, so that no plain copy survives)."""
    rows = db.execute(
        "SELECT id, key, summary, categories FROM short_term_memories "
        "WHERE typeof(summary) = 'text' OR (typeof(categories) = 'text' AND categories != '{}')"
    ).fetchall()
    for memory_id, row_key, summary, categories in rows:
        sealed, cats, slot = seal_params(db, row_key, summary, categories)
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
