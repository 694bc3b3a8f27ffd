"""Counters and timings of a memory, as plain numbers a host can read (``memory.metrics``).

The turn path only adds to plain integers; everything else (the cache's size, the
writer's queue) is read when a snapshot is taken. ``stm.prometheus`` exposes the
snapshot in Prometheus' text format.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["DISCORD_EVENTS", "REFUSAL_REASONS", "MetricsSnapshot", "Tally", "WriterCounters"]

# Why ``run_tool`` answered success=False, one word each (the label of the refusal count).
REFUSAL_REASONS = (
    "shut_down",  # the memory is closed
    "disabled",  # short-term memory is off in the server
    "already_updated",  # a second call in one turn
    "explicit_intent",  # the user asked to remember: long-term memory's job
    "opted_out",  # the user asked not to be remembered
    "invalid_arguments",  # what the model sent did not fit the schema
    "unavailable",  # the store could not be read
    "cleared",  # the conversation was cleared or purged during the turn
    "busy",  # the cache kept evicting the turn's entries
    "not_saved",  # the commit failed
)

# The Discord events the cog applies to the memory, one word each (the label of their count).
DISCORD_EVENTS = (
    "message_delete",  # on_raw_message_delete
    "bulk_message_delete",  # on_raw_bulk_message_delete
    "message_edit",  # on_raw_message_edit
    "channel_delete",  # on_guild_channel_delete: the channel cleared
    "thread_delete",  # on_raw_thread_delete: the thread cleared
    "guild_remove",  # on_guild_remove: the server's removal due after the grace period
    "guild_return",  # the bot back in a server whose removal was due: nothing cleared
    "guild_cleared",  # a server's memory and settings cleared, its grace period over
    "member_remove",  # on_raw_member_remove: purged where the server asks for it
    "member_ban",  # on_member_ban: purged where the server asks for it
)


@dataclass(slots=True)
class Tally:
    """What the facade counts as it goes (plain attributes: an increment is one add)."""

    captures: int = 0
    replies_too_wide: int = 0
    upgrades: int = 0
    upgrade_seconds: float = 0.0
    refusals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSAL_REASONS, 0))
    channel_clears: int = 0
    user_purges: int = 0
    purged_shared_entries: int = 0
    purges_over_threshold: int = 0
    repeated_purges: int = 0
    janitor_passes: int = 0
    hydrations: int = 0
    hydrated_keys: int = 0
    hydration_failures: int = 0
    messages_deleted: int = 0
    messages_edited: int = 0
    discord_events: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DISCORD_EVENTS, 0))

    def refused(self, reason: str) -> None:
        """Count one refusal of the tool."""
        self.refusals[reason] = self.refusals.get(reason, 0) + 1


@dataclass(slots=True)
class WriterCounters:
    """What the writer counts as it goes: store round trips, committed transactions and
    their operations, the largest batch, time spent in the store, failed transactions,
    retries after one, and operations dropped as unstorable."""

    round_trips: int = 0
    commits: int = 0
    ops_committed: int = 0
    largest_batch: int = 0
    store_seconds: float = 0.0
    failures: int = 0
    retries: int = 0
    rejected: int = 0

    def committed(self, ops: int) -> None:
        """Count one committed transaction of ``ops`` operations."""
        self.commits += 1
        self.ops_committed += ops
        self.largest_batch = max(self.largest_batch, ops)


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """A memory's counters at one moment. Counts grow for the life of the process;
    ``cache_keys`` and ``writer_queue_depth`` are levels."""

    captures: int
    upgrades: int
    upgrade_seconds: float
    refusals: dict[str, int]
    channel_clears: int
    user_purges: int
    # Shared entries (beyond the purged users' own) whose notes purges cleared; purges
    # that cleared more than ``stm._purgewatch.SHARE_THRESHOLD`` of a server's distilled
    # entries; purges by a member who keeps clearing shared notes in a server (both are
    # logged as warnings: ``stm._purgewatch``).
    purged_shared_entries: int
    purges_over_threshold: int
    repeated_purges: int
    janitor_passes: int
    hydrations: int
    hydrated_keys: int
    hydration_failures: int
    cache_keys: int
    cache_evictions: int
    writer_queue_depth: int
    writer_batches: int
    writer_batch_ops: int
    writer_largest_batch: int
    commit_seconds: float
    durable_write_failures: int
    durable_write_retries: int
    feed_lag_seconds: float | None = None
    # Messages that left this process's windows because Discord said they were deleted
    # (or edited to something unreadable), windows whose text an edit replaced, and the
    # Discord events the cog applied, by kind (``DISCORD_EVENTS``).
    messages_deleted: int = 0
    messages_edited: int = 0
    discord_events: dict[str, int] = field(default_factory=dict)
    # Replies of the bot left out of memory under ``complete`` because what their prompt
    # showed named more than ``stm._provenance.SOURCES_BOUND`` users or versions of notes.
    replies_too_wide: int = 0

    def as_dict(self) -> dict[str, Any]:
        """The snapshot as a plain dict (JSON-ready)."""
        return asdict(self)
