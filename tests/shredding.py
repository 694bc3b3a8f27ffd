"""What the files of a database give away: their bytes, and the keys that unlock them.

Distilled text is stored encrypted under a key per row (``stm/store/_shred.py``), so
"no trace" means two things in the bytes of the database file, its WAL and its
shared-memory file: the plain text is absent, and so is every key that ever
encrypted it (the ciphertext, and stale copies of it, are then noise).
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterable
from pathlib import Path

from stm.store._base import StoredRow
from stm.store._shred import DEAD_KEY, readable

__all__ = ["KeyWitness", "file_bytes", "plain_text", "stored_rows", "stored_text"]


def file_bytes(db_path: object) -> bytes:
    """The database file, its WAL, its shared-memory index and any rollback journal."""
    data = b""
    for suffix in ("", "-wal", "-shm", "-journal"):
        path = Path(f"{db_path}{suffix}")
        if path.exists():
            data += path.read_bytes()
    return data


def plain_text(db_path: object) -> str:
    """Every row's distilled text, decrypted, as one string."""
    with contextlib.closing(sqlite3.connect(str(db_path))) as db:
        rows = db.execute(f"SELECT key, summary, categories FROM {readable(db)}").fetchall()
    return "\n".join(f"{k} {s} {c}" for k, s, c in rows)


async def stored_rows(database: str) -> list[StoredRow]:
    """Every row, its distilled text decrypted, on either store (read through the
    read-only view the operator commands use)."""
    from stm import STMConfig
    from stm.store._inspect import open_inspector

    inspector = await open_inspector(STMConfig(database=database))
    try:
        found = await inspector.execute(  # type: ignore[attr-defined]
            "SELECT DISTINCT channel_id FROM short_term_memories"
        )
        rows: list[StoredRow] = []
        for (channel,) in found:
            rows += await inspector.rows_of_channel(int(channel))
    finally:
        await inspector.close()
    return rows


async def stored_text(database: str) -> str:
    """Every row's key and distilled text, decrypted, as one string, on either store."""
    rows = await stored_rows(database)
    return "\n".join(f"{r.key} {r.summary} {r.categories}" for r in rows)


class KeyWitness:
    """Records every key a row was ever encrypted under (call ``look`` after each flush)."""

    def __init__(self, db_path: object) -> None:
        self.db_path = db_path
        self.seen: dict[str, set[bytes]] = {}

    def look(self) -> None:
        with contextlib.closing(sqlite3.connect(str(self.db_path))) as db:
            for scope_key, secret in db.execute(
                "SELECT m.key, k.key FROM short_term_memories m "
                "JOIN stm_keys k ON k.slot = m.key_slot"
            ):
                if bytes(secret) != DEAD_KEY:
                    self.seen.setdefault(scope_key, set()).add(bytes(secret))

    def keys(self, rows: Iterable[str]) -> set[bytes]:
        return {key for row in rows for key in self.seen.get(row, ())}

    def rows(self, part: str = "") -> list[str]:
        """The rows whose key holds ``part`` (a ``user:1:`` prefix, a ``:10`` channel end)."""
        if part.startswith(":"):
            return [row for row in self.seen if row.endswith(part)]
        return [row for row in self.seen if part in row]

    def left_in_files(self, rows: Iterable[str]) -> int:
        """How many of these rows' keys are still somewhere in the files."""
        data = file_bytes(self.db_path)
        return sum(1 for key in self.keys(rows) if key in data)
