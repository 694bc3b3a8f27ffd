"""Chat models the host can talk to: an OpenAI-compatible endpoint, or a scripted stand-in."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Protocol

from openai import AsyncOpenAI

from stm import TOOL_NAME

from .prompt import Message

__all__ = ["ChatModel", "ModelTurn", "OpenAIChatModel", "ScriptedModel", "ToolCall"]


@dataclass(frozen=True)
class ToolCall:
    """One tool call the model asked for; ``arguments`` is the raw JSON text it sent."""

    id: str
    name: str
    arguments: str


@dataclass
class ModelTurn:
    """What the model answered: text, tool calls, or both."""

    content: str | None
    tool_calls: list[ToolCall] = field(default_factory=list)


class ChatModel(Protocol):
    """A chat-completions model."""

    description: str

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> ModelTurn:
        """Answer ``messages``, maybe with calls to ``tools``."""
        ...

    async def close(self) -> None:
        """Release connections."""
        ...


class OpenAIChatModel:
    """A model behind any OpenAI-compatible endpoint (OpenAI, Ollama, vLLM, LM Studio, ...)."""

    def __init__(self, client: AsyncOpenAI, model: str) -> None:
        self.client = client
        self.model = model
        self.description = f"{model} at {client.base_url}"

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> ModelTurn:
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        response = await self.client.chat.completions.create(
            model=self.model,
            messages=messages,  # type: ignore[arg-type]
            **extra,
        )
        message = response.choices[0].message
        calls = [
            ToolCall(call.id, call.function.name, call.function.arguments or "")
            for call in message.tool_calls or []
            if call.type == "function"
        ]
        return ModelTurn(message.content, calls)

    async def close(self) -> None:
        await self.client.close()


_NAME_PREFIX = re.compile(r"^[^:\n]{1,64}: ")


class ScriptedModel:
    """A deterministic stand-in: answers briefly and calls the memory tool when nudged.

    It calls ``update_short_term_memory`` when the tool is offered and the
    prompt carries the cadence nudge, writing a summary of the user lines it
    saw (or filling every category the schema offers).
    """

    description = "the scripted stand-in model (no network)"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, messages: list[Message], tools: list[dict[str, Any]]) -> ModelTurn:
        self.calls += 1
        last = messages[-1]
        if last["role"] == "tool":
            return ModelTurn("Got it.")
        user_lines = [str(m["content"]) for m in messages if m["role"] == "user"]
        said = _NAME_PREFIX.sub("", user_lines[-1]) if user_lines else ""
        memory = [m for m in messages if m["role"] == "system" and "remember" in m["content"]]
        reply = f'You said "{said}".'
        if memory:
            reply += f" (I recall {len(memory)} memory note(s) from before.)"
        tool = next((t for t in tools if t["function"]["name"] == TOOL_NAME), None)
        nudged = any(m["role"] == "system" and TOOL_NAME in m["content"] for m in messages[1:])
        if tool is None or not nudged:
            return ModelTurn(reply)
        summary = "Recent topics: " + "; ".join(user_lines[-4:])
        properties = tool["function"]["parameters"].get("properties", {})
        arguments = {name: summary for name in properties} or {"summary": summary}
        call = ToolCall(f"call_{self.calls}", TOOL_NAME, json.dumps(arguments))
        return ModelTurn(reply, [call])

    async def close(self) -> None:
        return None
