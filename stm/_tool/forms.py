"""One tool definition in the form each model API wants: OpenAI, Anthropic, Gemini (pure).

Tools are defined once, in OpenAI's function-tool form
(``{"type": "function", "function": {"name", "description", "parameters"}}``);
``convert_tool_definition`` derives the others from it:

- Anthropic: ``{"name", "description", "input_schema"}``, the same JSON Schema
  (an object schema). Anthropic documents tool names as ``^[a-zA-Z0-9_-]{1,64}$``
  and ``input_schema`` as a JSON Schema whose ``type`` is ``object``
  (docs.anthropic.com, "Tool use with Claude: specifying tools").
- Gemini: a function declaration ``{"name", "description", "parameters"}`` whose
  ``parameters`` is a Gemini ``Schema``, "a select subset of an OpenAPI 3.0 schema
  object" (ai.google.dev/api/caching#Schema; Vertex AI REST reference, ``Schema`` and
  ``FunctionDeclaration``). Only the fields listed there that every Gemini API version
  accepts are kept (``GEMINI_SCHEMA_KEYS``); ``additionalProperties``, ``title``,
  ``$schema``, ``default`` and other JSON Schema keywords are dropped, types are the
  ``Type`` enum's names (``STRING``, ``OBJECT``, ...), a nullable union becomes
  ``nullable``, ``$ref`` into ``$defs`` is inlined, and an object without properties
  sends no ``parameters`` at all. Function names "must start with a letter or an
  underscore ... a-z, A-Z, 0-9, underscores, dots and dashes, with a maximum length
  of 64"; parameter names start with a letter or an underscore and use only a-z, A-Z,
  0-9 and underscores, at most 64.

What a form cannot say (Gemini has no ``additionalProperties``, no ``minProperties``
in every version) is still enforced: a tool parses its own arguments strictly
(``stm._tool.schema.parse_arguments`` refuses unknown fields and non-strings whatever
the schema sent said).
"""

from __future__ import annotations

import copy
import re
from typing import Any, Literal, get_args

__all__ = [
    "ANTHROPIC_NAME",
    "GEMINI_NAME",
    "GEMINI_PROPERTY_NAME",
    "GEMINI_SCHEMA_KEYS",
    "OPENAI_NAME",
    "TOOL_APIS",
    "ToolAPI",
    "convert_tool_definition",
]

ToolAPI = Literal["openai", "anthropic", "gemini"]
TOOL_APIS: tuple[str, ...] = get_args(ToolAPI)

# The documented name rules of each API.
OPENAI_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
ANTHROPIC_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
GEMINI_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
GEMINI_PROPERTY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")

# Gemini Schema fields kept: those of the documented subset that every API version
# (v1, v1beta, Vertex AI) has accepted; a newer field an older endpoint rejects is left out.
GEMINI_SCHEMA_KEYS = frozenset(
    {
        "type",
        "format",
        "description",
        "nullable",
        "enum",
        "items",
        "properties",
        "required",
        "minItems",
        "maxItems",
        "minimum",
        "maximum",
    }
)
_GEMINI_TYPES = {
    "string": "STRING",
    "number": "NUMBER",
    "integer": "INTEGER",
    "boolean": "BOOLEAN",
    "array": "ARRAY",
    "object": "OBJECT",
}
# Gemini documents these string formats for function parameters; others are dropped.
_GEMINI_FORMATS = {"STRING": {"enum", "date-time"}, "NUMBER": {"float", "double"},
                   "INTEGER": {"int32", "int64"}}  # fmt: skip
_MAX_NESTING = 32


class _Unsupported(ValueError):
    pass


def _openai_function(definition: object) -> dict[str, Any]:
    if not isinstance(definition, dict) or definition.get("type") != "function":
        raise ValueError('a tool definition must be OpenAI\'s {"type": "function", ...} form')
    function = definition.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise ValueError('a tool definition needs "function" with a string "name"')
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise ValueError(f"tool {function['name']}: parameters must be an object schema")
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"tool {function['name']}: description must be a string")
    return {"name": function["name"], "description": description, "parameters": parameters}


def _check_name(name: str, pattern: re.Pattern[str], api: str) -> None:
    if pattern.fullmatch(name) is None:
        raise ValueError(f"tool name {name!r} is not valid for {api} ({pattern.pattern})")


def _resolve(schema: dict[str, Any], defs: dict[str, Any], depth: int) -> dict[str, Any]:
    ref = schema.get("$ref")
    if ref is None:
        return schema
    prefix = "#/$defs/"
    if not isinstance(ref, str) or not ref.startswith(prefix) or ref[len(prefix) :] not in defs:
        raise _Unsupported(f"$ref {ref!r} (only #/$defs/... can be inlined)")
    if depth > _MAX_NESTING:
        raise _Unsupported("a recursive $ref")
    target = defs[ref[len(prefix) :]]
    if not isinstance(target, dict):
        raise _Unsupported(f"$ref {ref!r} is not a schema")
    merged = {**target, **{k: v for k, v in schema.items() if k != "$ref"}}
    return _resolve(merged, defs, depth + 1)


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """``anyOf: [X, {"type": "null"}]`` and ``type: [X, "null"]`` as X with ``nullable``."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        kept = [o for o in options if not (isinstance(o, dict) and o.get("type") == "null")]
        if len(kept) != 1 or not isinstance(kept[0], dict):
            raise _Unsupported("anyOf of several schemas")
        rest = {k: v for k, v in schema.items() if k != "anyOf"}
        merged = {**kept[0], **rest}
        if len(kept) < len(options):
            merged["nullable"] = True
        return merged
    kind = schema.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k != "null"]
        if len(kinds) != 1:
            raise _Unsupported(f"a type of several kinds {kind!r}")
        merged = {**schema, "type": kinds[0]}
        if len(kinds) < len(kind):
            merged["nullable"] = True
        return merged
    return schema


def _gemini_schema(schema: object, defs: dict[str, Any], depth: int = 0) -> dict[str, Any]:
    if depth > _MAX_NESTING:
        raise _Unsupported("a schema nested too deeply")
    if not isinstance(schema, dict):
        raise _Unsupported(f"a schema that is not an object ({type(schema).__name__})")
    schema = _nullable(_resolve(schema, defs, depth))
    if "const" in schema and "enum" not in schema:
        schema = {**schema, "enum": [schema["const"]]}
    kind = _GEMINI_TYPES.get(schema.get("type", ""))
    if kind is None:
        raise _Unsupported(f"type {schema.get('type')!r}")
    out: dict[str, Any] = {"type": kind}
    for key, value in schema.items():
        if key not in GEMINI_SCHEMA_KEYS or key == "type":
            continue
        if key == "properties":
            if not isinstance(value, dict):
                raise _Unsupported("properties that are not an object")
            for name in value:
                if not isinstance(name, str) or GEMINI_PROPERTY_NAME.fullmatch(name) is None:
                    raise _Unsupported(f"parameter name {name!r} ({GEMINI_PROPERTY_NAME.pattern})")
            out[key] = {name: _gemini_schema(sub, defs, depth + 1) for name, sub in value.items()}
        elif key == "items":
            out[key] = _gemini_schema(value, defs, depth + 1)
        elif key == "enum":
            # Gemini's enum holds strings (with format "enum" on a STRING).
            out[key] = [str(v) for v in value]
            if kind == "STRING":
                out["format"] = "enum"
        elif key == "format":
            if value in _GEMINI_FORMATS.get(kind, set()):
                out.setdefault(key, value)
        else:
            out[key] = copy.deepcopy(value)
    if kind == "OBJECT" and "required" in out:
        known = set(out.get("properties", {}))
        out["required"] = [name for name in out["required"] if name in known]
    return out


def _gemini(function: dict[str, Any]) -> dict[str, Any]:
    _check_name(function["name"], GEMINI_NAME, "gemini")
    parameters = function["parameters"]
    declaration: dict[str, Any] = {"name": function["name"], "description": function["description"]}
    defs = parameters.get("$defs", {})
    try:
        converted = _gemini_schema(parameters, defs if isinstance(defs, dict) else {})
    except _Unsupported as exc:
        raise ValueError(f"tool {function['name']}: Gemini cannot take {exc}") from None
    # An OBJECT without properties is refused: a function without parameters sends none.
    if converted.get("properties"):
        declaration["parameters"] = converted
    return declaration


def _anthropic(function: dict[str, Any]) -> dict[str, Any]:
    _check_name(function["name"], ANTHROPIC_NAME, "anthropic")
    schema = copy.deepcopy(function["parameters"])
    schema["type"] = "object"
    return {
        "name": function["name"],
        "description": function["description"],
        "input_schema": schema,
    }


def convert_tool_definition(definition: dict[str, Any], api: str) -> dict[str, Any]:
    """``definition`` (OpenAI function-tool form) in ``api``'s form, as a new dict.

    ``api`` is ``"openai"`` (a copy), ``"anthropic"`` or ``"gemini"`` (a function
    declaration: send a list of them as ``{"function_declarations": [...]}``). Raises
    ``ValueError`` for an unknown API, a definition that is not in OpenAI form, a name
    the API refuses, or a schema it cannot express.
    """
    if api not in TOOL_APIS:
        raise ValueError(f"unknown tool API {api!r}: one of {', '.join(TOOL_APIS)}")
    function = _openai_function(definition)
    if api == "openai":
        return copy.deepcopy(definition)
    if api == "anthropic":
        return _anthropic(function)
    return _gemini(function)
