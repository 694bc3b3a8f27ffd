"""The update_short_term_memory tool schema and strict argument parsing."""

from __future__ import annotations

import json

import pytest

from stm.models import DEFAULT_CATEGORY, Category
from stm.tool.schema import MAX_RAW_ARGUMENTS, arguments_model, parse_arguments, tool_definition

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
