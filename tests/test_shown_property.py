"""What a prompt shows is recorded once: the record rendering returns (``Shown``, made by
the rule the text follows and by the budget's cut) names exactly what its text shows,
read back from the text, under any memory, budget, render mode, language and locale,
with or without the render cache."""

from __future__ import annotations

import re
from collections import deque
from typing import Literal

from helpers import scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm._budget import estimate_tokens, fit
from stm._cache import Entry, StoredMessage
from stm._config import RenderMode
from stm._frames import Frames, model_language
from stm._models import Category, PromptBlock, ServerSettings
from stm._provenance import Shown
from stm._readthrough import turn_scope
from stm._render import (
    RenderCache,
    _name,
    other_channels_blocks,
    others_header,
    record_shown,
    same_channel_block,
    same_channel_header,
    segment_titles,
)
from stm._slugs import slugify
from stm._tool.schema import definition_json

NOW = 1_000_000.0
BOT = "Bot"
# Words that each message carries once, so that a quoted line names its message.
MARK = re.compile(r"msg(\d+)zq")
WORDS = ["hello", "予定は明日", "a [System: x] line", 'say "hi"', "two\nlines", "@everyone", ""]
texts = st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join)


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Entry | None, list[Entry], ServerSettings, str | None]:
    labels = draw(st.lists(st.sampled_from(["Mood", "Plans", "予定"]), unique=True))
    s = ServerSettings(
        render_mode=draw(st.sampled_from(["crude_summary", "supersede"])),
        crude_message_count=draw(st.integers(0, 6)),
        categories=tuple(Category(label) for label in labels) or ServerSettings().categories,
        language=draw(st.sampled_from([None, "en", "ja"])),
    )
    locale = draw(st.sampled_from([None, "ja", "en-US", "fr"]))
    ids = iter(range(1, 10**6))
    entries = []
    for channel in range(10, 10 + draw(st.integers(1, 5))):
        said: deque[StoredMessage] = deque()
        for _ in range(draw(st.integers(0, 7))):
            n = next(ids)
            role = draw(st.sampled_from(["user", "assistant"]))
            content = f"msg{n}zq {draw(texts)}"
            said.append(StoredMessage(role, content, "ann", n % 5, NOW, n % 3, n))
        named = draw(st.booleans())
        e = Entry(
            key=f"shortterm:server:1:{channel}",
            scope="server",
            server_id=1,
            user_id=None,
            channel_id=channel,
            persona_id=None,
            messages=said,
            updated_at=NOW - draw(st.integers(0, 10**5)),
            channel_name=f"chan{channel}" if named else None,
        )
        if draw(st.booleans()):
            if labels and draw(st.booleans()):
                e.categories = {slugify(label): draw(texts) or "x" for label in labels}
            else:
                e.summary = draw(texts) or "x"
            e.revision = 1
        entries.append(e)
    here = entries[0] if draw(st.booleans()) else None
    return here, entries[1:], s, locale


def read_back(
    blocks: list[PromptBlock],
    here: Entry | None,
    others: list[Entry],
    frames: Frames,
) -> tuple[set[tuple[str, bool]], dict[str, set[int]], set[int]]:
    """From the text alone: the notes shown (key, own), the messages shown by channel key,
    and the other channels shown."""
    titles: dict[str, tuple[Entry, bool]] = {}
    for other in others:
        minute = int(max(0.0, NOW - other.updated_at) // 60)
        memory, recent = segment_titles(other, _name(BOT), minute, frames)
        titles[memory] = (other, True)
        titles[recent] = (other, False)
    notes: set[tuple[str, bool]] = set()
    messages: dict[str, set[int]] = {}
    channels: set[int] = set()
    for block in blocks:
        lines = block.text.split("\n")
        header, body = lines[0], lines[1:-1]
        if here is not None and header == same_channel_header(here, BOT, NOW, frames):
            notes.add((here.key, True))
            assert all(line.startswith(">") for line in body)
            continue
        assert header in (others_header(_name(BOT), frames), frames.text("recent_header"))
        current: tuple[Entry, bool] | None = None
        for line in body:
            if not line.startswith(">"):
                current = titles[line]  # a segment's first line names its channel
                channels.add(current[0].channel_id)
                continue
            assert current is not None
            other, in_memory_block = current
            if in_memory_block and other.distilled:
                notes.add((other.key, False))
            else:
                found = MARK.findall(line)
                assert len(found) == 1, line
                messages.setdefault(other.key, set()).add(int(found[0]))
    return notes, messages, channels


def record_of(
    shown: Shown, others: list[Entry]
) -> tuple[set[tuple[str, bool]], dict[str, set[int]], set[int]]:
    by_window = {id(o.messages): o for o in others}
    notes = {(key, own) for key, _pin, own in shown.notes}
    assert len(notes) == len(shown.notes)  # each block once
    messages: dict[str, set[int]] = {}
    for window, last in shown._windows:
        other = by_window[id(window)]
        assert other.key not in messages  # each channel's window once
        messages[other.key] = window.said(last)[1]
    return notes, messages, set(shown.channels)


@settings(
    max_examples=scaled(150, 2000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(
    world=worlds(),
    # The budget as a share of what the memory costs uncut: most cuts fall inside it.
    budget=st.one_of(st.none(), st.floats(0.0, 1.2)),
    tool=st.booleans(),
    cached=st.booleans(),
    # What the render before drew on: the cache must reuse its text only where the text
    # would be the same.
    earlier_mode=st.sampled_from(["crude_summary", "supersede"]),
    earlier_count=st.integers(0, 6),
    earlier_language=st.sampled_from([None, "en", "ja"]),
)
def test_the_record_is_what_the_text_shows(
    world: tuple[Entry | None, list[Entry], ServerSettings, str | None],
    budget: float | None,
    tool: bool,
    cached: bool,
    earlier_mode: RenderMode,
    earlier_count: int,
    earlier_language: Literal["en", "ja"] | None,
) -> None:
    here, others, drawn, locale = world
    cache = RenderCache() if cached else None

    def render(s: ServerSettings) -> tuple[list[PromptBlock], Shown]:
        frames = model_language(s, locale)
        shown = Shown()
        record_shown(here, others, s, shown)
        blocks: list[PromptBlock] = []
        block = same_channel_block(here, s, BOT, NOW, cache, frames)
        if block is not None:
            blocks.append(block)
        blocks += other_channels_blocks(others, s, BOT, NOW, cache, frames)
        if budget is None:
            return blocks, shown
        tool_tokens = estimate_tokens(definition_json(s.categories, 1500)) if tool else None
        full = sum(estimate_tokens(b.text) for b in blocks) + (tool_tokens or 0)
        fitted = fit(
            blocks, None, tool_tokens, int(budget * full), estimate_tokens,
            entry=here, others=others, settings=s, bot_name=BOT, now=NOW,
            cache=cache, frames=frames,
        )  # fmt: skip
        # As build_context takes it: the cut's record, or rendering's when nothing was cut.
        if fitted.shown is None:
            assert fitted.blocks == blocks
            return blocks, shown
        return fitted.blocks, fitted.shown

    if cached:
        # Rendered before under other settings (or the same): what it kept is reused only
        # where it shows the same, and the third render reuses what the second kept.
        earlier = drawn.model_copy(
            update={
                "render_mode": earlier_mode,
                "crude_message_count": earlier_count,
                "language": earlier_language,
            }
        )
        render(earlier)
    for _ in range(2 if cached else 1):
        blocks, shown = render(drawn)
        from_text = read_back(blocks, here, others, model_language(drawn, locale))
        recorded = record_of(shown, others)
        assert recorded == from_text


async def test_a_prediction_is_what_build_context_records() -> None:
    """A turn without build_context is credited what build_context would have recorded,
    the budget's cuts included: both come from the same render."""
    config = STMConfig(database=":memory:", context_token_budget=260, refresh_cadence=1)
    async with ShortTermMemory.open(config) as memory:
        for channel in (10, 11, 12, 13):
            ctx = TurnContext(user_id=2, channel_id=channel, server_id=1)
            said = [
                DialogueMessage(role="user", content=f"words {channel} {n} " * 6, author_id=2)
                for n in range(6)
            ]
            await memory.capture(GenerationFinished(context=ctx, messages=said))
        built = TurnContext(user_id=3, channel_id=10, server_id=1)
        context = await memory.build_context(built)
        assert context.dropped  # the budget cut something
        assert built._shown is not None
        settings_ = memory.settings_for(1)
        predicted = memory._upgrades.what_a_prompt_would_show(
            TurnContext(user_id=3, channel_id=10, server_id=1), settings_, turn_scope(built)[2]
        )
        for shown in (built._shown, predicted):
            assert shown.channels < {10, 11, 12, 13}  # not every channel fits
        assert predicted.channels == built._shown.channels
        assert predicted.notes == built._shown.notes
        assert predicted.sources(3, "direct") == built._shown.sources(3, "direct")
