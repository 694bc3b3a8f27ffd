"""ShortTermMemory: the sub-pipeline's facade, where the cache and the store meet.

Stage 01 (``capture``) and the turn path (``build_context``, ``tool_schema``)
run on the in-process cache; what must be durable goes to the single writer
(``writer.py``): upgrades as group commits the caller waits for, identity
rows and counters behind, deletes in the background until durable.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import warnings
from collections.abc import Awaitable, Callable, Coroutine, Generator, Iterable
from types import TracebackType
from typing import Any

from .cache import HOUR, Entry, GroupKey, MemoryCache, StoredMessage, group_of
from .config import STMConfig
from .convert import entry_from, row_of, snapshot
from .deletions import DeletionLog, apply_to_row, overtakes
from .errors import ConfigError
from .intent import IntentGate
from .keys import parse_key, turn_keys
from .models import (
    Category,
    GenerationFinished,
    MemoryEntry,
    PromptContext,
    ServerSettings,
    ToolResult,
    TurnContext,
)
from .render import RenderCache, nudge, other_channels_blocks, same_channel_block
from .tool import TOOL_NAME
from .tool.schema import arguments_model, parse_arguments, tool_definition
from .settings import SettingsBook
from .store.base import (
    DeleteChannel,
    DeleteExpired,
    LoadRecent,
    LoadRows,
    PurgeUser,
    SaveDistilled,
    SaveOptOut,
    SaveServerSettings,
    Store,
    StoredRow,
)
from .store.sqlite import SQLiteStore
from .writer import Writer

__all__ = ["MemoryTool", "ShortTermMemory"]

log = logging.getLogger("stm")
Deletion = DeleteChannel | PurgeUser


class ShortTermMemory:
    """Short-term memory of a bot: open with ``await ShortTermMemory.open(config)``."""

    def __init__(
        self,
        config: STMConfig,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        intent_gate: IntentGate | None = None,
    ) -> None:
        self.config = config
        self.store = store
        self.clock = clock
        self.intent_gate = intent_gate or IntentGate()
        self.cache = MemoryCache(
            max_keys=config.cache_max_keys,
            crude_ttl_hours=config.crude_ttl_hours,
            summary_ttl_hours=config.summary_ttl_hours,
            clock=clock,
        )
        self.tool = MemoryTool(self)
        self._render_cache = RenderCache()
        self.settings = SettingsBook(config)
        self._writer: Writer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._hydrating: dict[str, asyncio.Task[None]] = {}
        self._warmed: set[GroupKey] = set()
        # Recent deletions, so that work begun before one of them (a read in flight, a
        # turn's upgrade) can tell whether it was overtaken.
        self._deletions = DeletionLog()
        self._janitor: asyncio.Task[None] | None = None
        # While True, every durable row belongs to an entry in the cache: the table was
        # empty at open, this process is its only writer, and no entry has left the cache
        # except by a delete. A key missing from the cache then has no row to read, so
        # new keys skip the read. The first eviction or expiry drop ends it for good.
        self._all_rows_cached = bool(getattr(store, "empty_at_open", False))
        self.closed = False

    # -- opening and closing ------------------------------------------------
    @classmethod
    def open(
        cls,
        config: STMConfig | None = None,
        *,
        clock: Callable[[], float] = time.time,
        intent_gate: IntentGate | None = None,
    ) -> _Opening:
        """Open the memory: ``await`` it, or use it as ``async with``."""
        return _Opening(cls._open(config or STMConfig(), clock, intent_gate))

    @classmethod
    async def _open(
        cls, config: STMConfig, clock: Callable[[], float], gate: IntentGate | None
    ) -> ShortTermMemory:
        if config.database.startswith(("postgresql://", "postgres://")):
            raise ConfigError(
                "STM_DATABASE: PostgreSQL is not supported by this version; "
                "use an SQLite path or ':memory:'"
            )
        store = await SQLiteStore.open(config.database, busy_timeout_ms=config.busy_timeout_ms)
        memory = cls(config, store, clock=clock, intent_gate=gate)
        try:
            await memory._start()
        except BaseException:
            await store.close()
            raise
        return memory

    async def _start(self) -> None:
        self.settings.load(
            await self.store.load_server_settings(), await self.store.load_opt_outs()
        )
        self._writer = Writer(
            self.store,
            write_behind=self.config.write_behind_seconds,
            retry_delay=self.config.delete_retry_seconds,
            scrub_delay=self.config.scrub_delay_seconds,
        )
        self._janitor = asyncio.get_running_loop().create_task(
            self._janitor_loop(), name="stm-janitor"
        )

    async def flush(self) -> None:
        """Return once every background write and delete so far is durable.

        Raises DurabilityError naming what could not be made durable (it stays
        queued and is retried).
        """
        await self._gather_background()
        await self.writer.flush()

    async def close(self) -> None:
        """Finish every pending write and delete, then close the store."""
        if self.closed:
            return
        self.closed = True
        if self._janitor is not None:
            self._janitor.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._janitor
        try:
            await self._gather_background()
            if self._writer is not None:
                await self._writer.close()
        finally:
            await self.store.close()

    async def __aenter__(self) -> ShortTermMemory:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    def __del__(self) -> None:
        if not getattr(self, "closed", True) and getattr(self, "_writer", None) is not None:
            warnings.warn(
                f"{self!r} was never closed: pending memory writes may be lost",
                ResourceWarning,
                stacklevel=1,
            )

    @property
    def writer(self) -> Writer:
        """The background writer (exists once opened)."""
        if self._writer is None:
            raise RuntimeError("short-term memory is not open: use 'await ShortTermMemory.open()'")
        return self._writer

    @property
    def stats(self) -> dict[str, int]:
        """Counters for benchmarks and health checks."""
        writer = self.writer
        return {
            "cached_keys": len(self.cache),
            "evicted_keys": self.cache.evicted,
            "round_trips": writer.round_trips,
            "commits": writer.commits,
            "pending": writer.pending,
        }

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "short-term memory task %s failed", task.get_name(), exc_info=task.exception()
            )

    async def _gather_background(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    # -- settings -----------------------------------------------------------
    def settings_for(self, server_id: int | None) -> ServerSettings:
        """The settings in force for a server (the defaults for DMs and new servers)."""
        return self.settings.for_server(server_id)

    async def get_server_settings(self, server_id: int | None) -> ServerSettings:
        """That server's settings; the global defaults for a new server or for DMs (None)."""
        return self.settings.for_server(server_id)

    async def update_server_settings(self, server_id: int, **changes: Any) -> ServerSettings:
        """Change settings other than categories; a bad value or unknown field raises ValueError."""
        return await self._save_settings(server_id, self.settings.changed(server_id, **changes))

    async def set_categories(
        self, server_id: int, categories: Iterable[Category]
    ) -> ServerSettings:
        """Replace the server's categories; an empty list restores the single ``summary`` one."""
        updated = self.settings.with_categories(server_id, categories)
        return await self._save_settings(server_id, updated)

    async def _save_settings(self, server_id: int, settings: ServerSettings) -> ServerSettings:
        await self.writer.submit(SaveServerSettings(server_id, settings.model_dump_json()))
        self.settings.set(server_id, settings)
        return settings

    async def set_user_opt_out(self, user_id: int, opted_out: bool) -> None:
        """A user's durable "do not remember me"; it erases nothing already held."""
        await self.writer.submit(SaveOptOut(user_id, bool(opted_out), self.clock()))
        self.settings.set_opt_out(user_id, bool(opted_out))

    def is_opted_out(self, user_id: int) -> bool:
        """True while the user asked not to be remembered."""
        return self.settings.is_opted_out(user_id)

    # -- stage 01: passive capture -------------------------------------------
    async def capture(self, event: GenerationFinished) -> None:
        """Remember the turn's messages under its keys; no database round trip on this path."""
        ctx = event.context
        if event.stopped or self.closed or self.settings.is_opted_out(ctx.user_id):
            return
        if not self.settings_for(ctx.server_id).enabled:
            return
        now = self.clock()
        messages = [
            StoredMessage(
                m.role, m.content, m.speaker_name, m.author_id, m.timestamp.timestamp(), ctx.user_id
            )
            for m in event.messages
            if m.content and not m.content.isspace()  # strip() would copy every message
        ]
        if not messages:
            return
        user_k, server_k = turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id)
        cold: list[str] = []
        writer = self.writer
        for key in (user_k, server_k):
            if key is None:
                continue
            entry = self.cache.get(key, now)
            if entry is None:
                known = self._no_row_elsewhere()
                entry = self._new_entry(key, ctx, now, hydrated=known)
                if not known:
                    cold.append(key)
            entry.remember(messages, self.config.max_messages_per_channel)
            self._describe(entry, ctx)
            self.cache.touch(entry, now)
            self.cache.index_users(entry, {ctx.user_id})
            if key == (server_k or user_k):
                entry.turns_since_refresh += 1
            writer.mark_dirty(entry)
        if cold:
            self._hydrate_in_background(cold)

    def _new_entry(self, key: str, ctx: TurnContext, now: float, *, hydrated: bool) -> Entry:
        scope = parse_key(key).scope
        entry = Entry(
            key=key,
            scope=scope,
            server_id=ctx.server_id,
            user_id=ctx.user_id if scope == "user" else None,
            channel_id=ctx.channel_id,
            persona_id=ctx.persona_id,
            messages=[],
            updated_at=now,
            hydrated=hydrated,
        )
        self._describe(entry, ctx)
        self._put(entry)
        return entry

    @staticmethod
    def _describe(entry: Entry, ctx: TurnContext) -> None:
        entry.channel_name = ctx.channel_name or entry.channel_name
        entry.server_name = ctx.server_name or entry.server_name
        entry.parent_channel_id = ctx.parent_channel_id
        entry.channel_private = ctx.channel_is_private

    def _put(self, entry: Entry, *, touched: bool = True) -> None:
        for victim in self.cache.put(entry, touched=touched):
            self._warmed.discard(victim.group)

    # -- hydration ------------------------------------------------------------
    def _no_row_elsewhere(self) -> bool:
        """True when no durable row exists for a key the cache does not hold."""
        if self._all_rows_cached and self.cache.dropped:
            self._all_rows_cached = False
        return self._all_rows_cached

    def _thresholds(self) -> tuple[float, float]:
        now = self.clock()
        return now - self.config.crude_ttl_hours * HOUR, now - self.config.summary_ttl_hours * HOUR

    def _hydrate_in_background(self, keys: list[str]) -> None:
        # The name carries the scope keys: a failure is logged with them.
        task = self._spawn(self._hydrate(keys), name="stm-hydrate " + ", ".join(keys))
        for key in keys:
            self._hydrating[key] = task

    async def _hydrate(self, keys: list[str]) -> bool:
        """Read the rows of ``keys`` and merge them into the cache (inserting missing ones);
        False when they could not be read."""
        rows = await self._read(LoadRows(tuple(keys), *self._thresholds()), keys)
        try:
            if rows is None:
                return False
            found = {row.key: row for row in rows}
            for key in keys:
                row = found.get(key)
                entry = self.cache.peek(key)
                if entry is not None and not entry.hydrated:
                    self._merge(entry, row)
                elif entry is None and row is not None:
                    self._put(entry_from(row), touched=False)
            return True
        finally:
            for key in keys:
                if self._hydrating.get(key) is asyncio.current_task():
                    del self._hydrating[key]

    def _read(
        self, op: LoadRows | LoadRecent, keys: list[str]
    ) -> Coroutine[Any, Any, list[StoredRow] | None]:
        """Queue a read through the writer now (so it is ordered after every earlier delete
        and shares a round trip with what is queued with it); await the result for its rows,
        with the deletions made while it was in flight applied."""
        since = self._deletions.seq
        future = self.writer.submit(op, what=f"read of {len(keys)} keys")
        return self._read_result(future, since, keys)

    async def _read_result(
        self, future: asyncio.Future[Any], since: int, keys: list[str]
    ) -> list[StoredRow] | None:
        try:
            rows: list[StoredRow] = await future
        except Exception as exc:
            log.warning("short-term memory could not be read (%s): %s", ", ".join(keys[:3]), exc)
            return None
        later = self._deletions.since(since)
        if later is None:
            return None  # overtaken by more deletions than are remembered: read again later
        # The clock may have moved during the read, and a janitor pass may have dropped
        # the entry meanwhile: a row that has expired by now must not come back with it.
        crude_before, summary_before = self._thresholds()
        result = []
        for row in rows:
            distilled = bool(row.summary) or bool(row.categories)
            if row.updated_at <= (summary_before if distilled else crude_before):
                continue
            kept: StoredRow | None = row
            for deletion in later:
                if kept is not None:
                    kept = apply_to_row(kept, deletion)
            if kept is not None:
                result.append(kept)
        return result

    def _merge(self, entry: Entry, row: StoredRow | None) -> None:
        entry.hydrated = True
        if row is not None:
            if not entry.distilled:
                entry.summary, entry.categories = row.summary, dict(row.categories)
                entry.contributors |= row.contributors
                self.cache.index_users(entry, row.contributors)
            entry.turns_since_refresh += row.turns_since_refresh
            entry.last_refreshed_turn = max(entry.last_refreshed_turn, row.last_refreshed_turn)
        if not entry.deleted:
            self.writer.mark_dirty(entry)

    async def _live(self, key: str) -> Entry | None:
        """The hydrated entry under ``key`` (None when there is none), reading its row if
        needed; raises _Unavailable when the row cannot be read."""
        for _ in range(3):
            pending = self._hydrating.get(key)
            if pending is not None:
                await asyncio.shield(pending)
            entry = self.cache.get(key)
            if entry is not None and entry.hydrated:
                return entry
            if entry is None and pending is None and self._no_row_elsewhere():
                return None
            if pending is None and not await self._hydrate([key]):
                raise _Unavailable(key)
            entry = self.cache.get(key)
            if entry is None or entry.hydrated:
                return entry
        raise _Unavailable(key)

    def _warm(self, group: GroupKey) -> Coroutine[Any, Any, None] | None:
        """Load the newest rows of a recall group once per process (after a restart): the
        read is queued now; await the result to merge the rows. None when nothing to read."""
        if group in self._warmed:
            return None
        self._warmed.add(group)
        if self._no_row_elsewhere():
            return None  # every row of the group is already in the cache
        scope, owner, server_id, persona = group
        op = LoadRecent(
            scope,
            owner,
            server_id,
            persona,
            self.config.max_other_channels + 1,
            *self._thresholds(),
        )
        return self._warmed_with(group, self._read(op, [f"{scope}:{owner}"]))

    async def _warmed_with(
        self, group: GroupKey, reading: Coroutine[Any, Any, list[StoredRow] | None]
    ) -> None:
        rows = await reading
        if rows is None:
            self._warmed.discard(group)
            return
        for row in rows:
            if self.cache.peek(row.key) is None:
                self._put(entry_from(row), touched=False)

    # -- the turn path: context and tool --------------------------------------
    def _tool_blocked(self, ctx: TurnContext, settings: ServerSettings) -> str | None:
        if self.closed:
            return "short-term memory is shut down"
        if not settings.enabled:
            return "short-term memory is turned off in this server"
        if ctx.disable_short_term_memory_update:
            return "short-term memory was already updated in this turn; do not call it again"
        if ctx.explicit_memory_intent or self.intent_gate.matches(ctx.user_text):
            return (
                "the user explicitly asked to remember something; that belongs to long-term "
                "memory, not this tool"
            )
        if self.settings.is_opted_out(ctx.user_id):
            return "the user asked not to be remembered"
        return None

    def tool_schema(self, ctx: TurnContext) -> dict[str, Any] | None:
        """The ``update_short_term_memory`` tool for this turn, or None when unavailable."""
        settings = self.settings_for(ctx.server_id)
        if self._tool_blocked(ctx, settings) is not None:
            return None
        return tool_definition(
            settings.categories, self.config.max_summary_length, settings.tool_description
        )

    async def build_context(self, ctx: TurnContext) -> PromptContext:
        """This turn's Short-Term Memory Context: same-channel distilled memory, other
        channels' memory, and the cadence nudge."""
        settings = self.settings_for(ctx.server_id)
        if not settings.enabled or self.closed:
            return PromptContext(nudge_depth=settings.nudge_depth)
        user_k, server_k = turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id)
        live_key = server_k or user_k
        self._mark_turn_start(ctx)
        group = group_of(
            "user" if server_k is None else "server", ctx.server_id, ctx.user_id, ctx.persona_id
        )
        entry: Entry | None = None
        for _ in range(3):
            # A cold group's read is queued first, so that it shares the live key's round
            # trip (the writer commits what is queued together) instead of following it.
            warming = self._warm(group)
            try:
                try:
                    entry = await self._live(live_key)
                except _Unavailable:
                    entry = None  # the store is down: answer from what the cache holds
            finally:
                if warming is not None:
                    await warming
            # While the reads ran, the entry may have been cleared, purged or evicted (and
            # then missed by a purge): render only what the cache still holds.
            if entry is None or self.cache.peek(live_key) is entry:
                break
            entry = None
        now = self.clock()
        if entry is not None and self.cache.is_expired(entry, now):
            entry = None
        others = self.cache.recall(group, ctx.channel_id, self.config.max_other_channels, now)
        context = PromptContext(nudge_depth=settings.nudge_depth)
        block = same_channel_block(entry, settings, ctx.bot_name, now, self._render_cache)
        if block is not None:
            context.blocks.append(block)
        context.blocks.extend(
            other_channels_blocks(others, settings, ctx.bot_name, now, self._render_cache)
        )
        if (
            entry is not None
            and entry.turns_since_refresh >= settings.refresh_cadence
            and self._tool_blocked(ctx, settings) is None
        ):
            context.nudge = nudge(settings)
        return context

    async def run_tool(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Stage 02, summary upgrade; never raises for what the model sent."""
        settings = self.settings_for(ctx.server_id)
        blocked = self._tool_blocked(ctx, settings)
        if blocked is not None:
            return _refused(f"{TOOL_NAME} is not available: {blocked}.")
        limit = self.config.max_summary_length
        values = parse_arguments(arguments_model(settings.categories, limit), arguments, limit)
        if isinstance(values, str):
            return _refused(values)
        self._mark_turn_start(ctx)
        keys = [
            k
            for k in turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id)
            if k is not None
        ]
        entries: list[Entry] = []
        for _ in range(3):
            try:
                entries = [await self._entry_for_upgrade(key, ctx) for key in keys]
            except _Unavailable:
                # Upgrading without the row would overwrite what it holds (its
                # contributors among it) with a guess.
                return _refused(
                    f"{TOOL_NAME} could not be applied: the memory store is unavailable "
                    "right now. Nothing was saved."
                )
            if self.closed or ctx.disable_short_term_memory_update:
                return _refused(f"{TOOL_NAME} is not available any more in this turn.")
            if any(e.deleted for e in entries) or self._overtaken(ctx):
                return _refused(
                    f"{TOOL_NAME} was not applied: this conversation's memory was "
                    "cleared during the turn. Nothing was saved."
                )
            # Reading one key's row can evict the other key's entry when the cache is
            # full; an upgrade of an entry the cache no longer holds would not be seen.
            if all(self.cache.peek(e.key) is e for e in entries):
                break
        else:
            return _refused(
                f"{TOOL_NAME} could not be applied: the memory is too busy right now. "
                "Nothing was saved; you may try again later."
            )
        return await self._upgrade(ctx, settings, entries, values)

    async def _entry_for_upgrade(self, key: str, ctx: TurnContext) -> Entry:
        entry = await self._live(key)
        if entry is None:
            entry = self._new_entry(key, ctx, self.clock(), hydrated=True)
        return entry

    def _overtaken(self, ctx: TurnContext) -> bool:
        """Was memory this turn saw cleared since the turn began? Its summary, written from
        what the model saw, must not bring the cleared words back."""
        later = self._deletions.since(ctx._deletion_seq or 0)
        return later is None or overtakes(later, ctx.channel_id, ctx.server_id)

    def _mark_turn_start(self, ctx: TurnContext) -> None:
        """Remember how many deletions preceded this turn's first call (once per turn)."""
        # Read through the private-attribute dict: the attribute path goes through
        # BaseModel.__getattr__ and costs about a microsecond on every turn.
        private = ctx.__pydantic_private__
        if private is None or private.get("_deletion_seq") is None:
            ctx._deletion_seq = self._deletions.seq

    async def _upgrade(
        self,
        ctx: TurnContext,
        settings: ServerSettings,
        entries: list[Entry],
        values: dict[str, str],
    ) -> ToolResult:
        now = self.clock()
        contributors = {ctx.user_id}
        for entry in entries:
            contributors |= entry.turn_users()
        before = [
            (
                e,
                e.summary,
                e.categories,
                e.contributors,
                e.turns_since_refresh,
                e.last_refreshed_turn,
            )
            for e in entries
        ]
        for entry in entries:
            if settings.summary_mode:
                entry.summary, entry.categories = values["summary"], {}
            else:
                entry.summary, entry.categories = None, {**entry.categories, **values}
            entry.contributors |= contributors
            entry.turns_since_refresh = 0
            entry.last_refreshed_turn += 1
            entry.version += 1
            self._describe(entry, ctx)
            self.cache.touch(entry, now)
            self.cache.index_users(entry, contributors)
        versions = [e.version for e in entries]
        # Write in the order the turn made its changes: identity rows from capture first,
        # then the upgrade (as when every new key was read first, which queued them).
        self.writer.queue_dirty()
        writes = [
            self.writer.submit(SaveDistilled(row_of(e)), what=f"upgrade of {e.key}")
            for e in entries
        ]
        try:
            await asyncio.gather(*writes)
        except Exception as exc:
            log.error("short-term memory upgrade not saved (%s): %s", entries[0].key, exc)
            for (entry, summary, categories, who, turns, refreshed), version in zip(
                before, versions, strict=True
            ):
                if entry.version == version and not entry.deleted:
                    entry.summary, entry.categories, entry.contributors = summary, categories, who
                    entry.turns_since_refresh, entry.last_refreshed_turn = turns, refreshed
                    entry.version += 1
            return _refused(
                f"{TOOL_NAME} failed: the memory could not be saved ({exc}). "
                "Nothing was stored; you may try again later."
            )
        ctx.disable_short_term_memory_update = True
        names = ", ".join(sorted(values))
        return ToolResult(
            success=True,
            message=f"Short-term memory updated ({names}). This is silent: users do not see it, "
            "so do not mention it.",
        )

    # -- deletion -------------------------------------------------------------
    async def clear_short_term_memory_for_channel(self, channel_id: int) -> int:
        """``/refresh``: forget every scope and persona of the channel; returns keys evicted.

        Evicted at once; the durable delete runs in the background (see ``flush``).
        """
        keys = self.cache.keys_of_channel(channel_id)
        for key in keys:
            entry = self.cache.remove(key)
            if entry is not None:
                entry.deleted = True
                self._warmed.discard(entry.group)
        self.writer.forget_dirty(keys)
        op = DeleteChannel(channel_id)
        self._deletions.record(op)
        self.writer.submit_delete(op, what=f"clearing channel {channel_id}")
        return len(keys)

    async def clear_short_term_memory_for_user(
        self, user_id: int, server_id: int | None = None
    ) -> int:
        """Purge a user (within one server when ``server_id`` is given); returns keys touched.

        Deletes the user's own entries, removes the crude messages of turns they
        triggered everywhere, and drops distilled content they contributed to.
        """
        touched = 0
        for key in self.cache.keys_of_user(user_id):
            entry = self.cache.peek(key)
            if entry is None or (server_id is not None and entry.server_id != server_id):
                continue
            touched += 1
            if entry.scope == "user" and entry.user_id == user_id:
                self.cache.remove(key)
                entry.deleted = True
                self.writer.forget_dirty([key])
                continue
            kept = [m for m in entry.messages if user_id not in (m.turn_user_id, m.author_id)]
            if len(kept) != len(entry.messages):
                entry.messages = kept
            if user_id in entry.contributors:
                entry.summary, entry.categories, entry.contributors = None, {}, frozenset()
                entry.version += 1
        op = PurgeUser(user_id, server_id)
        self._deletions.record(op)
        where = "everywhere" if server_id is None else f"in server {server_id}"
        self.writer.submit_delete(op, what=f"purging user {user_id} {where}")
        return touched

    # -- expiry ---------------------------------------------------------------
    async def run_janitor(self) -> int:
        """Drop expired entries from the cache and queue the deletion of expired rows."""
        now = self.clock()
        expired = self.cache.expired_keys(now)
        for key in expired:
            self.cache.remove(key)
        if expired:
            self._all_rows_cached = False  # their rows wait for the delete queued below
        self.writer.forget_dirty(expired)
        self.writer.submit_delete(DeleteExpired(*self._thresholds()), what="deleting expired rows")
        return len(expired)

    async def _janitor_loop(self) -> None:
        interval = self.config.janitor_interval_minutes * 60
        while True:
            await asyncio.sleep(interval)
            try:
                await self.run_janitor()
            except Exception:
                log.exception("short-term memory janitor failed")

    # -- inspection -----------------------------------------------------------
    async def get_entry(self, key: str) -> MemoryEntry | None:
        """A snapshot of what is held under a scope key, or None (expired entries too)."""
        parse_key(key)
        try:
            entry = await self._live(key)
        except _Unavailable:
            entry = self.cache.get(key)  # what is held in memory, without its durable part
        if entry is None or (
            not entry.messages
            and not entry.distilled
            and not entry.turns_since_refresh
            and not entry.last_refreshed_turn
        ):
            return None
        return snapshot(entry, entry.expires_at(self.cache.crude_ttl, self.cache.summary_ttl))


class _Unavailable(Exception):
    """The durable row of a key could not be read."""


def _refused(message: str) -> ToolResult:
    return ToolResult(success=False, message=message)


class MemoryTool:
    """The STM upgrade tool in the host's ``Tool`` form (``memory.tool``)."""

    name = TOOL_NAME

    def __init__(self, memory: ShortTermMemory) -> None:
        self._memory = memory

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        """The tool's definition for this turn, or None."""
        return self._memory.tool_schema(ctx)

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Run the upgrade."""
        return await self._memory.run_tool(ctx, arguments)


class _Opening:
    """``await ShortTermMemory.open(...)`` or ``async with ShortTermMemory.open(...) as m``."""

    def __init__(self, coro: Awaitable[ShortTermMemory]) -> None:
        self._coro = coro
        self._memory: ShortTermMemory | None = None

    def __await__(self) -> Generator[Any, None, ShortTermMemory]:
        return self._coro.__await__()

    async def __aenter__(self) -> ShortTermMemory:
        self._memory = await self._coro
        return self._memory

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._memory is not None:
            await self._memory.close()
