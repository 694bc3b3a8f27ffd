"""The update_short_term_memory tool schema and strict argument parsing."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from stm import ShortTermMemory, STMConfig, ToolResult, TurnContext
from stm._models import DEFAULT_CATEGORY, Category
from stm._text import one_line
from stm._tool.schema import MAX_RAW_ARGUMENTS, arguments_model, parse_arguments, tool_definition

CATEGORIES = (Category("Current Topic", "What is being discussed"), Category("Mood", "The tone"))


def test_summary_mode_has_one_required_summary() -> None:
    """Only the default category: one required string, nothing else accepted."""
    tool = tool_definition((DEFAULT_CATEGORY,), 1500)
    assert tool["type"] == "function"
    function = tool["function"]
    assert function["name"] == "update_short_term_memory"
    params = function["parameters"]
    assert params["required"] == ["summary"]
    assert params["properties"]["summary"]["type"] == "string"
    assert params["additionalProperties"] is False


def test_category_mode_has_one_optional_property_per_slug() -> None:
    """Category mode: slug-named optional strings described by the category's description."""
    params = tool_definition(CATEGORIES, 1500)["function"]["parameters"]
    assert list(params["properties"]) == ["current_topic", "mood"]
    assert "required" not in params
    assert "What is being discussed" in params["properties"]["current_topic"]["description"]
    assert all("default" not in p for p in params["properties"].values())


def test_description_override() -> None:
    """A server's tool description replaces the default one."""
    tool = tool_definition((DEFAULT_CATEGORY,), 10, "Custom words")
    assert tool["function"]["description"] == "Custom words"


def test_definition_is_a_fresh_copy() -> None:
    """A host changing the returned dict cannot corrupt the next turn's schema."""
    tool_definition(CATEGORIES, 1500)["function"]["name"] = "hacked"
    assert tool_definition(CATEGORIES, 1500)["function"]["name"] == "update_short_term_memory"


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ('{"summary": 42}', "must be a string, not a number"),
        ('{"summary": null}', "must be a string, not null"),
        ('{"summary": ["a"]}', "must be a string, not a list"),
        ('{"summary": "x", "extra": "y"}', "unknown field 'extra'"),
        ("{}", "missing required field 'summary'"),
        ('{"summary": "   "}', "at least one field"),
        ('{"summary": "\u200b\u200d \u2060\ufeff\u3164"}', "invisible characters"),
        ({"summary": "\u200b\u00ad\ufe0f\U000e0041"}, "invisible characters"),
        ('{"summary": "a", "summary": "b"}', "'summary' appears more than once"),
        (b'{"summary": "a", "summary": "b"}', "'summary' appears more than once"),
        ('{"summary": "a", "x": {"k": 1, "k": 2}}', "'k' appears more than once"),
        ("not json at all", "not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
        ("42", "must be a JSON object"),
        (17, "must be a JSON object"),
        (None, "must be a JSON object"),
        ("x" * (MAX_RAW_ARGUMENTS + 1), "too large"),
        ('{"summary": ' * 5000, "not valid JSON"),
    ],
)
def test_bad_arguments_explain_what_to_fix(arguments: object, fragment: str) -> None:
    """Every bad input is a message for the model, never an exception."""
    model = arguments_model((DEFAULT_CATEGORY,), 100)
    result = parse_arguments(model, arguments, 100)
    assert isinstance(result, str)
    assert fragment in result
    assert "update_short_term_memory" in result


def test_values_are_cleaned_and_cut() -> None:
    """Controls dropped, values stripped and cut to the limit, dict or JSON alike."""
    model = arguments_model((DEFAULT_CATEGORY,), 5)
    assert parse_arguments(model, {"summary": "  ab\x00cdefgh "}, 5) == {"summary": "abcde"}
    assert parse_arguments(model, json.dumps({"summary": "hello"}), 5) == {"summary": "hello"}


def test_category_mode_drops_blank_fields_and_needs_one() -> None:
    """Blank values count as absent; all-blank is refused."""
    model = arguments_model(CATEGORIES, 100)
    assert parse_arguments(model, {"mood": "calm", "current_topic": " "}, 100) == {"mood": "calm"}
    message = parse_arguments(model, {"mood": "", "current_topic": "\n"}, 100)
    assert isinstance(message, str) and "at least one field" in message
    invisible = {"mood": "calm", "current_topic": "\u200b\u200c"}
    assert parse_arguments(model, invisible, 100) == {"mood": "calm"}
    message = parse_arguments(model, '{"mood": "a", "mood": "b"}', 100)
    assert isinstance(message, str) and "'mood' appears more than once" in message


async def test_invisible_or_repeated_arguments_store_nothing(tmp_path: Path) -> None:
    """The tool refuses a summary of only invisible characters and a repeated field:
    nothing is stored, and the refusal says why."""
    config = STMConfig(database=str(tmp_path / "stm.sqlite3"))
    ctx = TurnContext(user_id=1, channel_id=10, server_id=100)
    async with ShortTermMemory.open(config) as memory:
        for arguments in ('{"summary": "\u200b\u200b"}', '{"summary": "a", "summary": "b"}'):
            result = await memory.run_tool(ctx, arguments)
            assert not result.success and "not applied" in result.message
        assert await memory.get_entry("shortterm:server:100:10") is None


# Names the pydantic model class holds: a label slugged to one of them once broke the tool.
MODEL_NAMES = sorted({name.strip("_") for name in dir(BaseModel)} - {""})
labels = st.one_of(
    st.sampled_from([*MODEL_NAMES, "Model Config", "model config!", "summary", "f0", "F 1"]),
    st.text(min_size=1, max_size=30),
    st.builds(lambda a, b: f"{a} {b}", st.sampled_from(MODEL_NAMES), st.text(max_size=5)),
)


class Server:
    """One memory on its own event loop, for property tests written as plain functions."""

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.memory: ShortTermMemory = self.runner.run(self._open())
        self.next_server = 1000

    @staticmethod
    async def _open() -> ShortTermMemory:
        return await ShortTermMemory.open(STMConfig(database=":memory:"))

    def close(self) -> None:
        self.runner.run(self.memory.close())
        self.runner.close()


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    s = Server()
    yield s
    s.close()


def label_lines(text: str) -> dict[str, str]:
    """``> Label: value`` lines of a rendered context, as value -> label."""
    found = {}
    for line in text.splitlines():
        if line.startswith("> ") and ": value-" in line:
            label, value = line[2:].rsplit(": ", 1)
            found[value] = label
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chosen=st.lists(labels, min_size=1, max_size=5), data=st.data())
def test_any_labels_keep_the_tool_working_and_values_with_their_category(
    server: Server, chosen: list[str], data: st.DataObject
) -> None:
    """Whatever the labels: set_categories refuses them with ValueError or the tool works
    (schema and run_tool); each value shows under its own label, also after another category
    is removed."""
    memory, run = server.memory, server.runner.run
    server.next_server += 1
    sid = server.next_server
    categories = []
    for label in chosen:
        try:
            categories.append(Category(label))
        except ValueError:
            event("label refused")
            return  # blank or too long: refused where it is made
    try:
        settings_ = run(memory.set_categories(sid, categories))
    except ValueError:
        event("labels refused")
        return
    here = TurnContext(user_id=1, channel_id=sid, server_id=sid)
    tool = memory.tool_schema(here)
    assert tool is not None
    properties = tool["function"]["parameters"]["properties"]
    if settings_.summary_mode:
        event("summary mode")
        return
    slugs = list(properties)
    assert len(slugs) == len(categories) == len(set(slugs))
    values = {slug: f"value-{n}" for n, slug in enumerate(slugs)}
    result = run(memory.run_tool(here, json.dumps(values)))
    assert isinstance(result, ToolResult) and result.success, result
    shown = label_lines(str(run(memory.build_context(here.model_copy()))))
    for n, category in enumerate(categories):
        assert shown[f"value-{n}"] == one_line(category.label)
    gone = data.draw(st.integers(0, len(categories) - 1), label="removed")
    kept = categories[:gone] + categories[gone + 1 :]
    run(memory.set_categories(sid, kept))
    again = TurnContext(user_id=1, channel_id=sid, server_id=sid)
    assert memory.tool_schema(again) is not None
    shown = label_lines(str(run(memory.build_context(again))))
    for n, category in enumerate(categories):
        if n != gone:
            assert shown[f"value-{n}"] == one_line(category.label)
    kept_labels = {one_line(c.label) for c in kept}
    assert shown.get(f"value-{gone}") not in kept_labels
    event("removed one")


def test_labels_named_like_the_model_class_make_a_working_tool() -> None:
    """model_config, Model Config and model_dump are ordinary argument names."""
    cats = (Category("model_config"), Category("Model Dump"), Category("model_fields"))
    params = tool_definition(cats, 100)["function"]["parameters"]
    assert list(params["properties"]) == ["model_config", "model_dump", "model_fields"]
    model = arguments_model(cats, 100)
    assert parse_arguments(model, {"model_config": " a ", "model_fields": "b"}, 100) == {
        "model_config": "a",
        "model_fields": "b",
    }
    refused = parse_arguments(model, {"f0": "x"}, 100)
    assert isinstance(refused, str) and "unknown field 'f0'" in refused
    assert '"model_dump": "..."' in refused
