"""Stage 02, the summary upgrade: when the tool is offered, and the transaction behind it.

An upgrade reads the turn's entries (their rows first, if not yet read),
refuses when a deletion overtook the turn, changes the entries in the cache,
and answers "saved" only after the writer committed them. If the commit
fails, every entry that nothing else changed meanwhile gets its snapshot back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from .._cache import Entry, GroupKey, MemoryCache
from .._config import STMConfig
from .._convert import row_of
from .._frames import model_language
from .._intent import IntentGate
from .._lineage import Lineage, Pin
from .._messages import RecentlyForgotten
from .._metrics import Tally
from .._models import ServerSettings, ToolResult, TurnContext
from .._provenance import Shown
from .._readthrough import (
    AGAIN,
    NO_ROW,
    PURGE_WAIT_SECONDS,
    Again,
    ReadThrough,
    Unavailable,
    Unsettled,
    settle,
    turn_scope,
)
from .._settings import SettingsBook
from .._text import strip_hidden
from .._writer import Writer
from ..store._base import Guard, Overtaken, Saved, SaveDistilled
from . import TOOL_NAME
from .schema import arguments_model, parse_arguments, tool_definition

__all__ = ["MemoryTool", "Upgrades"]

log = logging.getLogger("stm")


class _Runs(Protocol):
    def tool_schema(self, ctx: TurnContext) -> dict[str, Any] | None: ...

    async def run_tool(self, ctx: TurnContext, arguments: object) -> ToolResult: ...


class _Follows(Protocol):
    def mark_turn_start(self, ctx: TurnContext) -> None: ...


class MemoryTool:
    """The STM upgrade tool in the host's ``Tool`` form (``memory.tool``)."""

    name = TOOL_NAME

    def __init__(self, memory: _Runs) -> None:
        self._memory = memory

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        """The tool's definition for this turn, or None."""
        return self._memory.tool_schema(ctx)

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Run the upgrade."""
        return await self._memory.run_tool(ctx, arguments)


class _Renders(Protocol):
    def __call__(
        self,
        ctx: TurnContext,
        settings: ServerSettings,
        entry: Entry | None,
        others: list[Entry],
        now: float,
        text: bool = True,
    ) -> tuple[Any, Shown]: ...


def _refused(message: str) -> ToolResult:
    return ToolResult(success=False, message=message)


@dataclass(slots=True, eq=False)
class _Snapshot:
    """What an upgrade changes in one entry, as it was before, and what it wrote."""

    entry: Entry
    summary: str | None
    categories: Mapping[str, str]
    pin: Pin | None
    turns_since_refresh: int
    last_refreshed_turn: int
    revision: int = 0  # the entry's revision once the upgrade changed it
    # The content this upgrade wrote (the very objects): how its commit recognizes it.
    wrote: tuple[str | None, Mapping[str, str]] | None = None

    @classmethod
    def of(cls, entry: Entry) -> _Snapshot:
        return cls(
            entry,
            entry.summary,
            entry.categories,
            entry.pin,
            entry.turns_since_refresh,
            entry.last_refreshed_turn,
        )

    def holds(self, summary: str | None, categories: Mapping[str, str]) -> bool:
        """True when the content as it was before is exactly these objects."""
        return self.summary is summary and self.categories is categories

    def inherit(self, earlier: _Snapshot) -> None:
        """``earlier``'s upgrade, whose content this one replaced, did not commit: undoing
        this one gives back what was there before ``earlier``."""
        self.summary, self.categories, self.pin = earlier.summary, earlier.categories, earlier.pin
        self.turns_since_refresh = earlier.turns_since_refresh
        self.last_refreshed_turn = earlier.last_refreshed_turn

    def restore(self, cache: MemoryCache) -> None:
        """Undo the upgrade, unless the entry changed again or was deleted since."""
        entry = self.entry
        if entry.revision != self.revision or entry.deleted:
            return
        entry.summary, entry.categories = self.summary, self.categories
        cache.set_pin(entry, self.pin)
        entry.turns_since_refresh = self.turns_since_refresh
        entry.last_refreshed_turn = self.last_refreshed_turn
        entry.revision += 1


class _InFlight:
    """The upgrades of each key not committed yet, oldest first.

    While an upgrade is committed, its entry's content is that upgrade's and its pin is
    unknown. When it commits, the version the store named is the pin of that content:
    of the entry, if it still holds it, and of any later upgrade's snapshot that holds
    it (so that undoing the later one gives back the content with its pin)."""

    def __init__(self) -> None:
        self._by_key: dict[str, list[_Snapshot]] = {}

    def add(self, snapshot: _Snapshot) -> None:
        self._by_key.setdefault(snapshot.entry.key, []).append(snapshot)

    def done(self, snapshot: _Snapshot, cache: MemoryCache, pin: Pin | None) -> None:
        """``snapshot``'s upgrade committed as ``pin`` (None: it did not)."""
        key = snapshot.entry.key
        held = self._by_key.get(key, [])
        if snapshot in held:
            held.remove(snapshot)
        if not held:
            self._by_key.pop(key, None)
        if snapshot.wrote is None:
            return
        summary, categories = snapshot.wrote
        if pin is None:
            # Not committed: a later upgrade that replaced this content must not give it
            # back when it is undone in turn.
            for later in held:
                if later.holds(summary, categories):
                    later.inherit(snapshot)
            return
        entry = snapshot.entry
        if not entry.deleted and entry.summary is summary and entry.categories is categories:
            cache.set_pin(entry, pin)
        for later in held:
            if later.holds(summary, categories):
                later.pin = pin


class Upgrades:
    """Offers the tool to a turn and runs its upgrades against the cache and the writer."""

    def __init__(
        self,
        config: STMConfig,
        cache: MemoryCache,
        reads: ReadThrough,
        settings: SettingsBook,
        writer: Writer,
        follower: _Follows,
        clock: Callable[[], float],
        intent_gate: IntentGate,
        closing: asyncio.Event,
        *,
        origin: str,
        render: _Renders,
        forgotten: RecentlyForgotten,
        tally: Tally,
    ) -> None:
        self.config = config
        # How a turn's prompt renders memory, with its record (``ShortTermMemory._render``).
        self._render = render
        self.cache = cache
        self.reads = reads
        self.settings = settings
        self._writer = writer
        self.clock = clock
        self.intent_gate = intent_gate
        # Set once the memory begins to close: no upgrade starts after that.
        self._closing = closing
        # The feed position a turn's view was current with, and this process's own origin
        # in the feed (its own changes are not deletions that overtake it).
        self.follower = follower
        self.origin = origin
        # Message ids deleted or edited on Discord lately (``stm._messages``).
        self.forgotten = forgotten
        self._tally = tally
        self._in_flight = _InFlight()

    def blocked(self, ctx: TurnContext, settings: ServerSettings) -> str | None:
        """Why the tool is not offered to this turn, or None when it is."""
        why = self._why_blocked(ctx, settings)
        return None if why is None else why[1]

    def _why_blocked(self, ctx: TurnContext, settings: ServerSettings) -> tuple[str, str] | None:
        """(the refusal's reason for the metrics, its text), or None when not blocked."""
        if self._closing.is_set():
            return "shut_down", "short-term memory is shut down"
        if not settings.enabled:
            return "disabled", "short-term memory is turned off in this server"
        if ctx.disable_short_term_memory_update:
            return "already_updated", (
                "short-term memory was already updated in this turn; do not call it again"
            )
        if ctx.explicit_memory_intent or self._asks_to_remember(ctx):
            return "explicit_intent", (
                "the user explicitly asked to remember something; that belongs to long-term "
                "memory, not this tool"
            )
        if self.settings.is_opted_out(ctx.user_id):
            return "opted_out", "the user asked not to be remembered"
        return None

    def _asks_to_remember(self, ctx: TurnContext) -> bool:
        # Asked once per turn: the tool's definition, the nudge and the upgrade all ask.
        text, gate, asked = ctx.user_text, self.intent_gate, ctx._intent
        if asked is not None and asked[0] is gate and asked[1] is text:
            return asked[2]
        answer = gate.matches(text)
        ctx._intent = (gate, text, answer)
        return answer

    @staticmethod
    def _taken_back(ctx: TurnContext, forgotten: RecentlyForgotten) -> bool:
        """The turn's own message was deleted, or edited into other text than the turn
        holds (a turn built from the edited message keeps its upgrade)."""
        assert ctx.message_id is not None
        known, content = forgotten.get(ctx.message_id)
        return known and (content is None or content.strip() != strip_hidden(ctx.user_text).strip())

    def _refused(self, reason: str, message: str) -> ToolResult:
        self._tally.refused(reason)
        return _refused(message)

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        """The tool for this turn, or None when unavailable."""
        settings = self.settings.for_server(ctx.server_id)
        if self.blocked(ctx, settings) is not None:
            return None
        language = model_language(settings, ctx.server_locale).language
        return tool_definition(
            settings.categories,
            self.config.max_summary_length,
            settings.tool_description,
            language,
        )

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Validate the arguments, read the turn's entries, guard, then commit."""
        settings = self.settings.for_server(ctx.server_id)
        blocked = self._why_blocked(ctx, settings)
        if blocked is not None:
            return self._refused(blocked[0], f"{TOOL_NAME} is not available: {blocked[1]}.")
        limit = self.config.max_summary_length
        values = parse_arguments(arguments_model(settings.categories, limit), arguments, limit)
        if isinstance(values, str):
            return self._refused("invalid_arguments", values)
        # Claimed before the first await: of two calls racing in one turn, one upgrades.
        if ctx._upgrading:
            return self._refused(
                "already_updated",
                f"{TOOL_NAME} is already being applied in this turn; do not call it again.",
            )
        if ctx.message_id is not None and self._taken_back(ctx, self.forgotten):
            # The prompt held the message as it was; notes written from it now would keep
            # words its author took back.
            return self._refused(
                "cleared",
                "The message this turn answers was deleted or edited on Discord meanwhile: "
                "nothing was stored.",
            )
        ctx._upgrading = True
        result = None
        try:
            result = await self._run(ctx, settings, values)
        finally:
            if result is None or not result.success:
                ctx._upgrading = False  # failed: the model may try again
        return result

    async def _run(
        self, ctx: TurnContext, settings: ServerSettings, values: dict[str, str]
    ) -> ToolResult:
        self.reads.mark_turn_start(ctx)
        self.follower.mark_turn_start(ctx)
        # A purge that may reach this memory must be planned first (what the upgrade keeps
        # must not be what it clears); a store being retried will not plan it soon.
        wait = PURGE_WAIT_SECONDS if self._writer.healthy else 0.0
        if not await self.reads.planned(ctx.server_id, wait):
            return self._refused(
                "busy",
                f"{TOOL_NAME} could not be applied: the memory is being erased right now. "
                "Nothing was saved; you may try again later.",
            )
        # The turn's keys and recall group (what a prompt would show from other channels).
        user_k, server_k, group = turn_scope(ctx)
        if ctx._shown is None:
            # Without ``build_context`` on this turn, credit what it would have rendered
            # from other channels: the host may have built the prompt through another context.
            warming = self.reads.warm(group)
            if warming is not None:
                await warming
            self.reads.note_shown(ctx, self.what_a_prompt_would_show(ctx, settings, group))
        keys = [user_k] if server_k is None else [user_k, server_k]
        # Most upgrades: both entries are in the cache with their rows merged, and none is
        # being read; the reads below would only cost their set-up.
        held = self._held(ctx, keys, group)
        entries: list[Entry] | ToolResult
        if held is not None and held is not AGAIN:
            entries = held
        else:
            try:
                entries = await settle(lambda: self._entries(ctx, keys))
            except Unavailable:
                # Upgrading without the row would overwrite what it holds (its
                # contributors among it) with a guess.
                return self._refused(
                    "unavailable",
                    f"{TOOL_NAME} could not be applied: the memory store is unavailable "
                    "right now. Nothing was saved.",
                )
            except Unsettled:
                return self._refused(
                    "busy",
                    f"{TOOL_NAME} could not be applied: the memory is too busy right now. "
                    "Nothing was saved; you may try again later.",
                )
        if isinstance(entries, ToolResult):
            return entries
        return await self._commit(ctx, settings, entries, values)

    def what_a_prompt_would_show(
        self, ctx: TurnContext, settings: ServerSettings, group: GroupKey
    ) -> Shown:
        """What the prompt of a turn that did not call ``build_context`` would have shown
        from the cache now, rendered as ``build_context`` renders it (this channel's notes
        included, the budget's cuts applied): its upgrade's provenance, and its replies'."""
        now = self.clock()
        others = self.reads.recall(ctx, group, now)
        user_k, server_k, _ = turn_scope(ctx)
        entry = self.cache.peek(server_k or user_k)
        if entry is not None and self.cache.is_expired(entry, now):
            entry = None
        if self.reads.deletions.pending:  # as build_context leaves out what a purge reaches
            entry, others = self.reads.visible(entry), [self.reads.visible(e) for e in others]
        return self._render(ctx, settings, entry, others, now, text=False)[1]

    def _held(
        self, ctx: TurnContext, keys: list[str], group: GroupKey
    ) -> list[Entry] | ToolResult | Again | None:
        """What ``_entries`` would find, when the cache answers without a read; None when
        a read is needed."""
        entries = []
        for key in keys:
            known = self.reads.settled(key, group)
            if known is None:
                return None
            if known is NO_ROW:
                known = self.reads.new_entry(key, ctx, self.clock(), hydrated=True)
            entries.append(known)
        return self._checked(ctx, entries)

    async def _entries(self, ctx: TurnContext, keys: list[str]) -> list[Entry] | ToolResult | Again:
        """The turn's entries, a refusal, or AGAIN when the cache no longer holds one."""
        return self._checked(ctx, [await self._entry(key, ctx) for key in keys])

    def _checked(self, ctx: TurnContext, entries: list[Entry]) -> list[Entry] | ToolResult | Again:
        """``entries``, once read; a refusal, or AGAIN when the cache no longer holds one."""
        if self._closing.is_set() or ctx.disable_short_term_memory_update:
            return self._refused(
                "shut_down" if self._closing.is_set() else "already_updated",
                f"{TOOL_NAME} is not available any more in this turn.",
            )
        if any(e.deleted for e in entries) or self.reads.overtaken(ctx):
            return self._refused(
                "cleared",
                f"{TOOL_NAME} was not applied: this conversation's memory was "
                "cleared during the turn. Nothing was saved.",
            )
        # Reading one key's row can evict the other key's entry when the cache is
        # full; an upgrade of an entry the cache no longer holds would not be seen.
        if all(self.cache.peek(e.key) is e for e in entries):
            return entries
        return AGAIN

    async def _entry(self, key: str, ctx: TurnContext) -> Entry:
        entry = await self.reads.live(key)
        if entry is None:
            entry = self.reads.new_entry(key, ctx, self.clock(), hydrated=True)
        return entry

    async def _commit(
        self,
        ctx: TurnContext,
        settings: ServerSettings,
        entries: list[Entry],
        values: dict[str, str],
    ) -> ToolResult:
        now = self.clock()
        # What the prompt showed (what build_context rendered, or would have) and the
        # turns and authors of the turn's own windows: the version's provenance.
        shown = ctx._shown
        direct = {ctx.user_id}
        if shown is not None:
            direct |= shown.users
        for entry in entries:
            direct |= entry.window_users()
            # A reply in the window may quote what its own prompt showed.
            for sources in entry.messages.quoted():
                direct.update(sources.users)
        # The notes' own content kept (a category write keeps the fields it does not name),
        # as their pins, or keys while their own upgrade is being committed.
        own: list[Pin | str] = []
        other: list[Pin | str] = []
        for key, pin, is_own in shown.notes if shown is not None else ():
            (own if is_own else other).append(pin if pin is not None else key)
        # Notes a reply shown (in another channel's recent messages, or in the turn's own
        # windows) may quote: as if this prompt had shown them (``Window.pins``).
        quoted = set(shown.window_pins) if shown is not None else set()
        for entry in entries:
            quoted |= entry.messages.pins()
        other.extend(quoted)
        if not settings.summary_mode:
            for entry in entries:
                if entry.distilled:
                    own.append(entry.pin if entry.pin is not None else entry.key)
        lineage = Lineage(frozenset(direct), tuple(own), tuple(other))
        snapshots = [_Snapshot.of(e) for e in entries]
        guarded_pins = {
            *(shown.pins(self.reads.current_pins(shown)) if shown is not None else ()),
            *(e.pin for e in entries if e.pin is not None),
            *quoted,
        }
        for entry in entries:
            if settings.summary_mode:
                entry.summary, entry.categories = values["summary"], {}
            else:
                entry.summary, entry.categories = None, {**entry.categories, **values}
            # The version it becomes is named by the store at commit.
            self.cache.set_pin(entry, None)
            entry.turns_since_refresh = 0
            entry.last_refreshed_turn += 1
            entry.revision += 1
            self.reads.describe(entry, ctx)
            self.cache.touch(entry, now)
        for snapshot in snapshots:
            entry = snapshot.entry
            snapshot.revision = entry.revision
            snapshot.wrote = (entry.summary, entry.categories)
            self._in_flight.add(snapshot)
        writer = self._writer
        started = time.perf_counter()
        # Write in the order the turn made its changes: identity rows from capture first,
        # then the upgrade (as when every new key was read first, which queued them).
        writer.queue_dirty()
        # Another process may have deleted, after this turn began, what its prompt showed:
        # the store refuses the save then, inside the writing transaction.
        position = ctx._feed_position
        guard = None
        if position is not None:
            channels = _shown_channels(ctx) | {e.channel_id for e in entries}
            guard = Guard(
                after=position,
                channels=frozenset(channels),
                users=lineage.direct,
                server_id=ctx.server_id,
                own_origin=self.origin,
                pins=frozenset(guarded_pins),
            )
        history = self.config.note_history
        saves = [
            SaveDistilled(row_of(e), guard, lineage, history=history, by=ctx.user_id)
            for e in entries
        ]

        def committed(results: list[object]) -> None:
            for snapshot, result in zip(snapshots, results, strict=True):
                pin = result.pin if isinstance(result, Saved) else None
                self._in_flight.done(snapshot, self.cache, pin)
                if isinstance(result, Overtaken):
                    # Undone at once: an upgrade that snapshots the entry before this turn
                    # resumes must not take the refused content for what was there.
                    snapshot.restore(self.cache)

        written = writer.submit_all(saves, what=f"upgrade of {entries[0].key}", on_result=committed)
        try:
            results = await written
        except Exception as exc:
            log.error("short-term memory upgrade not saved (%s): %s", entries[0].key, exc)
            for snapshot in snapshots:
                self._in_flight.done(snapshot, self.cache, None)
                snapshot.restore(self.cache)
            return self._refused(
                "not_saved",
                f"{TOOL_NAME} failed: the memory could not be saved ({exc}). "
                "Nothing was stored; you may try again later.",
            )
        if any(isinstance(result, Overtaken) for result in results):
            return _refused(
                f"{TOOL_NAME} was not applied: this conversation's memory was "
                "cleared during the turn. Nothing was saved."
            )
        ctx.disable_short_term_memory_update = True
        self._tally.upgrades += 1
        self._tally.upgrade_seconds += time.perf_counter() - started
        if log.isEnabledFor(logging.DEBUG):
            # The text itself only at DEBUG: logs are kept and shipped with less care.
            log.debug("upgrade of %s saved: %r", ", ".join(e.key for e in entries), values)
        return _saved(tuple(values))


@functools.lru_cache(maxsize=256)
def _saved(names: tuple[str, ...]) -> ToolResult:
    """The answer to a saved upgrade of these fields (immutable, so shared)."""
    return ToolResult(
        success=True,
        message=f"Short-term memory updated ({', '.join(sorted(names))}). This is silent: "
        "users do not see it, so do not mention it.",
    )


def _shown_channels(ctx: TurnContext) -> frozenset[int]:
    """The channels whose memory the turn's prompt showed, its own included."""
    shown: Shown | None = ctx._shown
    if shown is None:
        return frozenset((ctx.channel_id,))
    return frozenset((ctx.channel_id, *shown.channels))
