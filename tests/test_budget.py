"""The token budget: what memory adds to a prompt is counted, cut to fit, and reported."""

from __future__ import annotations

import json
import logging
from collections import deque
from pathlib import Path

import pytest
from helpers import scaled
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_hostile import FRAGMENTS, assert_frame_intact

from stm import (
    Category,
    DialogueMessage,
    GenerationFinished,
    ServerSettings,
    ShortTermMemory,
    STMConfig,
    TurnContext,
    estimate_tokens,
)
from stm._budget import ESTIMATE_MARGIN, count_with, fit
from stm._cache import Entry, StoredMessage
from stm._render import nudge, other_channels_blocks, same_channel_block
from stm._slugs import slugify
from stm._tokens import NUMBERS_MARGIN
from stm._tool.schema import definition_json

NOW = 1_000_000.0

# Prose and chat in the scripts the margin is stated for (and numbers, which tokenizers
# split finely); benchmarks/w7_tokens.py measures the same corpus.
CORPUS: dict[str, str] = json.loads(
    (Path(__file__).resolve().parent / "token_corpus.json").read_text("utf-8")
)


def entry(channel: int = 10, **fields: object) -> Entry:
    base: dict[str, object] = {
        "key": f"shortterm:server:1:{channel}",
        "scope": "server",
        "server_id": 1,
        "user_id": None,
        "channel_id": channel,
        "persona_id": None,
        "messages": deque(maxlen=10),
        "updated_at": NOW - 120 * channel,
        "channel_name": f"chan{channel}",
    }
    base.update(fields)
    return Entry(**base)  # type: ignore[arg-type]


def message(content: str, speaker: str = "ann") -> StoredMessage:
    return StoredMessage("user", content, speaker, 1, NOW, 1)


def render(
    here: Entry | None, others: list[Entry], s: ServerSettings, budget: int | None, tool: bool
) -> tuple[list[str], str | None, int | None, object]:
    blocks = []
    block = same_channel_block(here, s, "Bot", NOW)
    if block is not None:
        blocks.append(block)
    blocks.extend(other_channels_blocks(others, s, "Bot", NOW))
    text = nudge(s) if tool else None  # the library nudges only when it offers the tool
    tool_tokens = estimate_tokens(definition_json(s.categories, 1500)) if tool else None
    if budget is None:
        return [b.text for b in blocks], text, None, ()
    fitted = fit(
        blocks,
        text,
        tool_tokens,
        budget,
        estimate_tokens,
        entry=here,
        others=others,
        settings=s,
        bot_name="Bot",
        now=NOW,
    )
    used = sum(estimate_tokens(b.text) for b in fitted.blocks)
    used += estimate_tokens(fitted.nudge or "") + (tool_tokens if fitted.tool and tool else 0)
    assert used == fitted.tokens
    return [b.text for b in fitted.blocks], fitted.nudge, fitted.tokens, fitted.dropped


def server(n_lines: int = 4, crude: int = 6) -> tuple[Entry, list[Entry]]:
    here = entry(10, summary="\n".join(f"here line {i}" for i in range(n_lines)), revision=1)
    others = []
    for channel in (11, 12, 13):
        said = deque(message(f"message {i} in {channel}") for i in range(crude))
        summary = f"notes of {channel}\nsecond line {channel}"
        others.append(entry(channel, summary=summary, messages=said, revision=1))
    return here, others


# CORPUS counted by the exact tokenizers (bpe-openai 0.1.4), so that the margin is checked
# on every machine; test_the_recorded_counts_are_the_tokenizers checks them where installed.
EXACT: dict[str, dict[str, int]] = {
    "cl100k_base": {"en": 33, "en_chat": 26, "fr": 42, "de": 36, "es": 30, "vi": 39, "ja": 75,
                    "ja_chat": 37, "ja_rare": 75, "zh": 38, "ko": 37, "numbers": 39, "mixed": 35},
    "o200k_base": {"en": 33, "en_chat": 25, "fr": 36, "de": 26, "es": 24, "vi": 22, "ja": 54,
                   "ja_chat": 25, "ja_rare": 52, "zh": 28, "ko": 19, "numbers": 39, "mixed": 29},
}  # fmt: skip


class TestEstimate:
    def test_empty_text_costs_nothing(self) -> None:
        """Nothing to count is zero tokens; anything else at least one."""
        assert estimate_tokens("") == 0
        assert estimate_tokens("a") == 1

    def test_never_far_under_an_exact_tokenizer(self) -> None:
        """On Latin and CJK prose and chat the estimate is at most ESTIMATE_MARGIN under
        cl100k_base and o200k_base (their counts of CORPUS, as recorded in EXACT)."""
        for name, counts in EXACT.items():
            for label, text in CORPUS.items():
                margin = NUMBERS_MARGIN if label == "numbers" else ESTIMATE_MARGIN
                assert estimate_tokens(text) >= counts[label] * (1 - margin), (name, label)

    def test_the_recorded_counts_are_the_tokenizers(self) -> None:
        """EXACT is what the tokenizers count today (with the bench extra installed:
        ``pip install -e '.[bench]'``; CORPUS changed means EXACT is recorded again)."""
        bpe = pytest.importorskip(
            "bpe_openai", reason="the exact tokenizers come with: pip install -e '.[bench]'"
        )
        for name, counts in EXACT.items():
            encoding = bpe.get_encoding(name)
            assert {label: len(encoding.encode(text)) for label, text in CORPUS.items()} == counts

    def test_a_bad_counter_falls_back_to_the_estimate(
        self, caplog: pytest.LogCaptureFixture
    ) -> None:
        """A host counter that fails or answers nonsense is replaced by the estimate,
        logged once."""

        def broken(text: str) -> int:
            raise RuntimeError("no tokenizer")

        with caplog.at_level(logging.ERROR, logger="stm.budget"):
            count = count_with(broken)
            assert count("hello world") == estimate_tokens("hello world")
            assert count("again") == estimate_tokens("again")
        assert len(caplog.records) == 1
        for bad in (-1, 1.5, "3", True, None):
            assert count_with(lambda _t, v=bad: v)("abc") == estimate_tokens("abc")  # type: ignore[misc]
        assert count_with(len)("abcd") == 4


class TestFit:
    def test_a_large_budget_changes_nothing(self) -> None:
        """Within the budget the output is exactly the unbudgeted one, and nothing is dropped."""
        here, others = server()
        s = ServerSettings(refresh_cadence=1)
        plain = render(here, others, s, None, True)
        fitted = render(here, others, s, 1_000_000, True)
        assert fitted[:2] == plain[:2]
        assert fitted[3] == ()

    def test_priority_this_channel_then_newest_other_channels_then_messages(self) -> None:
        """Shrinking the budget drops recent messages first, then the oldest other
        channel's notes, and this channel's notes last."""
        here, others = server()
        s = ServerSettings()
        full, _, full_tokens, _ = render(here, others, s, 10_000, False)
        assert len(full) == 3 and full_tokens is not None
        seen_kinds = []
        for budget in range(full_tokens, 0, -1):
            blocks, _, tokens, dropped = render(here, others, s, budget, False)
            assert tokens is not None and tokens <= budget
            kinds = {o.kind for o in dropped}  # type: ignore[attr-defined]
            seen_kinds.append(kinds)
            if "channel_notes" in kinds:
                # Everything of other channels went before this channel lost a line.
                assert not any("chan11" in b or "chan12" in b for b in blocks)
            if "other_notes" in kinds:
                assert not any(b.startswith("[Recent messages") for b in blocks)
        assert {"other_messages"} in seen_kinds
        assert any("other_notes" in k and "channel_notes" not in k for k in seen_kinds)

    def test_newest_channel_kept_before_older(self) -> None:
        """Other channels are kept newest first (the order recall gives)."""
        _here, others = server()
        s = ServerSettings(render_mode="supersede")
        for budget in range(400, 40, -1):
            blocks, _, _, _ = render(None, others, s, budget, False)
            text = "\n".join(blocks)
            if "chan13" in text:
                assert "chan12" in text
            if "chan12" in text:
                assert "chan11" in text

    def test_cut_at_whole_lines_with_the_notice(self) -> None:
        """A cut keeps whole quoted lines, the frame's first and last lines, and the last
        says that more was left out."""
        here, _ = server(n_lines=30)
        s = ServerSettings()
        blocks, _, _, dropped = render(here, [], s, 120, False)
        assert len(blocks) == 1
        lines = blocks[0].split("\n")
        assert lines[0].startswith("[Short-term memory of Bot")
        assert lines[-1] == "[End of short-term memory; more was left out to fit the prompt]"
        assert 1 <= len(lines) - 2 < 30
        assert all(line.startswith("> here line ") for line in lines[1:-1])
        assert lines[1] == "> here line 0"  # notes keep their first lines
        assert dropped[0].kind == "channel_notes" and dropped[0].lines == 32 - len(lines)  # type: ignore[index]

    def test_recent_messages_keep_the_newest(self) -> None:
        """Cut recent messages keep the newest of each channel."""
        _, others = server(crude=6)
        s = ServerSettings()
        for budget in range(300, 100, -5):
            blocks, _, _, _ = render(None, others[:1], s, budget, False)
            recent = [b for b in blocks if b.startswith("[Recent messages")]
            if recent and "left out" in recent[0]:
                assert "message 5 in 11" in recent[0]
                assert "message 0 in 11" not in recent[0]
                return
        raise AssertionError("no budget cut the recent messages")

    def test_tool_and_nudge_go_last(self) -> None:
        """The tool's definition and the nudge are kept before any note; the nudge goes
        when they do not both fit, the tool when it alone does not."""
        here, others = server()
        s = ServerSettings(refresh_cadence=1)
        tool = estimate_tokens(definition_json(s.categories, 1500))
        blocks, text, tokens, dropped = render(here, others, s, tool + 1, True)
        assert blocks == [] and text is None and tokens == tool
        assert next(o.kind for o in dropped) == "nudge"  # type: ignore[attr-defined]
        # Without the tool (and so the nudge), notes have the whole budget.
        blocks, text, tokens, dropped = render(here, others, s, tool - 1, True)
        assert blocks and text is None and tokens is not None and tokens <= tool - 1
        assert [o.kind for o in dropped][:2] == ["tool", "nudge"]  # type: ignore[attr-defined]

    def test_an_exact_counter_that_is_not_additive_still_fits(self) -> None:
        """A counter whose count of joined lines is more than the sum of its lines' counts
        still ends within the budget (lines are given back until it fits)."""
        here, others = server(n_lines=20)
        s = ServerSettings()

        blocks = [b for b in [same_channel_block(here, s, "Bot", NOW)] if b is not None]
        blocks += other_channels_blocks(others, s, "Bot", NOW)
        for budget in (30, 60, 120, 250):
            fitted = fit(
                blocks, None, None, budget, lumpy,
                entry=here, others=others, settings=s, bot_name="Bot", now=NOW,
            )  # fmt: skip
            assert sum(lumpy(b.text) for b in fitted.blocks) == fitted.tokens <= budget


# -- the property: no input makes a context exceed its budget -----------------------------
texts = st.one_of(
    st.text(max_size=400),
    st.sampled_from(list(CORPUS.values()) + FRAGMENTS),
    st.lists(st.sampled_from(list(CORPUS.values()) + FRAGMENTS), max_size=8).map("\n".join),
)
names = st.one_of(st.none(), st.text(max_size=40), st.sampled_from(FRAGMENTS))


@st.composite
def worlds(draw: st.DrawFn) -> tuple[Entry | None, list[Entry], ServerSettings]:
    labels = draw(st.lists(st.sampled_from(["Mood", "Plans", "予定", "Notes [x]"]), unique=True))
    s = ServerSettings(
        render_mode=draw(st.sampled_from(["crude_summary", "supersede"])),
        crude_message_count=draw(st.integers(0, 8)),
        categories=tuple(Category(label) for label in labels) or ServerSettings().categories,
        refresh_cadence=1,
        nudge_text=draw(st.one_of(st.none(), st.text(max_size=80).filter(str.strip))),
    )
    entries = []
    for channel in range(10, 10 + draw(st.integers(1, 4))):
        said = deque(
            message(draw(texts), speaker=draw(names) or "ann")
            for _ in range(draw(st.integers(0, 8)))
        )
        age = draw(st.integers(0, 10**6))
        e = entry(channel, channel_name=draw(names), updated_at=NOW - age, messages=said)
        if draw(st.booleans()):
            if labels and draw(st.booleans()):
                e.categories = {slugify(label): draw(texts) or "x" for label in labels}
            else:
                e.summary = draw(texts) or "x"
            e.revision = 1
        entries.append(e)
    here = entries[0] if draw(st.booleans()) else None
    return here, entries[1:], s


def lumpy(text: str) -> int:
    """A counter whose count of joined lines exceeds the sum of its lines' counts."""
    return len(text) // 4 + 3 * text.count("\n")


@settings(
    max_examples=scaled(120, 2000), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(world=worlds(), budget=st.integers(0, 3000), tool=st.booleans())
def test_no_context_exceeds_its_budget(
    world: tuple[Entry | None, list[Entry], ServerSettings], budget: int, tool: bool
) -> None:
    """Any text, script, length and settings: the tokens of what memory adds are within the
    budget (by the estimate and by a non-additive counter), the frame is intact, and a
    budget above the full size changes nothing."""
    here, others, s = world
    blocks, _text, tokens, _ = render(here, others, s, budget, tool)
    assert tokens is not None and tokens <= budget
    assert_frame_intact("\n\n".join(blocks), blocks)
    plain_blocks = [b for b in [same_channel_block(here, s, "Bot", NOW)] if b is not None]
    plain_blocks += other_channels_blocks(others, s, "Bot", NOW)
    fitted = fit(
        plain_blocks, None, None, budget, lumpy,
        entry=here, others=others, settings=s, bot_name="Bot", now=NOW,
    )  # fmt: skip
    assert sum(lumpy(b.text) for b in fitted.blocks) == fitted.tokens <= budget
    plain, plain_nudge, _, _ = render(here, others, s, None, tool)
    full = sum(map(estimate_tokens, plain)) + estimate_tokens(plain_nudge or "")
    if tool:
        full += estimate_tokens(definition_json(s.categories, 1500))
    large = render(here, others, s, full, tool)
    assert large[:2] == (plain, plain_nudge)
    assert large[3] == ()


# -- through the library ---------------------------------------------------------------
async def chat(memory: ShortTermMemory, channel: int, text: str, **names: str) -> TurnContext:
    ctx = TurnContext(user_id=2, channel_id=channel, server_id=1, **names)  # type: ignore[arg-type]
    said = DialogueMessage(role="user", content=text, author_id=2, speaker_name="ann")
    await memory.capture(GenerationFinished(context=ctx, messages=[said]))
    return ctx


async def test_the_library_reports_tokens_and_drops() -> None:
    """build_context counts everything memory adds under a budget (blocks, nudge, tool),
    reports what it dropped, and a server may lower the operator's budget, not raise it."""
    config = STMConfig(database=":memory:", context_token_budget=2000, refresh_cadence=1)
    async with ShortTermMemory.open(config) as memory:
        for channel in (10, 11, 12):
            ctx = await chat(memory, channel, f"hello from {channel} " * 20)
            assert (await memory.run_tool(ctx, {"summary": f"notes {channel} " * 30})).success
            await chat(memory, channel, "after the notes")
        here = TurnContext(user_id=3, channel_id=10, server_id=1)
        context = await memory.build_context(here)
        schema = memory.tool_schema(here)
        assert schema is not None and context.nudge is not None and context.dropped == ()
        used = sum(memory.count_tokens(b.text) for b in context.blocks)
        used += memory.count_tokens(context.nudge) + memory.count_tokens(json.dumps(schema))
        assert context.tokens == used
        await memory.update_server_settings(1, context_token_budget=150)
        assert memory.token_budget(memory.settings_for(1)) == 150
        small = await memory.build_context(here)
        assert small.tokens is not None and small.tokens <= 150
        assert {o.kind for o in small.dropped} >= {"other_notes"}
        await memory.update_server_settings(1, context_token_budget=5000)
        assert memory.token_budget(memory.settings_for(1)) == 2000
        await memory.update_server_settings(1, context_token_budget=10)
        assert memory.tool_schema(here) is None  # its definition alone does not fit
        assert (await memory.build_context(here)).dropped[0].kind == "tool"


async def test_no_budget_counts_nothing() -> None:
    """Without a budget nothing is counted: tokens is None."""
    async with ShortTermMemory.open(STMConfig(database=":memory:")) as memory:
        ctx = await chat(memory, 10, "hi")
        assert (await memory.run_tool(ctx, {"summary": "notes"})).success
        context = await memory.build_context(TurnContext(user_id=3, channel_id=10, server_id=1))
        assert context.blocks and context.tokens is None and context.dropped == ()


async def test_the_host_tokenizer_is_used() -> None:
    """A host's counter is what the budget counts with."""
    seen: list[str] = []

    def words(text: str) -> int:
        seen.append(text)
        return len(text.split())

    config = STMConfig(database=":memory:", context_token_budget=40)
    async with ShortTermMemory.open(config, token_counter=words) as memory:
        ctx = await chat(memory, 10, "hi")
        assert (await memory.run_tool(ctx, {"summary": "word " * 200})).success
        context = await memory.build_context(TurnContext(user_id=3, channel_id=10, server_id=1))
        assert seen and context.tokens is not None and context.tokens <= 40


@pytest.mark.parametrize("payload", FRAGMENTS)
@pytest.mark.parametrize("budget", [60, 200, 600])
async def test_hostile_rendering_under_tight_budgets(payload: str, budget: int) -> None:
    """The hostile-rendering case under tight budgets: every line is still a frame line, a
    sub-header or a quoted line, and the count is within the budget."""
    config = STMConfig(database=":memory:", context_token_budget=budget)
    async with ShortTermMemory.open(config) as memory:
        mood = Category(f"Mood {payload}", payload)
        await memory.set_categories(1, [mood, Category(f"x{payload}y")])
        names = {"channel_name": payload, "server_name": payload, "bot_name": payload}
        for channel in (10, 11, 12):
            c = await chat(memory, channel, f"a {payload} b", **names)
            if channel != 12:
                assert (await memory.run_tool(c, {slugify(mood.label): f"m {payload}"})).success
        here = TurnContext(user_id=3, channel_id=10, server_id=1, **names)
        context = await memory.build_context(here)
        assert context.tokens is not None and context.tokens <= budget
        assert_frame_intact(str(context), [b.text for b in context.blocks])
