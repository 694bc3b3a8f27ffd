"""The host's tool registry: definitions and execution never let one tool take down the rest."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from stm import ToolRegistry, ToolResult, TurnContext


class Broken:
    """A tool whose definition raises."""

    name = "broken"

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        raise RuntimeError("no schema today")

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        return ToolResult(success=True, message="ran")


class Fine:
    """A tool that always works."""

    name = "fine"

    def definition(self, ctx: TurnContext) -> dict[str, Any] | None:
        return {"type": "function", "function": {"name": self.name}}

    async def run(self, ctx: TurnContext, arguments: object) -> ToolResult:
        return ToolResult(success=True, message="ran")


def test_a_failing_definition_is_logged_and_left_out(caplog: pytest.LogCaptureFixture) -> None:
    """definitions() answers with the other tools; the failure is logged with its traceback."""
    registry = ToolRegistry()
    registry.register(Broken())
    registry.register(Fine())
    with caplog.at_level(logging.ERROR, logger="stm.tools"):
        found = registry.definitions(TurnContext(user_id=1, channel_id=2))
    assert found == [{"type": "function", "function": {"name": "fine"}}]
    assert any("broken" in r.getMessage() and r.exc_info for r in caplog.records)
