"""Conversions between the cache's entries, the store's rows and the public snapshots."""

from __future__ import annotations

from datetime import UTC, datetime

from ._cache import NO_CATEGORIES, Entry
from ._models import DialogueMessage, MemoryEntry
from ._window import EMPTY
from .store._base import StoredRow

__all__ = ["entry_from", "row_of", "snapshot"]


def row_of(entry: Entry) -> StoredRow:
    """The durable part of an entry."""
    return StoredRow(
        key=entry.key,
        scope=entry.scope,
        server_id=entry.server_id,
        user_id=entry.user_id,
        channel_id=entry.channel_id,
        persona_id=entry.persona_id,
        parent_channel_id=entry.parent_channel_id,
        channel_name=entry.channel_name,
        server_name=entry.server_name,
        channel_private=entry.channel_private,
        summary=entry.summary,
        categories=dict(entry.categories),
        turns_since_refresh=entry.turns_since_refresh,
        last_refreshed_turn=entry.last_refreshed_turn,
        updated_at=entry.updated_at,
        counters_known=entry.hydrated,
        pin=entry.pin,
    )


def entry_from(row: StoredRow) -> Entry:
    """An entry hydrated from its row: crude messages are never stored, so none."""
    return Entry(
        key=row.key,
        scope=row.scope,
        server_id=row.server_id,
        user_id=row.user_id,
        channel_id=row.channel_id,
        persona_id=row.persona_id,
        messages=EMPTY,
        updated_at=row.updated_at,
        channel_name=row.channel_name,
        server_name=row.server_name,
        parent_channel_id=row.parent_channel_id,
        channel_private=row.channel_private,
        summary=row.summary,
        categories=dict(row.categories) if row.categories else NO_CATEGORIES,
        pin=row.pin,
        turns_since_refresh=row.turns_since_refresh,
        last_refreshed_turn=row.last_refreshed_turn,
    )


def snapshot(entry: Entry, expires_at: float) -> MemoryEntry:
    """The public, immutable view of an entry."""
    return MemoryEntry(
        key=entry.key,
        messages=[
            DialogueMessage(
                role="assistant" if m.role == "assistant" else "user",
                content=m.content,
                author_id=m.author_id,
                speaker_name=m.speaker_name,
                timestamp=datetime.fromtimestamp(m.timestamp, UTC),
                message_id=m.message_id,
            )
            for m in entry.messages
        ],
        summary=entry.summary,
        categories=dict(entry.categories),
        turns_since_refresh=entry.turns_since_refresh,
        last_refreshed_turn=entry.last_refreshed_turn,
        server_id=entry.server_id,
        user_id=entry.user_id,
        channel_id=entry.channel_id,
        persona_id=entry.persona_id,
        channel_name=entry.channel_name,
        server_name=entry.server_name,
        parent_channel_id=entry.parent_channel_id,
        channel_is_private=entry.channel_private,
        updated_at=datetime.fromtimestamp(entry.updated_at, UTC),
        expires_at=datetime.fromtimestamp(expires_at, UTC),
    )
