"""Rendering the Short-Term Memory Context: pure functions from entries to prompt text.

Memory text is untrusted (users said it, a model wrote it). It is shown only
as quoted lines under a frame that says where it comes from, with brackets,
mentions and control characters neutralized, so nothing in it can close the
frame, open a ``[System: ...]`` line or ping anyone.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import TypeVar

from ._cache import Entry, StoredMessage
from ._frames import Frames, frames_for
from ._models import Category, PromptBlock, ServerSettings
from ._provenance import Shown
from ._slugs import slugs_for
from ._text import one_line, quote_lines
from ._tool import TOOL_NAME

__all__ = [
    "RECENT_SECONDS",
    "RenderCache",
    "category_labels",
    "content_depth",
    "nudge",
    "other_channels_blocks",
    "record_shown",
    "relative_time",
    "same_channel_block",
    "segment_shows",
]

RECENT_SECONDS = 3600.0
ENGLISH = frames_for("en")
DEFAULT_NUDGE = ENGLISH.text("nudge", tool=TOOL_NAME)


def relative_time(seconds: float, frames: Frames = ENGLISH) -> str:
    """``just now``, ``12 minutes ago``, ``3 hours ago``, ``2 days ago`` (in English)."""
    seconds = max(0.0, seconds)
    for size, unit in ((86400, "days_ago"), (3600, "hours_ago"), (60, "minutes_ago")):
        if seconds >= size:
            return frames.count(unit, int(seconds // size))
    return frames.text("just_now")


def category_labels(settings: ServerSettings) -> dict[str, str]:
    """Slug -> label of the server's categories, in their order."""
    return dict(_labels(settings.categories))


@functools.lru_cache(maxsize=512)
def _labels(categories: tuple[Category, ...]) -> tuple[tuple[str, str], ...]:
    # Slugging is the costly part, and a server's categories rarely change.
    labels = [c.label for c in categories]
    return tuple(zip(slugs_for(labels), labels, strict=True))


_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(held: OrderedDict[_K, _V], key: _K, value: _V, limit: int) -> None:
    """Put ``value`` under ``key`` as the most recently used, dropping the least recently
    used past ``limit``."""
    held[key] = value
    held.move_to_end(key)
    if len(held) > limit:
        held.popitem(last=False)


# One line of a bot, speaker or channel name, and the age of a whole number of minutes:
# the same few recur turn after turn.
_name = functools.lru_cache(maxsize=4096)(one_line)


@functools.lru_cache(maxsize=1024)
def _age(minutes: int, frames: Frames) -> str:
    return relative_time(minutes * 60, frames)


# What an other channel's segment is rendered from besides the entry's own values
# (settings, bot name, minutes of age, frames): ``_segment`` reads nothing else, so
# that the text kept under it can be reused while every value is the same. A rule that
# makes the text read anything more (the clock itself, not only whole minutes of the
# entry's age; another setting) adds it here, or the cache serves text made without it.
_MadeFrom = tuple[ServerSettings, str, int, Frames]

# An other channel's segment: its lines in the memory block and in the recent-messages
# block, each joined ("" when none).
Segment = tuple[str, str]


class _Segment:
    """An entry's other-channel segment and every value it was rendered from, compared by
    identity: the window and summary are immutable and replaced when they change, and
    settings are frozen, so the same object means the same value."""

    __slots__ = (
        "categories",
        "channel_name",
        "entry",
        "items",
        "made",
        "made_from",
        "messages",
        "summary",
    )

    def __init__(self, entry: Entry, made_from: _MadeFrom, made: Segment) -> None:
        self.entry = entry
        self.messages = entry.messages
        self.summary = entry.summary
        self.categories = entry.categories
        # The library replaces categories as a whole; their values are compared too, so
        # that a host's in-place change is not missed (the few entries that have them).
        self.items = tuple(entry.categories.items()) if entry.categories else None
        self.channel_name = entry.channel_name
        self.made_from = made_from
        self.made = made


class RenderCache:
    """Rendered text of recently shown entries, reused while what it shows is unchanged.

    Other-channel memory renders the same few entries turn after turn. Text is
    reused only when every value it was rendered from is still the same object
    (rendering is a pure function of those values), so a changed, purged or
    replaced entry can never show stale text. Least recently used entries are
    dropped past ``max_entries``.
    """

    def __init__(self, max_entries: int = 1024) -> None:
        self.max_entries = max_entries
        self._held: OrderedDict[tuple[str, str], tuple[object, list[str]]] = OrderedDict()
        # An entry's whole other-channel segment, joined.
        self._segments: OrderedDict[str, _Segment] = OrderedDict()
        # The quoted lines of an entry's newest messages, as last rendered:
        # (entry, bot name, position of the first line's message, lines).
        self._crude: OrderedDict[str, tuple[Entry, object, int, tuple[str, ...]]] = OrderedDict()

    def lines(
        self, key: str, kind: str, source: object, render: Callable[[], list[str]]
    ) -> list[str]:
        """The lines rendered from ``source``: cached, or made by ``render()`` now."""
        slot = (key, kind)
        held = self._held.get(slot)
        if held is not None and held[0] == source:
            self._held.move_to_end(slot)
            return held[1]
        made = render()
        _keep(self._held, slot, (source, made), self.max_entries)
        return made

    def crude_lines(
        self,
        entry: Entry,
        count: int,
        bot_name: object,
        render_one: Callable[[StoredMessage], str],
    ) -> tuple[str, ...]:
        """One line per message of the newest ``count`` of ``entry``'s window. A message
        keeps its position in its entry as the window moves on (``Window.first``), so the
        lines of positions rendered before are reused and only new messages rendered.
        ``bot_name``: what else the lines are made from (compared for equality)."""
        window = entry.messages
        n = len(window)
        stop = window.first + n
        start = stop - min(count, n)
        key = entry.key
        held = self._crude.get(key)
        made: tuple[str, ...] | None = None
        if held is not None and held[0] is entry and held[1] == bot_name:
            old_start, old = held[2], held[3]
            old_stop = old_start + len(old)
            if old_start == start and old_stop == stop:
                self._crude.move_to_end(key)
                return old
            if old_start <= start <= old_stop <= stop:
                fresh = window[old_stop - window.first :] if old_stop < stop else []
                made = old[start - old_start :] + tuple(map(render_one, fresh))
        if made is None:
            made = tuple(map(render_one, window[start - window.first :]))
        _keep(self._crude, key, (entry, bot_name, start, made), self.max_entries)
        return made

    def segment(self, entry: Entry, made_from: _MadeFrom) -> Segment | None:
        """The segment of ``entry`` rendered from the same values, if it was kept."""
        held = self._segments.get(entry.key)
        if (
            held is not None
            and held.entry is entry
            and held.messages is entry.messages
            and held.summary is entry.summary
            and held.categories is entry.categories
            and (
                not entry.categories
                if held.items is None
                else held.items == tuple(entry.categories.items())
            )
            and held.channel_name == entry.channel_name
            # A tuple's == compares identity first, then equality, value by value.
            and held.made_from == made_from
        ):
            self._segments.move_to_end(entry.key)
            return held.made
        return None

    def keep_segment(self, entry: Entry, made_from: _MadeFrom, made: Segment) -> Segment:
        """Keep ``made``, the segment of ``entry`` rendered from its current values."""
        _keep(self._segments, entry.key, _Segment(entry, made_from, made), self.max_entries)
        return made

    def __len__(self) -> int:
        return len(self._held) + len(self._crude)


def content_depth(settings: ServerSettings, entries: Sequence[Entry], now: float) -> int:
    """The configured content depth, but no higher than 2 when touched in the last hour."""
    depth = settings.content_depth
    if 0 <= depth <= 2:
        return depth
    # A plain loop: a generator under any() costs about as much again on every turn.
    for entry in entries:
        if now - entry.updated_at < RECENT_SECONDS:
            return 2
    return depth


def _place(entry: Entry) -> str:
    if entry.channel_name:
        return "#" + _name(entry.channel_name)
    return f"#channel-{entry.channel_id}"


def _note_lines(
    entry: Entry, labels: dict[str, str], cache: RenderCache | None = None
) -> list[str]:
    if cache is not None:
        source = (entry.summary, tuple(entry.categories.items()), tuple(labels.items()))
        return cache.lines(entry.key, "distilled", source, lambda: _note_lines(entry, labels))
    lines: list[str] = []
    if entry.categories:
        ordered = [slug for slug in labels if slug in entry.categories]
        ordered += [slug for slug in entry.categories if slug not in labels]
        for slug in ordered:
            label = one_line(labels.get(slug, slug))
            value = quote_lines(entry.categories[slug], prefix="  ")
            lines.append(f"> {label}: {value[0].lstrip()}")
            lines.extend(">" + line for line in value[1:])
    elif entry.summary:
        lines.extend(quote_lines(entry.summary))
    return lines


def _crude_lines(
    entry: Entry,
    count: int,
    bot_name: str,
    cache: RenderCache | None = None,
    frames: Frames = ENGLISH,
) -> tuple[str, ...]:
    if count <= 0 or not entry.messages:
        return ()
    user = frames.text("user")

    def line(message: StoredMessage) -> str:
        default = bot_name if message.role == "assistant" else user
        speaker = _name(message.speaker_name or default)
        content = _curly_quotes(one_line(message.content))
        return f'> {speaker}: "{content}"'

    if cache is not None:
        made_from = bot_name if frames is ENGLISH else (bot_name, frames.language)
        return cache.crude_lines(entry, count, made_from, line)
    return tuple(map(line, entry.messages[-count:]))


def _curly_quotes(text: str) -> str:
    """Straight double quotes inside a quoted line as typographic pairs ("a" -> “a”), so
    they cannot close the line's own quotes and still read as quotes."""
    if '"' not in text:
        return text
    parts = text.split('"')
    marks = ("\u201c", "\u201d")
    return parts[0] + "".join(marks[n % 2] + part for n, part in enumerate(parts[1:]))


def same_channel_header(entry: Entry, bot_name: str, now: float, frames: Frames = ENGLISH) -> str:
    """The frame's first line above this channel's distilled memory."""
    return frames.text(
        "same_header",
        bot=one_line(bot_name),
        place=_place(entry),
        when=relative_time(now - entry.updated_at, frames),
    )


def others_header(bot: str, frames: Frames = ENGLISH) -> str:
    """The frame's first line above other channels' memory (``bot`` as one line)."""
    return frames.text("others_header", bot=bot)


def same_channel_block(
    entry: Entry | None,
    settings: ServerSettings,
    bot_name: str,
    now: float,
    cache: RenderCache | None = None,
    frames: Frames = ENGLISH,
) -> PromptBlock | None:
    """This channel's distilled memory (never its crude messages), or None."""
    if entry is None or not entry.distilled:
        return None
    lines = _note_lines(entry, category_labels(settings), cache)
    header = same_channel_header(entry, bot_name, now, frames)
    text = "\n".join([header, *lines, frames.text("same_end")])
    return PromptBlock(text, content_depth(settings, [entry], now))


def other_channels_blocks(
    entries: Sequence[Entry],
    settings: ServerSettings,
    bot_name: str,
    now: float,
    cache: RenderCache | None = None,
    frames: Frames = ENGLISH,
) -> list[PromptBlock]:
    """Memory of other channels: distilled (else crude) per channel, plus in ``crude_summary``
    mode the recent crude messages of channels that also have distilled memory."""
    if not entries:
        return []
    bot = _name(bot_name)
    memory: list[str] = []
    crude: list[str] = []
    for entry in entries:
        # relative_time() of the entry's age changes only from one whole minute to the next.
        minute = int(max(0.0, now - entry.updated_at) // 60)
        made_from = (settings, bot_name, minute, frames)
        if cache is None:
            made = _segment(entry, made_from, None)
        else:
            held = cache.segment(entry, made_from)
            if held is None:
                made = cache.keep_segment(entry, made_from, _segment(entry, made_from, cache))
            else:
                made = held
        said, recent = made
        if said:
            memory.append(said)
        if recent:
            crude.append(recent)
    blocks = []
    depth = content_depth(settings, entries, now)
    if memory:
        header = others_header(bot, frames)
        end = frames.text("others_end")
        blocks.append(PromptBlock("\n".join([header, *memory, end]), depth))
    if crude:
        header, end = frames.text("recent_header"), frames.text("recent_end")
        blocks.append(PromptBlock("\n".join([header, *crude, end]), depth))
    return blocks


def _segment(entry: Entry, made_from: _MadeFrom, cache: RenderCache | None) -> Segment:
    """One other channel's segment, rendered from ``entry`` and ``made_from`` alone (what
    ``RenderCache.segment`` compares before reusing it)."""
    settings, bot_name, minute, frames = made_from
    titles = segment_titles(entry, _name(bot_name), minute, frames)
    body, lines = segment_lines(entry, settings, bot_name, cache, frames)
    recent = "\n".join((titles[1], *lines)) if lines else ""
    if not body:
        return "", recent
    return "\n".join((titles[0], *body)), recent


def segment_titles(
    entry: Entry, bot: str, minute: int, frames: Frames = ENGLISH
) -> tuple[str, str]:
    """The first line of an other channel's segment in the memory block, and in the
    recent-messages block (``bot``: the bot's name as one line)."""
    when = _age(minute, frames)
    place = _place(entry)
    return (
        frames.text("remembers_title", bot=bot, place=place, when=when),
        frames.text("recent_title", place=place, when=when),
    )


def segment_shows(entry: Entry, settings: ServerSettings) -> tuple[bool, int]:
    """What an other channel's segment shows: its notes (when it has them), and how many of
    its newest crude messages (in the memory block when it has no notes, else in the
    recent-messages block in ``crude_summary`` mode). The one rule, which both the text
    (``segment_lines``) and the record of what it shows (``record_shown``) follow."""
    # The count as configured: a window shows its newest ``count`` or fewer, and the record
    # reads the same (``Window.said``).
    count = settings.crude_message_count if entry.messages else 0
    if entry.summary or entry.categories:
        return True, count if settings.render_mode == "crude_summary" else 0
    return False, count


def segment_lines(
    entry: Entry,
    settings: ServerSettings,
    bot_name: str,
    cache: RenderCache | None = None,
    frames: Frames = ENGLISH,
) -> tuple[Sequence[str], Sequence[str]]:
    """An other channel's quoted lines, as ``segment_shows`` says: for the memory block (its
    notes, else its crude messages), and for the recent-messages block."""
    notes, count = segment_shows(entry, settings)
    if notes:
        body = _note_lines(entry, category_labels(settings), cache)
        return body, _crude_lines(entry, count, bot_name, cache, frames)
    return _crude_lines(entry, count, bot_name, cache, frames), ()


def record_shown(
    entry: Entry | None, others: Sequence[Entry], settings: ServerSettings, shown: Shown
) -> None:
    """Record in ``shown`` what ``same_channel_block`` and ``other_channels_blocks`` show of
    these entries, by the rule their text follows (``segment_shows``): the channels shown,
    the notes (as their pins), and the newest crude messages of each window. Under a
    budget's cut, ``budget.fit`` records what it kept instead."""
    if entry is not None and entry.distilled:
        shown.add_note(entry.key, entry.pin, True)
    channels = shown.channels
    for other in others:
        notes, count = segment_shows(other, settings)
        if notes or count:
            channels.add(other.channel_id)
        if notes:
            shown.add_note(other.key, other.pin, False)
        if count:
            shown.add_window(other.messages, count)


def nudge(settings: ServerSettings, frames: Frames = ENGLISH) -> str:
    """The system line asking the model to upgrade the memory after answering."""
    if settings.nudge_text:
        text = one_line(settings.nudge_text)
        if TOOL_NAME not in text:
            text += frames.text("nudge_tool", tool=TOOL_NAME)
        return f"[System: {text}]"
    if frames is ENGLISH:
        return DEFAULT_NUDGE
    return frames.text("nudge", tool=TOOL_NAME)
