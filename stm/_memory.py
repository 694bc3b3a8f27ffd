"""ShortTermMemory: the sub-pipeline's facade, and its table of contents.

A turn goes through it in stages, each kept in its own module:

- opening and closing, background tasks, the janitor: ``_background.py``;
- stage 01, ``capture``: the turn's messages into the in-process cache (``_cache.py``);
- ``build_context``: the cache, read through to the store where it may lack a row
  (``_readthrough.py``), rendered as prompt text (``_render.py``);
- stage 02, the tool and its upgrade transaction: ``tool/``;
- deletion (``/refresh``, purges), recorded for the reads and upgrades in flight
  (``_deletions.py``), and made durable in the background;
- everything durable goes through the single writer (``_writer.py``) to the store
  (``store/``), which the facade is given or opens from the settings.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
import warnings
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from ._audience import Audience
from ._background import Background, Opening
from ._budget import TokenCounter, count_with, fit
from ._cache import Entry, MemoryCache
from ._config import STMConfig
from ._convert import snapshot
from ._deletions import Purge, add_reach, with_own
from ._drops import (
    clear_channel,
    clear_ranges,
    clear_server,
    drop_unplanned,
    own_entry,
    purge_user,
)
from ._errors import DurabilityError, StoreError
from ._follower import Follower
from ._frames import Frames, model_language
from ._ids import check_bool, check_id, check_optional_id
from ._intent import IntentGate
from ._journal import Journal
from ._keys import parse_key
from ._lineage import Range
from ._messages import (
    Forgotten,
    RecentlyForgotten,
    edit_message,
    forget_messages,
    held_as,
    nudge_upgrade,
)
from ._metrics import DISCORD_EVENTS, MetricsSnapshot, Tally
from ._models import (
    Category,
    GenerationFinished,
    MemoryEntry,
    PromptContext,
    PurgeImpact,
    ServerSettings,
    ToolResult,
    TurnContext,
)
from ._provenance import TOO_WIDE, Shown, with_sources
from ._purgewatch import PurgeAlert, PurgeWatch, RecentPurges, describe_alert
from ._readthrough import (
    AGAIN,
    ANY_SERVER,
    NO_ROW,
    PURGE_WAIT_SECONDS,
    Again,
    ReadThrough,
    Unavailable,
    Unsettled,
    settle,
    turn_scope,
)
from ._redact import redact_text
from ._render import RenderCache, nudge, other_channels_blocks, record_shown, same_channel_block
from ._settings import SettingsBook
from ._text import clean_message
from ._timing import LoopScheduler, Scheduler
from ._tool.schema import definition_json
from ._tool.upgrade import MemoryTool, Upgrades
from ._window import Sources, StoredMessage
from ._writer import Writer
from .store import open_store
from .store._base import (
    EXPIRE_CHUNK,
    DeleteChannel,
    DeleteExpired,
    ForgetMessages,
    ForgetServer,
    LoadDepartures,
    LoadHistory,
    MarkDeparture,
    NoteVersion,
    PreviewPurge,
    PurgePreview,
    PurgeResult,
    PurgeUser,
    Restored,
    RestoreNotes,
    SaveOptOut,
    SaveServerSettings,
    SharedChange,
    Store,
    SweepStep,
)

__all__ = ["MemoryTool", "ShortTermMemory"]


# A StoredMessage from a tuple of its fields, without the named constructor's own call.
_message = functools.partial(tuple.__new__, StoredMessage)


# The most message ids one delete names (Discord's bulk delete takes 100).
MAX_MESSAGE_IDS = 1000


def _message_ids(message_ids: Iterable[int]) -> tuple[int, ...]:
    if isinstance(message_ids, str | bytes) or not isinstance(message_ids, Iterable):
        raise ValueError("message_ids must be an iterable of message ids")
    ids = tuple(dict.fromkeys(check_id(i, "message_id") for i in message_ids))
    if len(ids) > MAX_MESSAGE_IDS:
        raise ValueError(f"at most {MAX_MESSAGE_IDS} message ids at once, not {len(ids)}")
    return ids


# How long the change feed keeps a change at least.
FEED_RETENTION_SECONDS = 600.0

# How often a process looks for purges another process began and left unfinished (it
# stopped): one unfinished at two looks in a row, and not being carried out here, is
# carried out here (``ShortTermMemory._adopt_abandoned``).
ABANDONED_PURGE_SECONDS = 30.0

log = logging.getLogger("stm")


class ShortTermMemory:
    """Short-term memory of a bot: open with ``await ShortTermMemory.open(config)``."""

    def __init__(
        self,
        config: STMConfig,
        store: Store,
        *,
        clock: Callable[[], float] = time.time,
        intent_gate: IntentGate | None = None,
        scheduler: Scheduler | None = None,
        on_purge_alert: Callable[[PurgeAlert], None] | None = None,
        channel_is_private: Callable[[TurnContext], bool] | None = None,
        token_counter: TokenCounter | None = None,
        audience: Audience | None = None,
    ) -> None:
        if audience is not None and not isinstance(audience, Audience):
            raise TypeError(
                f"audience must have may_recall(server_id, into, from_), "
                f"not be a {type(audience).__name__}"
            )
        self.config = config
        # Who may read which channel, asked at every prompt that recalls other channels;
        # None: the flag each channel's turns carried at capture decides (``stm._audience``).
        self.audience = audience
        self.store = store
        self.clock = clock
        # The feed's changes are stamped by this clock too, as every other time is.
        store.clock = clock
        self.intent_gate = intent_gate or IntentGate()
        self.scheduler = scheduler or LoopScheduler()
        self.cache = MemoryCache(
            max_keys=config.cache_max_keys,
            crude_ttl_hours=config.crude_ttl_hours,
            summary_ttl_hours=config.summary_ttl_hours,
            clock=clock,
        )
        self.settings = SettingsBook(config)
        self._background = Background(self.scheduler)
        # Built inert, in the order each needs the one before; ``_start`` starts them.
        self._closing = asyncio.Event()
        self._writer = Writer(
            store,
            write_behind=config.write_behind_seconds,
            retry_delay=config.delete_retry_seconds,
            scrub_delay=config.scrub_delay_seconds,
            scheduler=self.scheduler,
            journal=Journal.for_config(config),
            touch_guard=self._touch_guard,
            held=self._held,
        )
        self._tally = Tally()
        # The last record a reply was captured with: the next turn's, when equal, is this
        # one (a busy channel's turns often showed the same), so windows share it.
        self._last_sources: Sources | None = None
        self.purge_watch = PurgeWatch()
        self._on_purge_alert = on_purge_alert
        self._reads = ReadThrough(
            config,
            self.cache,
            self._writer,
            self._background.spawn,
            clock,
            empty_at_open=store.empty_at_open,
            tally=self._tally,
            channel_is_private=channel_is_private,
            audience=audience,
        )
        # Message ids deleted or edited on Discord lately, for captures and upgrades of
        # turns still being answered.
        self._forgotten = RecentlyForgotten()
        # The servers that removed the bot, as last read (``departures``), and when: a
        # start-up's many ``server_returned`` share one read per coherence bound.
        self._departed: dict[int, float] | None = None
        self._departed_read_at = 0.0
        self._departures_lock = asyncio.Lock()
        # The purges left unfinished at the last look, that no step queued here carries out.
        self._unfinished_elsewhere: set[int] = set()
        self.follower = Follower(
            store,
            self.cache,
            self._reads,
            self.settings,
            self._writer,
            self._background.spawn,
            coherence_seconds=config.coherence_seconds,
            erasure=config.erasure,
            forgotten=self._forgotten,
        )
        self._upgrades = Upgrades(
            config,
            self.cache,
            self._reads,
            self.settings,
            self._writer,
            self.follower,
            clock,
            self.intent_gate,
            self._closing,
            origin=store.origin,
            render=self._render,
            forgotten=self._forgotten,
            tally=self._tally,
        )
        self.tool = MemoryTool(self)
        self._render_cache = RenderCache()
        # Under a token budget: the host's tokenizer, else the estimate (``stm._budget``).
        self.count_tokens = count_with(token_counter)
        self._operator_budget = config.context_token_budget or None
        self._tool_tokens: dict[str, int] = {}
        self._tool_tokens_of: tuple[ServerSettings, str, int] | None = None
        self.closed = False

    # -- opening and closing ------------------------------------------------
    @classmethod
    def open(
        cls,
        config: STMConfig | None = None,
        *,
        store: Store | None = None,
        clock: Callable[[], float] = time.time,
        intent_gate: IntentGate | None = None,
        scheduler: Scheduler | None = None,
        on_purge_alert: Callable[[PurgeAlert], None] | None = None,
        channel_is_private: Callable[[TurnContext], bool] | None = None,
        token_counter: TokenCounter | None = None,
        audience: Audience | None = None,
    ) -> Opening[ShortTermMemory]:
        """Open the memory: ``await`` it, or use it as ``async with``.

        Without ``store``, the store named by ``config.database`` is opened; a given
        store is closed with the memory. ``on_purge_alert`` is told of every purge that
        clears too much of a server's memory, or repeats (a ``PurgeAlert``); without
        it they are logged as warnings on the ``stm`` logger. ``channel_is_private`` is
        asked about a server channel a turn's context calls public; its True (or an
        error) makes the channel's memory private (the cog asks Discord). ``token_counter``:
        the model's tokenizer as a callable from text to a count, for the token budget
        (default: ``stm.estimate_tokens``). ``audience`` (an ``stm.Audience``): who may read
        which channel, asked at every prompt about the other channels it would show (the
        cog's answers from Discord's permissions); without it, a channel's memory is shown
        in the server's other channels unless its turns were flagged private."""
        return Opening(
            cls._open(
                config or STMConfig(),
                store,
                clock,
                intent_gate,
                scheduler,
                on_purge_alert,
                channel_is_private,
                token_counter,
                audience,
            )
        )

    @classmethod
    async def _open(
        cls,
        config: STMConfig,
        store: Store | None,
        clock: Callable[[], float],
        gate: IntentGate | None,
        scheduler: Scheduler | None,
        on_purge_alert: Callable[[PurgeAlert], None] | None,
        channel_is_private: Callable[[TurnContext], bool] | None = None,
        token_counter: TokenCounter | None = None,
        audience: Audience | None = None,
    ) -> ShortTermMemory:
        if store is None:
            store = await open_store(config)
        try:
            memory = cls(
                config,
                store,
                clock=clock,
                intent_gate=gate,
                scheduler=scheduler,
                on_purge_alert=on_purge_alert,
                channel_is_private=channel_is_private,
                token_counter=token_counter,
                audience=audience,
            )
            await memory._start()
        except BaseException:
            await store.close()
            raise
        return memory

    async def _start(self) -> None:
        self.settings.load(
            await self.store.load_server_settings(), await self.store.load_opt_outs()
        )
        # A settings change committed after this position is applied by the follower; one
        # committed before it but after the load above is read by the second load.
        await self.follower.start()
        self.settings.load(
            await self.store.load_server_settings(), await self.store.load_opt_outs()
        )
        sweeps = await self.store.pending_sweeps()
        # Purges a stopped process left before the store planned them: what they may reach
        # is hidden, and upgrades it may reach wait for their plan, as for a purge made here
        # (the rows of planned ranges already read as cleared).
        resumed = {
            position: self._resumed(position, deletion, servers)
            for position, deletion, servers in await self.store.unplanned_purges()
        }
        self._writer.start(sweeps, resumed, self._replayed)
        self._background.every(
            self.config.janitor_interval_minutes * 60, self.run_janitor, "stm-janitor"
        )
        self._background.every(
            ABANDONED_PURGE_SECONDS, self._adopt_abandoned, "stm-abandoned-purges"
        )
        self._background.forever(self.follower.run(), "stm-follower")

    async def _adopt_abandoned(self) -> None:
        """Carry out the purges another process began and left unfinished: those the store
        still has work for at two looks in a row (``ABANDONED_PURGE_SECONDS`` apart) that
        no step queued here carries out. Without it, a purge whose process stopped before
        planning it would hold up, until some process opened the database again, every
        turn this one answers where it may reach (each waits for its plan), and its rows
        would stay uncleared. Its steps are those of a purge resumed at opening; this
        process's cache learns its ranges as it learns any other process's purge, from the
        follower (``Store.purge_ranges``), and a live process that made it still sees it
        through (``Purge.tell``)."""
        if not self.writer.healthy:
            return  # the store is failing: its own retries come first; look again later
        try:
            found = await self.store.pending_sweeps()
        except Exception as exc:  # the writer hears of an outage, and says so, itself
            log.debug("short-term memory could not look for unfinished purges: %s", exc)
            return
        unfinished = set(found) - self.writer.sweeping()
        abandoned = unfinished & self._unfinished_elsewhere
        self._unfinished_elsewhere = unfinished - abandoned
        if not abandoned:
            return
        # Whose they are, where this process heard of them (its own, or the feed's).
        known = {p.position: p for p in self._reads.deletions.pending if p.position is not None}
        for position in sorted(abandoned):
            whom = ""
            if (purge := known.get(position)) is not None:
                user, where = _whom(purge.deletion)
                whom = f"of user {user} {where} "
            log.warning(
                "carrying out the purge %sat feed position %d, which another process began "
                "and left unfinished",
                whom,
                position,
            )
            self.writer.resume(position)

    def _resumed(
        self, position: int, deletion: PurgeUser, servers: frozenset[int | None] | None
    ) -> Callable[[Any], None]:
        """Log a purge a stopped process left unplanned as pending (only ``servers`` wait
        for its plan, when the store said which it may reach); return what applies each
        step of its sweep: its ranges, once all are told, to the cache."""
        purge = self._reads.deletions.record_purge(deletion)
        purge.position = position
        if servers is not None:
            purge.narrow(servers)
        log.info("resuming the purge of user %s %s a stopped process left", *_whom(deletion))
        # Who asked for it is not known here: its reach is not counted against anyone.
        return self._told(purge, None)

    def _held(self, entry: Entry) -> bool:
        """Whether the cache holds this very entry (not evicted, dropped or replaced)."""
        return self.cache.peek(entry.key) is entry

    def _touch_guard(self) -> tuple[int | None, float, float]:
        """What a write-behind batch is checked against: the feed position the cache is
        current with, and the expiry thresholds now (see ``store.base.Touch``)."""
        return (self.follower.position, *self._reads.thresholds())

    async def flush(self) -> None:
        """Return once every background write and delete so far is durable.

        Raises DurabilityError naming what could not be made durable (it stays
        queued and is retried).
        """
        await self._background.gather()
        await self.writer.flush()

    async def close(self) -> None:
        """Finish every pending write and delete, then close the store."""
        if self.closed:
            return
        self.closed = True
        self._closing.set()
        try:
            await self._background.stop()
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
        writer = getattr(self, "_writer", None)
        if not getattr(self, "closed", True) and writer is not None and writer.started:
            warnings.warn(
                f"{self!r} was never closed: pending memory writes may be lost",
                ResourceWarning,
                stacklevel=1,
            )

    @property
    def writer(self) -> Writer:
        """The background writer (it commits once opened)."""
        return self._writer

    @property
    def background(self) -> Background:
        """The background tasks (reads in flight, the janitor)."""
        return self._background

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

    @property
    def metrics(self) -> MetricsSnapshot:
        """Counters and timings since open, as plain numbers (a ``MetricsSnapshot``)."""
        t, writer = self._tally, self.writer
        return MetricsSnapshot(
            captures=t.captures,
            upgrades=t.upgrades,
            upgrade_seconds=t.upgrade_seconds,
            refusals=dict(t.refusals),
            channel_clears=t.channel_clears,
            user_purges=t.user_purges,
            purged_shared_entries=t.purged_shared_entries,
            purges_over_threshold=t.purges_over_threshold,
            repeated_purges=t.repeated_purges,
            janitor_passes=t.janitor_passes,
            hydrations=t.hydrations,
            hydrated_keys=t.hydrated_keys,
            hydration_failures=t.hydration_failures,
            cache_keys=len(self.cache),
            cache_evictions=self.cache.evicted,
            writer_queue_depth=writer.pending,
            writer_batches=writer.counters.commits,
            writer_batch_ops=writer.counters.ops_committed,
            writer_largest_batch=writer.counters.largest_batch,
            commit_seconds=writer.counters.store_seconds,
            durable_write_failures=writer.counters.failures,
            durable_write_retries=writer.counters.retries,
            messages_deleted=t.messages_deleted,
            messages_edited=t.messages_edited,
            discord_events=dict(t.discord_events),
            replies_too_wide=t.replies_too_wide,
            # Closed, the memory follows no feed.
            feed_lag_seconds=None if self.closed else self.follower.lag_seconds(),
        )

    # -- settings -----------------------------------------------------------
    def settings_for(self, server_id: int | None) -> ServerSettings:
        """The settings in force for a server (the defaults for DMs and new servers)."""
        return self.settings.for_server(server_id)

    async def get_server_settings(self, server_id: int | None) -> ServerSettings:
        """That server's settings; the global defaults for a new server or for DMs (None)."""
        check_optional_id(server_id, "server_id")
        return self.settings.for_server(server_id)

    async def update_server_settings(self, server_id: int, **changes: Any) -> ServerSettings:
        """Change settings other than categories; a bad value or unknown field raises ValueError."""
        check_id(server_id, "server_id")
        updated = self.settings.changed(server_id, **changes)
        return await self._save_settings(server_id, updated, changes)

    async def set_categories(
        self, server_id: int, categories: Iterable[Category]
    ) -> ServerSettings:
        """Replace the server's categories; an empty list restores the single ``summary`` one."""
        check_id(server_id, "server_id")
        updated = self.settings.with_categories(server_id, categories)
        return await self._save_settings(server_id, updated, ("categories",))

    async def _save_settings(
        self, server_id: int, settings: ServerSettings, changed: Iterable[str]
    ) -> ServerSettings:
        # Stored: the fields the admins set, before and now; the rest follow the defaults.
        own = self.settings.own(server_id).union(changed)
        stored = self.settings.stored_form(server_id, settings, own)
        committed = self.settings.stage(server_id, settings, own)
        await self._durably(SaveServerSettings(server_id, stored), committed)
        return settings

    async def set_user_opt_out(self, user_id: int, opted_out: bool) -> None:
        """A user's durable "do not remember me"; it erases nothing already held. In force
        here at once; DurabilityError when the database could not take it yet (it is
        retried, and kept for a restart, until it does)."""
        check_id(user_id, "user_id")
        check_bool(opted_out, "opted_out")
        committed = self.settings.stage_opt_out(user_id, bool(opted_out))
        await self._durably(SaveOptOut(user_id, bool(opted_out), self.clock()), committed)

    async def _durably(self, change: SharedChange, committed: Callable[[Any], None]) -> None:
        """Queue ``change`` (already in force here, until ``committed`` is told it is in
        the store as well) for every process, and return once it is durable;
        DurabilityError when it is not after one try. It is retried, in order and
        journaled, either way: like a purge, it is never dropped."""
        queued = self.writer.submit_change(change, on_result=committed)
        await self.writer.flush(through=queued, scrub=False)

    def _replayed(self, change: SharedChange) -> Callable[[Any], None] | None:
        """A change this process's predecessor made and the journal kept for it: in force
        here again, as it was there, while the writer commits it; returns what to call
        once it is committed."""
        match change:
            case SaveServerSettings(server_id, stored):
                self.settings.load_one(server_id, stored)
                settings = self.settings
                return settings.stage(
                    server_id, settings.for_server(server_id), settings.own(server_id)
                )
            case SaveOptOut(user_id, opted_out, _):
                return self.settings.stage_opt_out(user_id, opted_out)
            case ForgetServer(server_id):
                return self.settings.stage(server_id, None)
        return None

    def is_opted_out(self, user_id: int) -> bool:
        """True while the user asked not to be remembered."""
        check_id(user_id, "user_id")
        return self.settings.is_opted_out(user_id)

    # -- stage 01: passive capture -------------------------------------------
    async def capture(self, event: GenerationFinished) -> None:
        """Remember the turn's messages under its keys; no database round trip on this path."""
        ctx = event.context
        opted_out = self.settings.is_opted_out
        if event.stopped or self.closed or opted_out(ctx.user_id):
            return
        settings = self.settings_for(ctx.server_id)
        if not settings.enabled:
            return
        if self._reads.overtaken(ctx, event.messages):
            # The turn began before a deletion of what its prompt showed, of its scope or
            # of one of its authors: its messages would bring deleted words back.
            return
        now = self.clock()
        user_id = ctx.user_id
        limit = self.config.max_message_length
        messages = tuple(
            [
                _message(
                    (
                        m.role,
                        content,
                        m.speaker_name,
                        m.author_id,
                        m._epoch if m._given else now,
                        user_id,
                        m.message_id,
                        None,
                    )
                )
                for m in event.messages
                # strip() would copy every message
                if (content := clean_message(m.content, limit)) and not content.isspace()
            ]
        )
        # Other authors' messages in this turn (a host that batches a busy channel): their
        # purge must find them, and their opt-out holds whoever's turn it is.
        users = {user_id}
        for message in messages:
            if message.author_id is not None:
                users.add(message.author_id)
        if len(users) > 1:
            paused = {user for user in users if opted_out(user)}
            if paused:
                messages = tuple([m for m in messages if m.author_id not in paused])
                users -= paused
        if self._forgotten.ids:
            # Deleted or edited on Discord while the turn was answered.
            messages = self._forgotten.applied(messages, limit)
        if not messages:
            return
        self._tally.captures += 1
        user_k, server_k, group = turn_scope(ctx)
        sources: Sources | None = None
        if any(m[0] == "assistant" for m in messages):
            # The bot's replies carry what the turn's prompt showed; a turn without
            # build_context, what a prompt would show now, as its upgrade would (not noted:
            # an upgrade still reads its group first).
            shown = ctx._shown or self._upgrades.what_a_prompt_would_show(ctx, settings, group)

            erasure, current = self.config.erasure, self._reads.current_pins
            last = self._last_sources
            messages, found = with_sources(messages, shown, user_id, erasure, current, last)
            if found is TOO_WIDE:
                self._tally.replies_too_wide += 1
                if not messages:
                    return
            elif isinstance(found, Sources):
                sources = self._last_sources = found
        cold: list[str] = []
        writer = self.writer
        cache, window = self.cache, self.config.max_messages_per_channel
        for key in (user_k, server_k):
            if key is None:
                continue
            entry = cache.get_touched(key, now)
            if entry is None:
                known = self._reads.no_row_elsewhere()
                entry = self._reads.new_entry(key, ctx, now, hydrated=known)
                if not known:
                    cold.append(key)
            else:
                self._reads.describe(entry, ctx)
            entry.remember(messages, window)
            if entry.scrolled is not None:
                cache.unindex_scrolled(entry)
            if len(users) == 1:
                cache.index_user(entry, user_id)  # most turns: no set to walk
            else:
                cache.index_users(entry, users)
            if sources is not None:
                cache.index_sourced(entry)
            # Every key the turn is kept under counts it, so that each entry's counter
            # says the same of the same turns (the nudge reads the server key's in a
            # server, the user key's in a DM; an upgrade resets both).
            entry.turns_since_refresh += 1
            writer.mark_dirty(entry)
        if cold:
            self._reads.hydrate_in_background(cold)

    # -- the turn path: context and tool --------------------------------------
    def tool_schema(self, ctx: TurnContext) -> dict[str, Any] | None:
        """The ``update_short_term_memory`` tool for this turn, or None when unavailable
        (also when its definition alone would not fit the server's token budget)."""
        definition = self._upgrades.definition(ctx)
        if definition is not None:
            settings = self.settings_for(ctx.server_id)
            budget = self.token_budget(settings)
            if budget is not None:
                language = model_language(settings, ctx.server_locale).language
                if self._definition_tokens(settings, language) > budget:
                    return None
        return definition

    def token_budget(self, settings: ServerSettings) -> int | None:
        """Tokens memory may add to a prompt under these settings, or None (no budget):
        the server's own budget, never above the operator's ``context_token_budget``."""
        operator = self._operator_budget
        own = settings.context_token_budget
        if own is None or own == 0:
            return operator
        return own if operator is None else min(own, operator)

    def tool_tokens(self, settings: ServerSettings, language: str) -> int:
        """Tokens of the tool's definition under these settings, in the model's
        ``language``: a token budget below it leaves the model no tool to update notes."""
        return self._definition_tokens(settings, language)

    def _definition_tokens(self, settings: ServerSettings, language: str) -> int:
        """Tokens of the tool's definition for these settings (counted once per text)."""
        last = self._tool_tokens_of
        if last is not None and last[0] is settings and last[1] == language:  # frozen
            return last[2]
        text = definition_json(
            settings.categories,
            self.config.max_summary_length,
            settings.tool_description,
            language,
        )
        tokens = self._tool_tokens.get(text)
        if tokens is None:
            if len(self._tool_tokens) >= 512:
                self._tool_tokens.clear()
            tokens = self._tool_tokens[text] = self.count_tokens(text)
        self._tool_tokens_of = (settings, language, tokens)
        return tokens

    async def run_tool(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Stage 02, summary upgrade; never raises for what the model sent."""
        return await self._upgrades.run(ctx, arguments)

    async def build_context(self, ctx: TurnContext) -> PromptContext:
        """This turn's Short-Term Memory Context: same-channel distilled memory, other
        channels' memory, and the cadence nudge."""
        settings = self.settings_for(ctx.server_id)
        if not settings.enabled or self.closed:
            return PromptContext(nudge_depth=settings.nudge_depth)
        user_k, server_k, group = turn_scope(ctx)
        live_key = server_k or user_k
        self._reads.mark_turn_start(ctx)
        self.follower.mark_turn_start(ctx)

        async def read() -> Entry | Again | None:
            # A cold group's read is queued first, so that it shares the live key's round
            # trip (the writer commits what is queued together) instead of following it.
            warming = self._reads.warm(group)
            try:
                entry = await self._reads.live(live_key)
            except Unavailable:
                entry = None  # the store is down: answer from what the cache holds
            except BaseException:
                if warming is not None:
                    # The caller is gone (cancelled): it must not wait for the group's read,
                    # which still merges its rows, in the background.
                    self._background.spawn(warming, "stm-warm")
                raise
            if warming is not None:
                await warming
            # While the reads ran, the entry may have been cleared, purged or evicted (and
            # then missed by a purge): render only what the cache still holds.
            if entry is None or self.cache.peek(live_key) is entry:
                return entry
            return AGAIN

        # A purge not yet planned by the store may reach this memory: wait for its plan
        # (usually one commit); what it may still reach at rendering is left out.
        if self._reads.deletions.pending and self.writer.healthy:
            await self._reads.planned(ctx.server_id)
        known = self._reads.settled(live_key, group)
        entry: Entry | None
        if known is None:
            try:
                entry = await settle(read)
            except Unsettled:
                entry = None
        else:
            entry = None if known is NO_ROW else known
        now = self.clock()
        if entry is not None and self.cache.is_expired(entry, now):
            entry = None
        others = self._reads.recall(ctx, group, now)
        if self._reads.deletions.pending:  # checked after the last await, as it renders
            entry, others = self._reads.visible(entry), [self._reads.visible(e) for e in others]
        context, shown = self._render(ctx, settings, entry, others, now)
        self._reads.note_shown(ctx, shown)
        assert context is not None
        return context

    def _render(
        self,
        ctx: TurnContext,
        settings: ServerSettings,
        entry: Entry | None,
        others: list[Entry],
        now: float,
        text: bool = True,
    ) -> tuple[PromptContext | None, Shown]:
        """The memory a turn's prompt shows (this channel's ``entry``, the ``others``
        recalled), within the token budget, and the record of what it shows (made by the
        rule the text follows, ``_render.segment_shows``, or by the budget's cut from the
        lines it kept). The one way a prompt's memory, or a prediction of what it showed,
        is made. ``text=False``: the record alone (the text too when a budget may cut it)."""
        shown = Shown.own(ctx.user_id, ctx.channel_id)
        record_shown(entry, others, settings, shown)
        if settings.context_token_budget is None:
            budget = self._operator_budget  # most servers: the operator's, or none
        else:
            budget = self.token_budget(settings)
        if budget is None and not text:
            return None, shown
        context = PromptContext(nudge_depth=settings.nudge_depth)
        frames = model_language(settings, ctx.server_locale)
        cache = self._render_cache
        block = same_channel_block(entry, settings, ctx.bot_name, now, cache, frames)
        if block is not None:
            context.blocks.append(block)
        context.blocks.extend(
            other_channels_blocks(others, settings, ctx.bot_name, now, cache, frames)
        )
        if budget is None:
            if (
                entry is not None
                and entry.turns_since_refresh >= settings.refresh_cadence
                and self._upgrades.blocked(ctx, settings) is None
            ):
                context.nudge = nudge(settings, frames)
            return context, shown
        # Under a budget the tool's definition counts too, when it is offered.
        offered = self._upgrades.blocked(ctx, settings) is None
        if offered and entry is not None and entry.turns_since_refresh >= settings.refresh_cadence:
            context.nudge = nudge(settings, frames)
        cut = self._fit(context, budget, offered, ctx, settings, entry, others, now, frames)
        if cut is not None:
            # Cut to fit: what the kept lines show.
            shown = Shown.own(ctx.user_id, ctx.channel_id)
            shown.add(cut)
        return context, shown

    def _fit(
        self,
        context: PromptContext,
        budget: int,
        offered: bool,
        ctx: TurnContext,
        settings: ServerSettings,
        entry: Entry | None,
        others: list[Entry],
        now: float,
        frames: Frames,
    ) -> Shown | None:
        """Count what memory adds to this turn's prompt and cut it to ``budget``; what the
        blocks show when some were cut (None: nothing was)."""
        count = self.count_tokens
        tool = self._definition_tokens(settings, frames.language) if offered else None
        used = 0 if tool is None else tool
        for block in context.blocks:
            used += count(block.text)
        if context.nudge is not None:
            used += count(context.nudge)
        if used <= budget:  # most turns: nothing to cut
            context.tokens = used
            return None
        counted = [count(block.text) for block in context.blocks]
        fitted = fit(
            context.blocks,
            context.nudge,
            tool,
            budget,
            count,
            counted=counted,
            entry=entry,
            others=others,
            settings=settings,
            bot_name=ctx.bot_name,
            now=now,
            cache=self._render_cache,
            frames=frames,
        )
        context.blocks, context.nudge = fitted.blocks, fitted.nudge
        context.tokens, context.dropped = fitted.tokens, fitted.dropped
        return fitted.shown  # None when the blocks were kept whole

    # -- deletion -------------------------------------------------------------
    async def clear_short_term_memory_for_channel(self, channel_id: int) -> int:
        """``/refresh``: clear every scope and persona of the channel; returns how many
        keys this process's cache dropped.

        Dropped at once; the durable delete runs in the background (see ``flush``).
        """
        check_id(channel_id, "channel_id")
        self._tally.channel_clears += 1
        dropped = clear_channel(self.cache, self._reads, self.writer, channel_id)
        self.writer.submit_change(DeleteChannel(channel_id))
        log.info("clearing channel %s (%d keys held here)", channel_id, dropped)
        return dropped

    async def clear_short_term_memory_for_user(
        self, user_id: int, server_id: int | None = None
    ) -> int:
        """Purge a user (within one server when ``server_id`` is given); returns the entries
        it changed in this process's cache.

        Deletes the user's own entries, removes the crude messages of turns they
        triggered or wrote everywhere, and clears the notes that may hold their words
        under ``STMConfig.erasure``. Returns once nothing of it is shown or returned; the
        durable delete runs in the background (see ``flush``, or ``purge``).
        """
        check_id(user_id, "user_id")
        check_optional_id(server_id, "server_id")
        return len((await self._purge(user_id, server_id, user_id))[0].keys)

    async def preview_purge(self, user_id: int, server_id: int | None = None) -> PurgeImpact:
        """What ``clear_short_term_memory_for_user`` would erase now: the user's own entries
        and, per server, the shared notes it would clear and all the server holds (for a
        confirmation that shows what goes). Erases nothing.

        Counts what the store holds and what this process holds not written yet: the
        user's own entries captured here and waiting for the write-behind are written
        first, so that they count here as the purge that follows counts them."""
        check_id(user_id, "user_id")
        check_optional_id(server_id, "server_id")
        erasure = self.config.erasure
        preview: PurgePreview | None = None
        # The user's own entries captured here, not written yet: the write-behind writes
        # them within seconds, so the purge confirmed after this finds them in the store
        # and counts them. Queued now, with the preview read behind them in the writer's
        # order, they count here as they will there.
        unwritten = self.writer.unwritten(lambda entry: own_entry(entry, user_id, server_id))
        if unwritten:
            self.writer.queue_dirty()
        # Off the write path: a preview of a wide reach holds no other work up (a store
        # of the host's own may not offer it).
        aside = None if unwritten else getattr(self.store, "preview_aside", None)
        if aside is not None:
            with contextlib.suppress(StoreError):  # its own connection failed
                preview = await aside(user_id, server_id, erasure)
        if preview is None:  # through the writer, as any read
            preview = await self.writer.submit(
                PreviewPurge(user_id, server_id, erasure), what=f"preview of a purge of {user_id}"
            )
        return PurgeImpact(
            user_id,
            server_id,
            erasure,
            preview.own,
            preview.shared,
            dict(preview.shared_by_server),
            dict(preview.distilled_by_server),
            preview.distilled_at_least,
        )

    async def purge(
        self, user_id: int, server_id: int | None = None, *, requested_by: int | None = None
    ) -> PurgeImpact:
        """``clear_short_term_memory_for_user``, then a ``flush`` of it: returns once the
        purge and what was queued before it are durable (and scrubbed from the files), not
        waiting for the rest of a janitor pass or another purge begun before, with what it
        erased (per server, as the store planned it). Raises DurabilityError while it
        cannot be made durable (it stays queued and is retried). ``requested_by``: the
        member who asked, when not the user (an admin), for ``purge_watch``."""
        check_id(user_id, "user_id")
        check_optional_id(server_id, "server_id")
        check_optional_id(requested_by, "requested_by")
        member = user_id if requested_by is None else requested_by
        purge, queued = await self._purge(user_id, server_id, member)
        # Not a whole flush: a janitor pass or another purge queued before this one has
        # later chunks, which this answer need not wait for.
        await self._background.gather()
        await self.writer.flush(through=queued)
        reach = purge.reach
        return PurgeImpact(
            user_id,
            server_id,
            self.config.erasure,
            purge.removed,
            purge.cleared,
            dict(reach.shared_by_server) if reach else {},
            dict(reach.distilled_by_server) if reach else {},
            reach.distilled_at_least if reach else frozenset(),
        )

    def recent_purges(self, server_id: int) -> RecentPurges:
        """This process's purges that cleared shared notes of the server within
        ``purge_watch``'s window (a day), and what they cleared."""
        check_id(server_id, "server_id")
        return self.purge_watch.recent(server_id, self.clock())

    def _watch(self, user_id: int, member: int, reach: PurgePreview) -> None:
        """Count what a planned purge reaches, and tell of it when it is too much."""
        self._tally.purged_shared_entries += reach.shared
        alerts = self.purge_watch.record(
            self.clock(),
            member=member,
            user_id=user_id,
            shared_by_server=reach.shared_by_server,
            distilled_by_server=reach.distilled_by_server,
        )
        reasons = {alert.reason for alert in alerts}
        self._tally.purges_over_threshold += "share" in reasons
        self._tally.repeated_purges += "repeated" in reasons
        for alert in alerts:
            if self._on_purge_alert is None:
                log.warning("%s", describe_alert(alert))
                continue
            try:
                self._on_purge_alert(alert)
            except Exception:
                log.exception("on_purge_alert failed; the alert was: %s", describe_alert(alert))

    async def _purge(self, user_id: int, server_id: int | None, member: int) -> tuple[Purge, int]:
        """Apply a purge to this process's cache, queue its durable part, and wait (briefly)
        for the store's plan of what else it reaches; the purge, and its place in the
        writer's queue."""
        erasure = self.config.erasure
        purge = purge_user(self.cache, self._reads, self.writer, user_id, server_id, erasure)
        touched = len(purge.keys)
        self._tally.user_purges += 1
        where = _whom(purge.deletion)[1]
        queued = self.writer.submit_change(
            PurgeUser(user_id, server_id, erasure), on_result=self._told(purge, member)
        )
        log.info("purging user %s %s (%d keys held here)", user_id, where, touched)
        # Usually one commit: then every entry it reaches is cleared here when this returns;
        # until then what it may reach is neither shown nor returned (``ReadThrough.hidden``).
        # When the store does not answer in time, all of that is dropped from the cache (and
        # read again later); the durable part is retried until it lands.
        # A store being retried will not answer soon: do not hold the caller up for it.
        wait = PURGE_WAIT_SECONDS if self.writer.healthy else 0.0
        if not await self._reads.planned_purge(purge, wait):
            dropped = drop_unplanned(self.cache, purge)
            log.warning(
                "purge of user %s %s not planned by the store in time: %d entries it may "
                "reach dropped from the cache, to be read again",
                user_id,
                where,
                dropped,
            )
        return purge, queued

    def _told(self, purge: Purge, member: int | None) -> Callable[[PurgeResult | SweepStep], None]:
        """What applies each transaction of ``purge`` as the store answers it: its ranges,
        once all are told, to the cache; what they reach, counted (against ``member``, who
        asked for it, when known)."""
        user_id, where = _whom(purge.deletion)

        def planned(result: PurgeResult | SweepStep) -> None:
            ranges: tuple[Range, ...] | None
            if isinstance(result, PurgeResult):
                purge.position = result.position
                purge.removed, purge.cleared = result.removed, result.cleared
                purge.own_distilled = dict(result.own_distilled)
                ranges, reach, more = result.ranges, result.reach, result.more
            else:
                purge.cleared += result.cleared  # a later step
                reach, more = result.reach, result.more
                if result.totals is not None:
                    # The last step: what the whole purge did, though another process
                    # may have carried out some of its steps (and told some pages). A
                    # process of an earlier version counts nothing there: never less
                    # than this one cleared itself.
                    purge.cleared = max(purge.cleared, result.totals.cleared)
                    if result.totals.reach is not None:
                        purge.counted, reach = result.totals.reach, None
                elif not more:
                    log.warning(
                        "the purge of user %s %s was finished elsewhere so long ago that "
                        "the database no longer records it: what it cleared is counted "
                        "here only as far as this process carried it out",
                        user_id,
                        where,
                    )
                ranges = None
                if "page" in result.phases:
                    ranges = purge.tell(result.ranges or (), result.told, result.after)
                # Pages told elsewhere (another process carried the purge out while this
                # one could not): past its last page, or clearing, the purge is still
                # pending here. Its ranges are read whole from the store.
                past = result.told or not more or bool({"clear", "finish"} & {*result.phases})
                if purge.pending and past and ranges is None:
                    self._read_ranges(purge)
            if ranges is not None:
                cleared = clear_ranges(self.cache, purge, ranges)
                log.info(
                    "purge of user %s %s: %d own rows deleted, notes of %d chains reached, "
                    "%d entries cleared here",
                    user_id,
                    where,
                    purge.removed,
                    len(ranges),
                    cleared,
                )
            elif isinstance(result, PurgeResult) and result.servers is not None:
                purge.narrow(result.servers)  # memory elsewhere need not wait for the plan
            if reach is not None:  # with the ranges, or (of a wide reach) in later steps
                purge.counted = add_reach(purge.counted, reach)
            if not more and purge.counted is not None:
                purge.reach = with_own(purge.counted, purge.removed, purge.own_distilled)
                if member is not None:
                    self._watch(user_id, member, purge.reach)

        return planned

    def _read_ranges(self, purge: Purge) -> None:
        """Read the ranges of ``purge`` (made or resumed here, and told in part by another
        process) whole from the store and apply them to the cache; until then it stays
        pending. If they cannot be read, what it may reach is dropped from the cache, to be
        read again from the rows it left."""
        position = purge.position
        if purge.reading or position is None:
            return
        purge.reading = True

        async def read() -> None:
            try:
                ranges = await self.store.purge_ranges(position)
            except Exception as exc:
                log.warning(
                    "the ranges of the purge at feed position %d could not be read (%s): "
                    "what it may reach leaves the cache, to be read again",
                    position,
                    exc,
                )
                ranges = None
            if not purge.pending:
                return
            if ranges is None:
                drop_unplanned(self.cache, purge)
                ranges = ()
            cleared = clear_ranges(self.cache, purge, ranges)
            log.info(
                "purge of user %s %s, carried out with another process: notes of %d chains "
                "reached, %d entries cleared here",
                *_whom(purge.deletion),
                len(ranges),
                cleared,
            )

        self._background.spawn(read(), f"stm-purge-ranges-{position}")

    # -- messages deleted or edited on Discord -----------------------------------
    async def forget_messages(self, channel_id: int, message_ids: Iterable[int]) -> int:
        """Messages deleted on Discord: remove them (by their ids) from every window of the
        channel, here and, through the change feed, in every other process; returns how
        many messages left this process's windows. Notes written while a window held one
        are marked for the model to rewrite at the next turn there."""
        check_id(channel_id, "channel_id")
        ids = _message_ids(message_ids)
        for message_id in ids:
            self._forgotten.note(message_id, None)
        done = forget_messages(self.cache, self._reads, channel_id, ids)
        self._after_forget(done, "deleted")
        self.writer.submit_change(ForgetMessages(channel_id, ids))
        self._tally.messages_deleted += done.messages
        if done.messages:
            log.info(
                "%d message(s) deleted on Discord left %d key(s) of channel %s",
                done.messages,
                len(done.keys),
                channel_id,
            )
        return done.messages

    async def edit_message(self, channel_id: int, message_id: int, content: str | None) -> int:
        """A message edited on Discord: its text in every window of the channel becomes
        ``content`` (bounded as a captured message is), or, when ``content`` is None or
        blank (the new text cannot be read), the message leaves the windows. Other
        processes drop it (the feed never holds message text). Returns how many windows
        changed here."""
        check_id(channel_id, "channel_id")
        check_id(message_id, "message_id")
        limit = self.config.max_message_length
        if content is not None and type(content) is not str:
            raise ValueError(f"content must be a string or None, not {type(content).__name__}")
        text = None if content is None else clean_message(content, limit)
        if text is None or not text or text.isspace():
            self._forgotten.note(message_id, None)
            done = forget_messages(self.cache, self._reads, channel_id, (message_id,))
        else:
            if held_as(self.cache, channel_id, message_id, text):
                return 0  # the text it had: nothing to change here or elsewhere
            self._forgotten.note(message_id, text)
            done = edit_message(self.cache, self._reads, channel_id, message_id, text)
        self._after_forget(done, "edited")
        self.writer.submit_change(ForgetMessages(channel_id, (message_id,), edited=True))
        self._tally.messages_edited += len(done.keys)
        if done.keys:
            log.info(
                "a message edited on Discord changed %d key(s) of channel %s",
                len(done.keys),
                channel_id,
            )
        return len(done.keys)

    def _after_forget(self, done: Forgotten, why: str) -> None:
        if not done.stale_notes:
            return
        marked = nudge_upgrade(done, lambda server: self.settings_for(server).refresh_cadence)
        for entry in marked:
            self.writer.mark_dirty(entry)
        if marked:
            log.info(
                "notes of %d key(s) marked for rewriting: a message they may hold was %s",
                len(marked),
                why,
            )

    # -- note history -------------------------------------------------------------
    async def history(self, key: str) -> list[NoteVersion]:
        """The versions of the notes held under ``key`` that its history keeps
        (``STMConfig.note_history``), newest first, the current notes first: what each
        said, when and whose turn wrote it. Read from the store, ordered after every
        change queued before it; nothing a deletion erased is among them. Never rendered."""
        scope = parse_key(key)
        if self.config.note_history == 0:
            return []  # off: what was kept before goes at the key's next upgrade
        server = scope.owner_id if scope.scope == "server" else ANY_SERVER
        if self._reads.deletions.pending and self.writer.healthy:
            await self._reads.planned(server)
        found: list[NoteVersion] = await self.writer.submit(LoadHistory(key), "note history")
        return found

    async def restore_notes(self, key: str, version: int, by: int | None = None) -> bool:
        """Bring back ``version`` (a ``NoteVersion.version`` of ``history(key)``) as the
        current notes of ``key``: an ordinary durable change, ordered with every other,
        applied by every process within the coherence bound. An upgrade of the key whose
        turn began before it is refused (it was written from the notes it replaces).
        ``by`` is whose restore it is (None: the operator or the host). It is made against
        the notes as they are when asked (read first, through the writer's queue): returns
        False when that version is no longer held (erased, or past the history's length),
        or the notes changed before the restore committed, and nothing changes.
        DurabilityError when the database could not take it yet (it is retried, and kept
        for a restart, until it does; a replay after it committed changes nothing)."""
        parse_key(key)
        if type(version) is not int or not 0 <= version < 2**63:
            raise ValueError(f"version must be a non-negative integer, not {version!r}")
        check_optional_id(by, "by")
        # Against the notes as they are now: if they change before it commits, or it is
        # replayed from the journal after it did, it changes nothing.
        current = next((held for held in await self.history(key) if held.current), None)
        if current is None:
            return False
        outcome: list[object] = []
        reloading: list[asyncio.Task[None]] = []
        op = RestoreNotes(
            key, version, by, self.clock(), self.config.note_history, expected=current.version
        )

        def committed(result: object) -> None:
            # Whenever the store takes it (at once, or on a retry after this call raised
            # DurabilityError): the notes held here are read again from the row. Other
            # processes read it from the feed; this one skips its own changes there.
            outcome.append(result)
            if isinstance(result, Restored):
                # In commit order too: a turn of this process that began while the restore
                # was queued read the notes it replaces (the store's guard passes over
                # this process's own changes).
                self._reads.deletions.record(op, frozenset((key,)))
                entry = self.cache.peek(key)
                if entry is not None:
                    self.cache.drop_distilled(entry)
                    reloading.append(
                        self._background.spawn(self._reads.reload(key), "stm-restore-read")
                    )
                log.info("restored version %d of the notes of %s", version, key)

        # Turns of this process that began before it and write the key are overtaken.
        self._reads.deletions.record(op, frozenset((key,)))
        await self._durably(op, committed)
        for task in reloading:
            await task
        return bool(outcome) and isinstance(outcome[0], Restored)

    # -- servers that removed the bot ---------------------------------------------
    async def server_removed(self, server_id: int) -> bool:
        """The bot was removed from a server (not an outage): record it durably (retried,
        and kept for a restart, until the database takes it: Discord says it once); its
        memory and settings are cleared ``STMConfig.server_removal_grace_minutes`` later
        (at once when 0) by ``clear_departed_servers``, unless ``server_returned`` comes
        first. Returns True when it was cleared at once."""
        check_id(server_id, "server_id")
        left_at = self.clock()
        self.writer.submit_change(MarkDeparture(server_id, left_at))
        if self._departed is not None:
            self._departed[server_id] = left_at
        log.info(
            "removed from server %s: its memory is cleared in %g minutes unless re-invited",
            server_id,
            self.config.server_removal_grace_minutes,
        )
        if self.config.server_removal_grace_minutes <= 0:
            await self._clear_departed(server_id)
            return True
        return False

    async def server_returned(self, server_id: int) -> bool:
        """The bot is in the server again: a removal recorded for it is forgotten (durably,
        as a removal is recorded). Returns True when one was, or when the departures could
        not be read (the return is recorded all the same)."""
        check_id(server_id, "server_id")
        try:
            departed = server_id in await self.departures()
        except Exception as exc:
            # Unknown: record the return anyway (it removes nothing that is not there).
            log.warning("departures could not be read (%s): recording return to %s", exc, server_id)
            departed = True
        if not departed:
            return False
        self.writer.submit_change(MarkDeparture(server_id, None))
        if self._departed is not None:
            self._departed.pop(server_id, None)
        log.info("back in server %s: its memory is kept", server_id)
        return True

    def configured_servers(self) -> list[int]:
        """The servers whose admins changed a setting (what a host compares with the
        servers it is in, to find those that removed the bot while it was offline)."""
        return self.settings.configured()

    async def departures(self) -> dict[int, float]:
        """Servers the bot was removed from whose memory is not cleared yet, with when: read
        at most once per ``STM_COHERENCE_SECONDS`` (what other processes record meanwhile is
        seen within that bound; this process's own records at once)."""
        async with self._departures_lock:
            fresh = time.monotonic() - self._departed_read_at < self.config.coherence_seconds
            if self._departed is None or not fresh:
                found: dict[int, float] = await self.writer.submit(
                    LoadDepartures(), what="departures"
                )
                self._departed, self._departed_read_at = found, time.monotonic()
            return dict(self._departed)

    async def clear_departed_servers(
        self, present: Callable[[int], bool] = lambda server_id: False
    ) -> list[int]:
        """Clear every server removed from longer ago than the grace period; one for which
        ``present`` says the bot is back is kept (its record goes). Returns those cleared."""
        grace = self.config.server_removal_grace_minutes * 60
        now = self.clock()
        cleared = []
        for server_id, left_at in sorted((await self.departures()).items()):
            if present(server_id):
                await self.server_returned(server_id)
            elif left_at <= now - grace:
                await self._clear_departed(server_id)
                cleared.append(server_id)
        return cleared

    async def _clear_departed(self, server_id: int) -> None:
        """``clear_server`` for a server that removed the bot: not yet durable is logged (it
        is in force here, retried and journaled), and the next server is seen to."""
        try:
            await self.clear_server(server_id)
        except DurabilityError as exc:
            log.warning("server %s cleared here, not yet in the database: %s", server_id, exc)

    async def clear_server(self, server_id: int) -> int:
        """Clear a server's memory (every channel and thread of it, as ``/refresh``) and its
        settings, here and in every process; returns the channels cleared. Gone from this
        process at once; the durable part is one change (``ForgetServer``), retried and
        journaled like a purge: DurabilityError when it is not durable after one try."""
        check_id(server_id, "server_id")
        held = clear_server(self.cache, self._reads, self.writer, server_id)
        settled = self.settings.stage(server_id, None)
        if self._departed is not None:
            self._departed.pop(server_id, None)
        cleared: set[int] = set(held)

        def stored(channels: list[int]) -> None:
            # In commit order: a read answered before it is cleared here after it.
            for channel_id in channels:
                clear_channel(self.cache, self._reads, self.writer, channel_id)
            cleared.update(channels)
            settled(channels)

        self._tally.discord_events["guild_cleared"] += 1
        await self._durably(ForgetServer(server_id), stored)
        log.info("cleared server %s: %d channels and its settings", server_id, len(cleared))
        return len(cleared)

    def count_event(self, kind: str) -> None:
        """Count one Discord event a host applied to the memory (``metrics.discord_events``,
        by kind: ``message_delete``, ``bulk_message_delete``, ``message_edit``,
        ``channel_delete``, ``thread_delete``, ``guild_remove``, ``guild_return``,
        ``guild_cleared``, ``member_remove`` or ``member_ban``)."""
        if kind not in DISCORD_EVENTS:
            raise ValueError(f"unknown Discord event kind {kind!r:.40}")
        self._tally.discord_events[kind] += 1

    # -- expiry ---------------------------------------------------------------
    async def run_janitor(self) -> int:
        """Drop expired entries from the cache and queue the deletion of expired rows."""
        now = self.clock()
        self._tally.janitor_passes += 1
        expired = self.cache.expired_keys(now)
        for key in expired:
            self.cache.remove(key)
        if expired:
            self._reads.rows_left_cache()  # their rows wait for the delete queued below
        self.writer.drop_dirty(expired)
        self.writer.submit_change(
            DeleteExpired(*self._reads.thresholds(), EXPIRE_CHUNK), what="deleting expired rows"
        )
        # The feed's changes are kept long past the coherence bound (a follower that
        # misses some drops its whole cache); each change is stamped by its writer's
        # memory clock (``Store.clock``), and this one's decides what is old. Nothing this
        # process's own follower has not read goes: when the clock jumps (a test's, a
        # simulation's), pruning past it would make this process drop its own cache and
        # refuse every upgrade of a turn that began before its next read.
        # Housekeeping: a failure (the feed's lock held past the store's lock timeout by a
        # long batch elsewhere, an outage) is logged, and the next pass prunes.
        try:
            await self.store.prune_changes(
                older_than=now - max(FEED_RETENTION_SECONDS, 100 * self.config.coherence_seconds),
                keep_after=self.follower.position,
            )
        except Exception as exc:
            log.warning(
                "the change feed could not be pruned this janitor pass: %s",
                redact_text(str(exc), self.config.database) or type(exc).__name__,
            )
        return len(expired)

    # -- inspection -----------------------------------------------------------
    async def channel_keys(self, channel_id: int) -> list[str]:
        """Every scope key that holds memory of the channel (every scope and persona, the
        store's rows included), for ``get_entry``; some may answer None by then."""
        check_id(channel_id, "channel_id")
        return await self._reads.channel_keys(channel_id)

    async def get_entry(self, key: str) -> MemoryEntry | None:
        """A snapshot of what is held under a scope key, or None (expired entries too, and
        entries of a server whose memory is turned off, ``enabled=False``)."""
        scope = parse_key(key)
        if scope.scope == "server" and not self.settings_for(scope.owner_id).enabled:
            return None
        # A user key does not name its server: any pending purge may reach it.
        server = scope.owner_id if scope.scope == "server" else ANY_SERVER
        if self._reads.deletions.pending and self.writer.healthy:
            await self._reads.planned(server)
        try:
            entry = await self._reads.live(key)
        except Unavailable:
            entry = self.cache.get(key)  # what is held in memory, without its durable part
        if self._reads.deletions.pending:  # checked after the last await, as it answers
            entry = self._reads.visible(entry)
        if entry is None or (
            not entry.messages
            and not entry.distilled
            and not entry.turns_since_refresh
            and not entry.last_refreshed_turn
        ):
            return None
        if entry.server_id is not None and not self.settings_for(entry.server_id).enabled:
            return None  # a user's own entry in a server that turned memory off
        return snapshot(entry, entry.expires_at(self.cache.expiry))


def _whom(purge: PurgeUser) -> tuple[int, str]:
    """The purged user, and where, for a log line."""
    where = "everywhere" if purge.server_id is None else f"in server {purge.server_id}"
    return purge.user_id, where
