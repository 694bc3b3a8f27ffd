"""The ``update_short_term_memory`` tool: its schema and strict parsing of what the model sends.

The schema is generated from pydantic models built per server: one required
``summary`` in summary mode, one optional string per category otherwise.
``extra="forbid"`` becomes ``additionalProperties: false`` and strict
strings refuse numbers, lists and null instead of converting them. A
category's slug is only the alias of its field, whose own name (``f0``,
``f1``, ...) cannot collide with anything of the model class, whatever the
label (``model_config``, ``model_dump``).
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, StrictStr, ValidationError, create_model

from .._frames import frames_for
from .._models import Category, is_summary_mode
from .._slugs import slugs_for
from .._text import clean_value, one_line, visible
from . import TOOL_NAME

__all__ = [
    "MAX_RAW_ARGUMENTS",
    "DuplicateKeyError",
    "arguments_model",
    "definition_json",
    "loads_strict",
    "parse_arguments",
    "tool_definition",
]

# Anything larger is refused before parsing: a summary is at most a few kilobytes.
MAX_RAW_ARGUMENTS = 256 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, title=TOOL_NAME)


@functools.lru_cache(maxsize=512)
def arguments_model(
    categories: tuple[Category, ...], max_length: int, language: str = "en"
) -> type[BaseModel]:
    """The pydantic model of the tool's arguments for a server's categories (its field
    descriptions in ``language``; parsing is the same in every language)."""
    frames = frames_for(language)
    if is_summary_mode(categories):
        description = frames.text("summary_field", limit=max_length)
        return create_model(
            "SummaryUpdate", __base__=_Strict, summary=(StrictStr, Field(description=description))
        )
    fields: dict[str, Any] = {}
    slugs = slugs_for(c.label for c in categories)
    for n, (slug, category) in enumerate(zip(slugs, categories, strict=True)):
        text = category.description or category.label
        description = frames.text(
            "category_field", label=category.label, text=text, limit=max_length
        )
        fields[f"f{n}"] = (StrictStr, Field(default=None, alias=slug, description=description))
    return create_model("CategoryUpdate", __base__=_Strict, **fields)


@functools.lru_cache(maxsize=512)
def _names(model: type[BaseModel]) -> tuple[str, ...]:
    """The argument names the model sees (aliases where a field has one)."""
    return tuple(info.alias or name for name, info in model.model_fields.items())


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    schema = model.model_json_schema()
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)
        prop.pop("default", None)
    if "required" not in schema:
        schema["minProperties"] = 1
    return schema


@functools.lru_cache(maxsize=512)
def _definition_json(
    categories: tuple[Category, ...], max_length: int, description: str | None, language: str
) -> str:
    definition = {
        "type": "function",
        "function": {
            "name": TOOL_NAME,
            "description": description or frames_for(language).text("tool_description"),
            "parameters": _schema(arguments_model(categories, max_length, language)),
        },
    }
    return json.dumps(definition)


def definition_json(
    categories: tuple[Category, ...],
    max_length: int,
    description: str | None = None,
    language: str = "en",
) -> str:
    """The tool in OpenAI function-tool form as JSON (the same string for the same values)."""
    return _definition_json(categories, max_length, description, language)


def tool_definition(
    categories: tuple[Category, ...],
    max_length: int,
    description: str | None = None,
    language: str = "en",
) -> dict[str, Any]:
    """The tool in OpenAI function-tool form (a fresh dict the caller may change), its
    descriptions in ``language`` (a server's own ``description`` as it is)."""
    raw = _definition_json(categories, max_length, description, language)
    loaded: dict[str, Any] = json.loads(raw)
    return loaded


class DuplicateKeyError(ValueError):
    """A JSON object names one key twice: which value was meant cannot be told."""

    def __init__(self, key: str) -> None:
        super().__init__(f"the key {key!r} appears more than once")
        self.key = key


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    found = dict(pairs)
    if len(found) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKeyError(key)
            seen.add(key)
    return found


def loads_strict(text: str | bytes | bytearray) -> Any:
    """``json.loads``, refusing an object that names a key twice (``DuplicateKeyError``):
    the standard parser keeps the last value, pydantic's too, and the model may have
    meant the first."""
    return json.loads(text, object_pairs_hook=_unique_pairs)


def _explain(exc: ValidationError, model: type[BaseModel]) -> str:
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "arguments"
        kind = error["type"]
        if kind == "extra_forbidden":
            problems.append(f"unknown field '{where}'")
        elif kind == "missing":
            problems.append(f"missing required field '{where}'")
        elif kind in ("string_type", "model_type", "model_attributes_type"):
            got = type(error.get("input")).__name__
            got = {
                "NoneType": "null",
                "int": "a number",
                "float": "a number",
                "list": "a list",
                "dict": "an object",
                "bool": "a boolean",
            }.get(got, got)
            target = "a JSON object" if kind != "string_type" else "a string"
            problems.append(f"'{where}' must be {target}, not {got}")
        else:
            problems.append(f"'{where}': {error['msg']}")
    fields = ", ".join(f'"{name}": "..."' for name in _names(model))
    return (
        f"{TOOL_NAME} was not applied: {'; '.join(problems)}. "
        f"Call it again with a JSON object of string values, like {{{fields}}}."
    )


def parse_arguments(
    model: type[BaseModel], arguments: object, max_length: int
) -> dict[str, str] | str:
    """The cleaned, non-blank values the model sent, or a message telling it what to fix."""
    try:
        if isinstance(arguments, str | bytes | bytearray):
            if len(arguments) > MAX_RAW_ARGUMENTS:
                return (
                    f"{TOOL_NAME} was not applied: the arguments are too large "
                    f"({len(arguments)} characters). Send at most {max_length} characters "
                    "per field."
                )
            try:
                loaded = loads_strict(arguments)
            except DuplicateKeyError as exc:
                return (
                    f"{TOOL_NAME} was not applied: the field {one_line(exc.key)[:100]!r} "
                    "appears more than once in the arguments. Send each field once."
                )
            except json.JSONDecodeError:
                return (
                    f"{TOOL_NAME} was not applied: the arguments are not valid JSON. "
                    "Send a JSON object of string values."
                )
            except RecursionError:
                return (
                    f"{TOOL_NAME} was not applied: the arguments are not valid JSON (nested "
                    "too deeply). Send a JSON object of string values."
                )
            parsed = model.model_validate(loaded)
        elif isinstance(arguments, dict):
            parsed = model.model_validate(arguments)
        else:
            return (
                f"{TOOL_NAME} was not applied: the arguments must be a JSON object, "
                f"not {type(arguments).__name__}."
            )
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            return (
                f"{TOOL_NAME} was not applied: the arguments are not valid JSON. "
                "Send a JSON object of string values."
            )
        return _explain(exc, model)
    except (RecursionError, UnicodeDecodeError, ValueError) as exc:
        return f"{TOOL_NAME} was not applied: unreadable arguments ({type(exc).__name__})."
    values: dict[str, str] = {}
    for name, value in zip(_names(model), (value for _, value in parsed), strict=True):
        if isinstance(value, str):
            cleaned = clean_value(value, max_length)
            if visible(cleaned):
                values[name] = cleaned
    if not values:
        fields = ", ".join(f"'{name}'" for name in _names(model))
        return (
            f"{TOOL_NAME} was not applied: at least one field must have non-blank text "
            f"({fields}); spaces and invisible characters (zero-width spaces, joiners) alone "
            "count as blank."
        )
    return values
