"""The token budget: everything memory adds to a prompt, counted and cut to fit (pure).

What memory adds to a turn's prompt is its blocks (this channel's notes, other
channels' notes, their recent messages), the nudge and the tool's definition.
``fit`` counts them with a ``TokenCounter`` and, past the budget, keeps them in
this order of claim: the tool's definition and the nudge (without them nothing
is ever written), this channel's notes, other channels' notes newest channel
first, then their recent messages. It cuts at whole quoted lines (a channel's
notes keep their first lines, recent messages their newest), and the first line
that does not fit ends the claim: nothing of lower priority is shown while
something of higher priority is cut. Frame lines are never cut, and each block
shown under a cut says in its closing line that more was left out.

``stm.estimate_tokens`` is the default counter (see there for its
margins); a host with its model's tokenizer passes it as the counter.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._cache import Entry
from ._frames import Frames
from ._models import Omission, PromptBlock, ServerSettings
from ._provenance import Shown
from ._render import (
    ENGLISH,
    RenderCache,
    _name,
    _note_lines,
    category_labels,
    content_depth,
    others_header,
    same_channel_header,
    segment_lines,
    segment_titles,
)
from ._tokens import ESTIMATE_MARGIN, estimate_tokens

__all__ = [
    "ESTIMATE_MARGIN",
    "Fitted",
    "TokenCounter",
    "count_with",
    "estimate_tokens",
    "fit",
    "left_out_end",
]

log = logging.getLogger("stm.budget")

TokenCounter = Callable[[str], int]


def count_with(counter: TokenCounter | None) -> TokenCounter:
    """``counter`` made safe to call: a bad answer (not a whole number >= 0) or a failure
    falls back to the estimate, logged once."""
    if counter is None or counter is estimate_tokens:
        return estimate_tokens
    warned = False

    def count(text: str) -> int:
        nonlocal warned
        try:
            value = counter(text)
        except Exception:
            if not warned:
                warned = True
                log.exception("the token counter failed; using the estimate instead")
            return estimate_tokens(text)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            if not warned:
                warned = True
                log.error("the token counter answered %r; using the estimate instead", value)
            return estimate_tokens(text)
        return value

    return count


@dataclass(frozen=True, slots=True)
class Fitted:
    """A turn's memory within its budget."""

    blocks: list[PromptBlock]
    nudge: str | None
    tool: bool
    tokens: int
    dropped: tuple[Omission, ...]
    # What the blocks show when some were cut (``Shown``, made from the lines kept); None
    # when they were kept whole, and the record rendering made holds.
    shown: Shown | None = None


def left_out_end(end: str, frames: Frames = ENGLISH) -> str:
    """A block's closing line saying that memory was left out to fit the prompt."""
    return end[:-1] + frames.text("left_out") + "]"


@dataclass(slots=True)
class _Piece:
    """Quoted lines of one source, claimed whole lines at a time, in claim order."""

    block: int  # 0 this channel, 1 other channels' notes, 2 their recent messages
    kind: str
    entry: Entry
    title: str | None  # a segment's first line, shown with its first kept line
    lines: Sequence[str]
    newest_last: bool  # recent messages: keep the newest, which come last
    kept: int = 0

    def shown(self) -> list[str]:
        if not self.kept:
            return []
        lines = self.lines[-self.kept :] if self.newest_last else self.lines[: self.kept]
        return [self.title, *lines] if self.title is not None else list(lines)


def fit(
    blocks: list[PromptBlock],
    nudge: str | None,
    tool_tokens: int | None,
    budget: int,
    count: TokenCounter,
    *,
    counted: Sequence[int] | None = None,
    entry: Entry | None,
    others: Sequence[Entry],
    settings: ServerSettings,
    bot_name: str,
    now: float,
    cache: RenderCache | None = None,
    frames: Frames = ENGLISH,
) -> Fitted:
    """The turn's memory (``blocks`` and ``nudge`` as rendered, the tool's definition of
    ``tool_tokens`` when offered) within ``budget`` tokens as ``count`` counts them.
    ``counted``: the blocks' counts when the caller already has them."""
    dropped: list[Omission] = []
    fixed = 0
    tool = tool_tokens is not None
    if tool_tokens is not None:
        if tool_tokens > budget:
            tool = False
            dropped.append(Omission("tool"))
        else:
            fixed = tool_tokens
    if nudge is not None:
        cost = count(nudge)
        if not tool or fixed + cost > budget:
            nudge = None  # it asks for the tool: not without it
            dropped.append(Omission("nudge"))
        else:
            fixed += cost
    room = budget - fixed
    used = sum(count(block.text) for block in blocks) if counted is None else sum(counted)
    if used <= room:
        return Fitted(blocks, nudge, tool, fixed + used, tuple(dropped))
    pieces = _pieces(entry, others, settings, bot_name, now, cache, frames)
    lines = _frames(entry, bot_name, now, frames)
    _claim(pieces, lines, room, count)
    while True:
        made = _assemble(pieces, lines, entry, others, settings, now)
        used = sum(count(block.text) for block in made)
        if used <= room:
            break
        # The count of joined text may differ from the sum of its lines' counts (an
        # exact tokenizer): give back the last line claimed until it fits.
        _give_back(pieces)
    for piece in pieces:
        if piece.kept < len(piece.lines):
            left = len(piece.lines) - piece.kept
            dropped.append(Omission(piece.kind, piece.entry.key, left))
    return Fitted(made, nudge, tool, fixed + used, tuple(dropped), _shown(pieces))


def _shown(pieces: list[_Piece]) -> Shown:
    """What the kept lines show: the record rendering makes, for what was kept."""
    shown = Shown()
    for piece in pieces:
        if not piece.kept:
            continue
        entry = piece.entry
        if piece.block == 0:
            shown.add_note(entry.key, entry.pin, True)
            continue
        shown.channels.add(entry.channel_id)
        if piece.newest_last:  # crude messages, the newest ``kept``
            shown.add_window(entry.messages, piece.kept)
        else:
            shown.add_note(entry.key, entry.pin, False)
    return shown


def _pieces(
    entry: Entry | None,
    others: Sequence[Entry],
    settings: ServerSettings,
    bot_name: str,
    now: float,
    cache: RenderCache | None,
    frames: Frames,
) -> list[_Piece]:
    pieces: list[_Piece] = []
    if entry is not None and entry.distilled:
        lines = _note_lines(entry, category_labels(settings), cache)
        pieces.append(_Piece(0, "channel_notes", entry, None, lines, False))
    bot = _name(bot_name)
    recent: list[_Piece] = []
    for other in others:  # newest first
        body, crude = segment_lines(other, settings, bot_name, cache, frames)
        distilled = other.distilled
        minute = int(max(0.0, now - other.updated_at) // 60)
        title, crude_title = segment_titles(other, bot, minute, frames)
        if body:
            pieces.append(_Piece(1, "other_notes", other, title, body, not distilled))
        if crude:
            recent.append(_Piece(2, "other_messages", other, crude_title, crude, True))
    return pieces + recent


@dataclass(frozen=True, slots=True)
class _Frame:
    header: str
    end: str  # with the left-out notice: the budget is always what that costs


def _frames(entry: Entry | None, bot_name: str, now: float, frames: Frames) -> list[_Frame]:
    same = same_channel_header(entry, bot_name, now, frames) if entry is not None else ""
    text = frames.text
    return [
        _Frame(same, left_out_end(text("same_end"), frames)),
        _Frame(others_header(_name(bot_name), frames), left_out_end(text("others_end"), frames)),
        _Frame(text("recent_header"), left_out_end(text("recent_end"), frames)),
    ]


def _claim(pieces: list[_Piece], frames: list[_Frame], room: int, count: TokenCounter) -> None:
    """Give the pieces, in claim order, the whole lines that fit in ``room``, up to the
    first that does not: a line costs its count and a newline; a block's frame and a
    segment's title are paid with their first line."""
    left = room
    opened = [False, False, False]
    for piece in pieces:
        frame = frames[piece.block]
        order = reversed(piece.lines) if piece.newest_last else iter(piece.lines)
        for line in order:
            cost = count(line) + 1
            if not piece.kept and piece.title is not None:
                cost += count(piece.title) + 1
            if not opened[piece.block]:
                cost += count(frame.header) + count(frame.end) + 2
            if cost > left:
                # Whole lines only, in order of claim: what comes after is left out too.
                return
            left -= cost
            piece.kept += 1
            opened[piece.block] = True


def _give_back(pieces: list[_Piece]) -> None:
    for piece in reversed(pieces):
        if piece.kept:
            piece.kept -= 1
            return
    raise AssertionError("nothing left to give back")  # an empty context costs nothing


def _assemble(
    pieces: list[_Piece],
    frames: list[_Frame],
    entry: Entry | None,
    others: Sequence[Entry],
    settings: ServerSettings,
    now: float,
) -> list[PromptBlock]:
    bodies: list[list[str]] = [[], [], []]
    for piece in pieces:
        bodies[piece.block].extend(piece.shown())
    kept_others = [o for o in others if any(p.kept and p.entry is o for p in pieces)]
    blocks = []
    for number, body in enumerate(bodies):
        if not body:
            continue
        frame = frames[number]
        text = "\n".join([frame.header, *body, frame.end])
        if number == 0:
            depth = content_depth(settings, [entry] if entry is not None else [], now)
        else:
            depth = content_depth(settings, kept_others, now)
        blocks.append(PromptBlock(text, depth))
    return blocks
