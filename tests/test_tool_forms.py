"""Tool definitions for OpenAI, Anthropic and Gemini: each valid for that API's documented rules.

The checks below are written from each API's documentation, not from the converter's
own constants, so a converter that emits a key an API refuses fails here.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stm import (
    TOOL_APIS,
    Category,
    ShortTermMemory,
    STMConfig,
    ToolRegistry,
    ToolResult,
    TurnContext,
    convert_tool_definition,
)
from stm._tool.schema import arguments_model, parse_arguments

# -- the documented constraints ---------------------------------------------------------
# OpenAI: function names "a-z, A-Z, 0-9, or contain underscores and dashes, with a
# maximum length of 64"; a tool is {"type": "function", "function": {...}}.
OPENAI_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
OPENAI_FUNCTION_KEYS = {"name", "description", "parameters", "strict"}
# Anthropic: name "^[a-zA-Z0-9_-]{1,64}$"; a tool is {name, description, input_schema},
# input_schema a JSON Schema of type object.
ANTHROPIC_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
ANTHROPIC_TOOL_KEYS = {"name", "description", "input_schema"}
# JSON Schema (draft 2020-12) keywords a schema of ours may use.
JSON_SCHEMA_KEYS = {
    "type", "properties", "required", "additionalProperties", "description", "enum",
    "const", "items", "minProperties", "maxProperties", "minLength", "maxLength",
    "minimum", "maximum", "anyOf", "format", "title", "default", "$defs", "$ref",
    "minItems", "maxItems", "pattern",
}  # fmt: skip
# Gemini: FunctionDeclaration {name, description, parameters}; the name "must start
# with a letter or an underscore", a-z, A-Z, 0-9, underscores, dots and dashes, at most
# 64; parameters a Schema, "a select subset of an OpenAPI 3.0 schema object", whose
# types are the Type enum's names. Parameter names start with a letter or an underscore
# and use a-z, A-Z, 0-9 and underscores, at most 64.
GEMINI_NAME = r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$"
GEMINI_DECLARATION_KEYS = {"name", "description", "parameters"}
GEMINI_SCHEMA_FIELDS = {
    "type", "format", "title", "description", "nullable", "enum", "maxItems", "minItems",
    "properties", "required", "minProperties", "maxProperties", "minLength", "maxLength",
    "pattern", "example", "anyOf", "propertyOrdering", "default", "items", "minimum",
    "maximum",
}  # fmt: skip
# Keys some Gemini endpoints refuse although the newest schema lists them, and what
# the JSON Schema of other APIs has and Gemini's Schema has not.
GEMINI_REFUSED = {"additionalProperties", "$schema", "$defs", "$ref", "const", "title",
                  "default", "anyOf", "minProperties", "maxProperties"}  # fmt: skip
GEMINI_TYPES = {"STRING", "NUMBER", "INTEGER", "BOOLEAN", "ARRAY", "OBJECT"}
GEMINI_PARAMETER = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"


def check_json_schema(schema: Any, where: str = "$") -> None:
    assert isinstance(schema, dict), where
    assert set(schema) <= JSON_SCHEMA_KEYS, (where, set(schema) - JSON_SCHEMA_KEYS)
    for name, sub in schema.get("properties", {}).items():
        check_json_schema(sub, f"{where}.{name}")
    if "items" in schema:
        check_json_schema(schema["items"], f"{where}[]")


def check_openai(tool: Any) -> None:
    assert set(tool) == {"type", "function"} and tool["type"] == "function"
    function = tool["function"]
    assert set(function) <= OPENAI_FUNCTION_KEYS
    assert re.match(OPENAI_NAME, function["name"])
    assert function["parameters"]["type"] == "object"
    check_json_schema(function["parameters"])


def check_anthropic(tool: Any) -> None:
    assert set(tool) == ANTHROPIC_TOOL_KEYS
    assert re.match(ANTHROPIC_NAME, tool["name"])
    assert isinstance(tool["description"], str)
    assert tool["input_schema"]["type"] == "object"
    check_json_schema(tool["input_schema"])


def check_gemini_schema(schema: Any, where: str = "$") -> None:
    assert isinstance(schema, dict), where
    keys = set(schema)
    assert keys <= GEMINI_SCHEMA_FIELDS, (where, keys - GEMINI_SCHEMA_FIELDS)
    assert not keys & GEMINI_REFUSED, (where, keys & GEMINI_REFUSED)
    assert schema["type"] in GEMINI_TYPES, where
    if schema["type"] == "OBJECT":
        # An OBJECT needs properties; required names must be among them.
        assert schema.get("properties"), where
        assert set(schema.get("required", [])) <= set(schema["properties"]), where
    if "enum" in schema:
        assert all(isinstance(v, str) for v in schema["enum"]), where
    for name, sub in schema.get("properties", {}).items():
        assert re.match(GEMINI_PARAMETER, name), (where, name)
        check_gemini_schema(sub, f"{where}.{name}")
    if "items" in schema:
        check_gemini_schema(schema["items"], f"{where}[]")


def check_gemini(declaration: Any) -> None:
    assert set(declaration) <= GEMINI_DECLARATION_KEYS and "name" in declaration
    assert re.match(GEMINI_NAME, declaration["name"])
    if "parameters" in declaration:
        assert declaration["parameters"]["type"] == "OBJECT"
        check_gemini_schema(declaration["parameters"])
    assert "additionalProperties" not in json.dumps(declaration)


CHECKS = {"openai": check_openai, "anthropic": check_anthropic, "gemini": check_gemini}

SUMMARY = (Category("summary", ""),)
SERVERS = {
    "summary mode": None,
    "categories": (
        Category("Trip plans", "Where and when"),
        Category("Café", ""),
        Category("2025 goals", "numbers first"),
        Category("model_config", "a label like a pydantic name"),
        Category("Ünïcödé ☃ notes", "folded to ASCII"),
    ),
}


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[ShortTermMemory]:
    async with ShortTermMemory.open(STMConfig(database=str(tmp_path / "stm.sqlite3"))) as m:
        yield m


def turn(**extra: Any) -> TurnContext:
    return TurnContext(user_id=1, channel_id=2, server_id=3, **extra)


# -- the memory's own tool, in each form -------------------------------------------------
@pytest.mark.parametrize("api", TOOL_APIS)
@pytest.mark.parametrize("server", list(SERVERS))
async def test_the_memory_tool_is_valid_in_each_apis_form(
    memory: ShortTermMemory, api: str, server: str
):
    categories = SERVERS[server]
    if categories is not None:
        await memory.set_categories(3, list(categories))
    registry = ToolRegistry()
    registry.register(memory.tool)
    (definition,) = registry.definitions(turn(), api=api)
    CHECKS[api](definition)
    names = set(_parameters(definition, api).get("properties", {}))
    expected = {"summary"} if categories is None else {
        "trip_plans", "cafe", "c_2025_goals", "model_config", "unicode_notes"}  # fmt: skip
    assert names == expected


def _parameters(definition: dict[str, Any], api: str) -> dict[str, Any]:
    if api == "openai":
        return definition["function"]["parameters"]  # type: ignore[no-any-return]
    if api == "anthropic":
        return definition["input_schema"]  # type: ignore[no-any-return]
    return definition.get("parameters", {})  # type: ignore[no-any-return]


async def test_the_default_form_is_openai_and_unchanged(memory: ShortTermMemory):
    registry = ToolRegistry()
    registry.register(memory.tool)
    assert registry.definitions(turn()) == [memory.tool_schema(turn())]
    assert registry.definitions(turn(), api="openai") == registry.definitions(turn())


async def test_gemini_keeps_the_descriptions_and_which_fields_are_required(
    memory: ShortTermMemory,
):
    (openai,) = [memory.tool_schema(turn())]
    gemini = convert_tool_definition(openai, "gemini")
    assert gemini["description"] == openai["function"]["description"]
    summary = gemini["parameters"]["properties"]["summary"]
    assert summary == {
        "type": "STRING",
        "description": openai["function"]["parameters"]["properties"]["summary"]["description"],
    }
    assert gemini["parameters"]["required"] == ["summary"]


@pytest.mark.parametrize("api", TOOL_APIS)
async def test_a_withheld_tool_is_withheld_in_every_form(memory: ShortTermMemory, api: str):
    registry = ToolRegistry()
    registry.register(memory.tool)
    assert registry.definitions(turn(explicit_memory_intent=True), api=api) == []


# -- strictness stays with our parsing ---------------------------------------------------
@pytest.mark.parametrize(
    "arguments",
    [
        {"summary": "ok", "extra": "x"},
        {"summary": 5},
        {"summary": None},
        '{"summary": "ok", "unknown": "field"}',
    ],
)
async def test_what_gemini_cannot_forbid_is_still_refused(
    memory: ShortTermMemory, arguments: object
):
    """Gemini's form has no additionalProperties; the tool refuses extra fields anyway."""
    gemini = convert_tool_definition(memory.tool_schema(turn()), "gemini")  # type: ignore[arg-type]
    assert "additionalProperties" not in json.dumps(gemini)
    model = arguments_model(SUMMARY, 1500)
    assert isinstance(parse_arguments(model, arguments, 1500), str)
    result = await memory.run_tool(turn(user_text="hi"), arguments)
    assert isinstance(result, ToolResult) and not result.success


async def test_a_category_write_with_no_field_is_refused_though_gemini_has_no_min_properties(
    memory: ShortTermMemory,
):
    await memory.set_categories(3, list(SERVERS["categories"] or ()))
    gemini = convert_tool_definition(memory.tool_schema(turn()), "gemini")  # type: ignore[arg-type]
    assert "minProperties" not in json.dumps(gemini)
    result = await memory.run_tool(turn(user_text="hi"), {})
    assert not result.success and "at least one field" in result.message


def test_parsing_is_the_same_for_arguments_in_any_apis_shape():
    """Gemini sends a dict, OpenAI a JSON string, Anthropic a dict: one parse for all."""
    model = arguments_model(SUMMARY, 1500)
    as_text = parse_arguments(model, '{"summary": "  a trip\\u0007 "}', 1500)
    as_dict = parse_arguments(model, {"summary": "  a trip\u0007 "}, 1500)
    assert as_text == as_dict == {"summary": "a trip"}


# -- host tools and the registry ---------------------------------------------------------
class HostTool:
    """A host's own tool with a schema of its choosing."""

    def __init__(self, name: str, parameters: dict[str, Any] | None = None) -> None:
        self.name = name
        self.parameters = parameters

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        function: dict[str, Any] = {"name": self.name, "description": f"{self.name} tool"}
        if self.parameters is not None:
            function["parameters"] = self.parameters
        return {"type": "function", "function": function}

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        return ToolResult(success=True, message="ran")


RICH = {
    "type": "object",
    "title": "Lookup",
    "additionalProperties": False,
    "$defs": {"Place": {"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": False}},
    "properties": {
        "query": {"type": "string", "title": "Query", "minLength": 1, "default": ""},
        "limit": {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}]},
        "units": {"enum": ["metric", "imperial"], "type": "string"},
        "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
        "where": {"$ref": "#/$defs/Place"},
        "when": {"type": ["string", "null"], "format": "date-time"},
        "exact": {"const": True, "type": "boolean"},
    },
    "required": ["query"],
}  # fmt: skip


@pytest.mark.parametrize("api", TOOL_APIS)
def test_a_host_tool_with_a_rich_schema_converts_validly(api: str):
    converted = convert_tool_definition(HostTool("lookup", RICH).definition(turn()), api)  # type: ignore[arg-type]
    CHECKS[api](converted)


def test_gemini_inlines_refs_and_marks_nullable_fields():
    converted = convert_tool_definition(HostTool("lookup", RICH).definition(turn()), "gemini")  # type: ignore[arg-type]
    properties = converted["parameters"]["properties"]
    assert properties["where"] == {
        "type": "OBJECT",
        "properties": {"city": {"type": "STRING"}},
        "required": ["city"],
    }
    assert properties["limit"] == {"type": "INTEGER", "minimum": 1, "nullable": True}
    assert properties["when"] == {"type": "STRING", "format": "date-time", "nullable": True}
    assert properties["units"] == {
        "type": "STRING",
        "enum": ["metric", "imperial"],
        "format": "enum",
    }
    assert converted["parameters"]["required"] == ["query"]


@pytest.mark.parametrize("api", TOOL_APIS)
def test_a_tool_without_parameters_is_valid_in_each_form(api: str):
    for parameters in (None, {"type": "object", "properties": {}}):
        converted = convert_tool_definition(HostTool("ping", parameters).definition(turn()), api)  # type: ignore[arg-type]
        if api == "openai":
            assert converted == HostTool("ping", parameters).definition(turn())
        else:
            CHECKS[api](converted)
    assert "parameters" not in convert_tool_definition(
        HostTool("ping").definition(turn()),  # type: ignore[arg-type]
        "gemini",
    )


def test_a_name_or_schema_an_api_refuses_leaves_only_that_tool_out(
    caplog: pytest.LogCaptureFixture,
):
    registry = ToolRegistry()
    registry.register(HostTool("fine", {"type": "object", "properties": {"a": {"type": "string"}}}))
    registry.register(HostTool("1st-tool", {"type": "object", "properties": {}}))
    union = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    registry.register(HostTool("union", {"type": "object", "properties": {"v": union}}))
    registry.register(HostTool("dotted.name", {"type": "object", "properties": {}}))
    with caplog.at_level(logging.ERROR, logger="stm.tools"):
        gemini = registry.definitions(turn(), api="gemini")
        anthropic = registry.definitions(turn(), api="anthropic")
    assert [d["name"] for d in gemini] == ["fine", "dotted.name"]
    assert [d["name"] for d in anthropic] == ["fine", "1st-tool", "union"]
    assert len(registry.definitions(turn())) == 4
    logged = " ".join(r.getMessage() for r in caplog.records)
    assert "1st-tool has no gemini definition" in logged and "union" in logged


def test_an_unknown_api_or_a_definition_not_in_openai_form_is_refused():
    registry = ToolRegistry()
    with pytest.raises(ValueError, match="unknown tool API 'claude'"):
        registry.definitions(turn(), api="claude")
    with pytest.raises(ValueError, match="OpenAI"):
        convert_tool_definition({"name": "x", "input_schema": {}}, "gemini")
    with pytest.raises(ValueError, match="object schema"):
        convert_tool_definition(
            {"type": "function", "function": {"name": "x", "parameters": {"type": "string"}}},
            "anthropic",
        )


def test_conversion_does_not_change_the_definition_it_was_given():
    definition = HostTool("lookup", RICH).definition(turn())
    before = json.dumps(definition, sort_keys=True)
    for api in TOOL_APIS:
        converted = convert_tool_definition(definition, api)  # type: ignore[arg-type]
        json.dumps(converted)
    assert json.dumps(definition, sort_keys=True) == before


# -- any schema of the supported shapes converts validly ---------------------------------
NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
LEAVES = st.fixed_dictionaries(
    {"type": st.sampled_from(["string", "integer", "number", "boolean"])},
    optional={
        "description": st.text(max_size=20),
        "title": st.text(max_size=5),
        "default": st.none(),
        "minLength": st.integers(0, 3),
    },
)


def _object(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    return st.dictionaries(NAMES, children, min_size=1, max_size=4).flatmap(
        lambda props: st.fixed_dictionaries(
            {
                "type": st.just("object"),
                "properties": st.just(props),
                "additionalProperties": st.booleans(),
                "required": st.lists(st.sampled_from(sorted(props)), unique=True),
            }
        )
    )


SCHEMAS = st.recursive(
    st.one_of(LEAVES, LEAVES.map(lambda s: {"anyOf": [s, {"type": "null"}]})),
    lambda children: st.one_of(
        _object(children), children.map(lambda s: {"type": "array", "items": s})
    ),
    max_leaves=12,
)


@settings(max_examples=150)
@given(
    parameters=_object(SCHEMAS), name=st.from_regex(r"[A-Za-z_][A-Za-z0-9_-]{0,30}", fullmatch=True)
)
def test_property_any_supported_schema_is_valid_in_every_form(
    parameters: dict[str, Any], name: str
):
    definition = HostTool(name, parameters).definition(turn())
    assert definition is not None
    for api in TOOL_APIS:
        CHECKS[api](convert_tool_definition(definition, api))
