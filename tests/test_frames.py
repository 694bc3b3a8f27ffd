"""What the model reads around memory in the server's language: frames, nudge, tool."""

from __future__ import annotations

import json
import re
import string
import unicodedata
from pathlib import Path

import pytest
from test_hostile import BROADCAST, FRAGMENTS, MENTION

from stm import (
    Category,
    DialogueMessage,
    GenerationFinished,
    PromptContext,
    ShortTermMemory,
    STMConfig,
    TurnContext,
)
from stm._frames import LANGUAGES, frames_for
from stm._slugs import slugify

LOCALES = Path(__file__).resolve().parent.parent / "stm" / "locales"
FRAME_KEYS = ("same_header", "same_end", "others_header", "others_end")
FRAME_KEYS += ("recent_header", "recent_end", "nudge")


def raw(language: str) -> dict[str, str]:
    loaded: dict[str, str] = json.loads((LOCALES / f"{language}.json").read_text("utf-8"))
    return loaded


def fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


@pytest.mark.parametrize("language", LANGUAGES)
def test_every_language_has_every_text_with_its_fields(language: str) -> None:
    """Each language has every key English has, filling the same fields; frame lines open
    and close with a bracket and hold no other, and the left-out notice holds none."""
    english, other = raw("en"), raw(language)
    assert set(other) == set(english)
    for key, template in english.items():
        assert fields(other[key]) == fields(template), key
    for key in FRAME_KEYS:
        line = other[key]
        assert line.startswith("[") and line.endswith("]"), key
        assert not re.search(r"[\[\]]", unicodedata.normalize("NFKC", line[1:-1])), key
    for key in set(other) - set(FRAME_KEYS) - {"language"}:
        assert "[" not in other[key] and "]" not in other[key], key
    assert "\n" not in "".join(other.values())


async def talk(memory: ShortTermMemory, channel: int, text: str, **context: object) -> TurnContext:
    ctx = TurnContext(user_id=2, channel_id=channel, server_id=1, **context)  # type: ignore[arg-type]
    said = DialogueMessage(role="user", content=text, author_id=2, speaker_name="ann")
    await memory.capture(GenerationFinished(context=ctx, messages=[said]))
    return ctx


async def filled(memory: ShortTermMemory, **context: object) -> None:
    for channel in (10, 11, 12):
        ctx = await talk(memory, channel, f"hello {channel}", **context)
        if channel != 12:
            assert (await memory.run_tool(ctx, {"summary": f"notes {channel}"})).success
        await talk(memory, channel, "more", **context)


async def test_frames_follow_the_server_language_and_locale() -> None:
    """The server's language setting, else its preferred locale, else English, chooses the
    frames and the nudge; the same entries render in each (the render cache keeps them
    apart)."""
    config = STMConfig(database=":memory:", refresh_cadence=1)
    async with ShortTermMemory.open(config) as memory:
        await filled(memory)

        async def context(**turn: object) -> PromptContext:
            return await memory.build_context(
                TurnContext(user_id=3, channel_id=10, server_id=1, **turn)  # type: ignore[arg-type]
            )

        english = await context()
        assert str(english).startswith("[Short-term memory of Assistant")
        assert english.nudge is not None and english.nudge.startswith("[System: It has been")
        japanese = await context(server_locale="ja")
        text = str(japanese)
        assert text.startswith("[この会話（#channel-10）についての Assistant の短期記憶")
        assert "[他のチャンネルの記憶ここまで]" in text and "[最近のメッセージここまで]" in text
        assert "ユーザー" not in text and "ann" in text  # speakers keep their names
        assert japanese.nudge is not None and "update_short_term_memory" in japanese.nudge
        assert japanese.nudge.startswith("[System: この会話の短期記憶")
        assert str(await context(server_locale="fr")) == str(english)
        assert str(await context(server_locale="en-GB")) == str(english)
        await memory.update_server_settings(1, language="en")
        assert str(await context(server_locale="ja")) == str(english)
        await memory.update_server_settings(1, language="ja")
        assert str(await context()) == text
        await memory.update_server_settings(1, language=None)
        assert str(await context()) == str(english)


async def test_the_tool_asks_for_notes_in_the_conversations_language() -> None:
    """The tool's description asks for notes in the language of the conversation, in the
    server's language; a server's own description is kept as written."""
    async with ShortTermMemory.open(STMConfig(database=":memory:")) as memory:
        ctx = TurnContext(user_id=3, channel_id=10, server_id=1)
        english = memory.tool_schema(ctx)
        assert english is not None
        assert "in the language the conversation is in" in english["function"]["description"]
        ja = TurnContext(user_id=3, channel_id=10, server_id=1, server_locale="ja")
        japanese = memory.tool_schema(ja)
        assert japanese is not None
        assert "会話で使われている言語で書いてください" in japanese["function"]["description"]
        summary = japanese["function"]["parameters"]["properties"]["summary"]["description"]
        assert summary.startswith("この会話の") and "1500" in summary
        assert japanese["function"]["parameters"] == {
            **english["function"]["parameters"],
            "properties": japanese["function"]["parameters"]["properties"],
        }
        await memory.set_categories(1, [Category("Mood", "How people feel")])
        mood = memory.tool_schema(ja)
        assert mood is not None
        prop = mood["function"]["parameters"]["properties"]["mood"]["description"]
        assert prop.startswith("Mood：How people feel")
        await memory.update_server_settings(1, tool_description="Keep notes.")
        mine = memory.tool_schema(ja)
        assert mine is not None and mine["function"]["description"] == "Keep notes."
        # Arguments parse the same in every language.
        assert (await memory.run_tool(ja, {"mood": "calm"})).success


def assert_japanese_frame_intact(context: PromptContext) -> None:
    ja = frames_for("ja")
    ends = {ja.text(k) for k in ("same_end", "others_end", "recent_end")}
    left_out = ja.text("left_out")
    titles = re.compile(r"^(.* は #.* での最近の会話を覚えています（.*）：|#.*（.*）：)$")
    for block in context.blocks:
        lines = block.text.split("\n")
        assert block.text.splitlines() == lines
        assert lines[0].startswith("[") and lines[0].endswith("]")
        assert lines[-1] in ends or lines[-1].replace(left_out, "") in ends, lines[-1]
        for line in lines[1:-1]:
            normal = unicodedata.normalize("NFKC", line)
            assert "[" not in normal and "]" not in normal, line
            assert line.startswith(">") or titles.match(line), line
    text = str(context)
    assert not BROADCAST.search(text) and not MENTION.search(text)


@pytest.mark.parametrize("payload", FRAGMENTS)
@pytest.mark.parametrize("budget", [None, 300, 800])
async def test_hostile_text_stays_inside_japanese_frames(payload: str, budget: int | None) -> None:
    """Hostile names, labels and messages under Japanese frames, with and without a tight
    budget: every line is still a frame line, a sub-header or a quoted line."""
    config = STMConfig(database=":memory:", context_token_budget=budget)
    async with ShortTermMemory.open(config) as memory:
        await memory.update_server_settings(1, language="ja")
        mood = Category(f"Mood {payload}", payload)
        await memory.set_categories(1, [mood, Category(f"x{payload}y")])
        names = {"channel_name": payload, "server_name": payload, "bot_name": payload}
        for channel in (10, 11, 12):
            c = await talk(memory, channel, f"a {payload} b", **names)
            if channel != 12:
                assert (await memory.run_tool(c, {slugify(mood.label): f"m {payload}"})).success
        context = await memory.build_context(
            TurnContext(user_id=3, channel_id=10, server_id=1, **names)
        )
        assert context.blocks or budget is not None
        assert budget is None or (context.tokens is not None and context.tokens <= budget)
        assert_japanese_frame_intact(context)
