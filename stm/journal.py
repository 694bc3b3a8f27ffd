"""Deletes acknowledged as pending, kept beside the database until they are durable.

When a purge or a channel clear cannot be committed (the database is locked,
the disk is full), the bot has already told the user it is done or pending.
The intent is appended, fsynced, to ``<database>-stm-pending`` (one JSON line
per delete; appending needs no database lock) and replayed at the head of the
writer's queue when the database is next opened, before any read can serve
the deleted memory. The file is removed once every delete in it is durable.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from .lineage import ERASURE_POLICIES, Erasure
from .store.base import DeleteChannel, PurgeUser

__all__ = ["Journal"]

log = logging.getLogger("stm.journal")
SUFFIX = "-stm-pending"
PendingDelete = DeleteChannel | PurgeUser


class Journal:
    """The pending-delete journal of one database file."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def for_database(cls, database: str) -> Journal | None:
        """The journal beside ``database``; None for an in-memory database."""
        if not database or database == ":memory:" or database.startswith("file::memory:"):
            return None
        return cls(Path(database + SUFFIX).expanduser())

    def load(self) -> list[PendingDelete]:
        """The deletes still pending, in order; a torn last line is ignored."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        ops: list[PendingDelete] = []
        for line in text.splitlines():
            try:
                ops.append(_decode(json.loads(line)))
            except (ValueError, TypeError, KeyError):
                log.warning("ignoring an unreadable line of %s: %r", self.path, line[:80])
        if ops:
            log.warning("replaying %d pending deletes from %s", len(ops), self.path)
        return ops

    def append(self, ops: Sequence[PendingDelete]) -> None:
        """Add ``ops`` and make them durable before returning."""
        lines = "".join(json.dumps(_encode(op)) + "\n" for op in ops)
        try:
            new = not self.path.exists()
            with open(self.path, "a", encoding="utf-8") as file:
                file.write(lines)
                file.flush()
                os.fsync(file.fileno())
            if new:
                _sync_folder(self.path)
        except OSError:
            log.exception("pending deletes could not be saved to %s", self.path)

    def clear(self) -> None:
        """Every delete in the journal is durable: drop it."""
        try:
            self.path.unlink(missing_ok=True)
            _sync_folder(self.path)
        except OSError:
            log.exception("could not remove %s (its deletes are durable)", self.path)


def _encode(op: PendingDelete) -> dict[str, object]:
    if isinstance(op, PurgeUser):
        return {
            "op": "purge_user",
            "user_id": op.user_id,
            "server_id": op.server_id,
            "erasure": op.erasure,
        }
    return {"op": "clear_channel", "channel_id": op.channel_id}


def _decode(data: dict[str, object]) -> PendingDelete:
    def as_id(value: object) -> int:
        if type(value) is not int:
            raise TypeError(f"not an id: {value!r}")
        return value

    if data["op"] == "purge_user":
        server = data["server_id"]
        # Written before erasure policies: the transitive one, which it was.
        erasure = data.get("erasure", "complete")
        if erasure not in ERASURE_POLICIES:
            raise ValueError(f"unknown erasure policy {erasure!r}")
        return PurgeUser(
            as_id(data["user_id"]),
            None if server is None else as_id(server),
            cast(Erasure, erasure),
        )
    if data["op"] == "clear_channel":
        return DeleteChannel(as_id(data["channel_id"]))
    raise ValueError(f"unknown pending operation {data['op']!r}")


def _sync_folder(path: Path) -> None:
    # The file's creation or removal is durable only once its folder is.
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
