"""The host's LLM tools: the ``Tool`` protocol and a ``ToolRegistry`` of them."""

from __future__ import annotations

import logging
from typing import Any, Protocol, runtime_checkable

from ._models import ToolResult, TurnContext
from ._tool.forms import TOOL_APIS, convert_tool_definition

__all__ = ["Tool", "ToolRegistry"]

log = logging.getLogger("stm.tools")


@runtime_checkable
class Tool(Protocol):
    """An LLM tool a host can offer to the model."""

    name: str

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        """Its OpenAI function-tool definition for this turn, or None when not available."""
        ...

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        """Run it with the arguments the model sent (a dict or the raw JSON string)."""
        ...


class ToolRegistry:
    """The tools a host offers, by name."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def register(self, tool: Tool) -> None:
        """Add ``tool``; a tool of the same name is replaced."""
        self._tools[tool.name] = tool

    def unregister(self, name: str) -> None:
        """Remove the tool called ``name`` (if present)."""
        self._tools.pop(name, None)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name``, or None."""
        return self._tools.get(name)

    def definitions(self, ctx: TurnContext, api: str = "openai") -> list[dict[str, Any]]:
        """The definitions of the tools available to this turn, in ``api``'s form.

        ``api`` is ``"openai"`` (function tools, the default), ``"anthropic"``
        (``{name, description, input_schema}``) or ``"gemini"`` (function declarations,
        sent as ``{"function_declarations": [...]}``); see ``stm.convert_tool_definition``.
        A tool whose definition fails, or cannot be put in that form, is logged and left
        out, so it cannot take the others down.
        """
        if api not in TOOL_APIS:
            raise ValueError(f"unknown tool API {api!r}: one of {', '.join(TOOL_APIS)}")
        found = []
        for tool in self._tools.values():
            try:
                definition = tool.definition(ctx)
                if definition is not None and api != "openai":
                    definition = convert_tool_definition(definition, api)
            except Exception:
                log.exception(
                    "tool %s has no %s definition (channel %s)", tool.name, api, ctx.channel_id
                )
                continue
            if definition is not None:
                found.append(definition)
        return found

    async def execute(self, name: str, ctx: TurnContext, arguments: object) -> ToolResult:
        """Run the tool ``name``; an unknown name or a crash is a failed result, not an error."""
        tool = self._tools.get(name)
        if tool is None:
            known = ", ".join(sorted(self._tools)) or "none"
            return ToolResult(success=False, message=f"Unknown tool {name!r}; available: {known}.")
        try:
            return await tool.run(ctx, arguments)
        except Exception:
            log.exception("tool %s failed (user %s, channel %s)", name, ctx.user_id, ctx.channel_id)
            return ToolResult(success=False, message=f"The tool {name} failed; it did nothing.")
