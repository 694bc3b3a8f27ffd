"""The LLM tool loop: ask the model, run the tools it calls, repeat a bounded number of times."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from stm import ToolRegistry, ToolResult, TurnContext

from .models import ChatModel
from .prompt import Message

__all__ = ["MAX_TOOL_ITERATIONS", "ToolCallRecord", "TurnOutcome", "run_tool_loop"]

log = logging.getLogger("host.toolloop")

MAX_TOOL_ITERATIONS = 4
FALLBACK_REPLY = "…"


@dataclass(frozen=True)
class ToolCallRecord:
    """A tool call of this turn and what it returned to the model."""

    name: str
    arguments: str
    result: ToolResult


@dataclass
class TurnOutcome:
    """The reply of one turn and the tool calls made on the way."""

    reply: str
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    model_calls: int = 0


async def run_tool_loop(
    model: ChatModel,
    messages: list[Message],
    tools: ToolRegistry,
    ctx: TurnContext,
    *,
    max_iterations: int = MAX_TOOL_ITERATIONS,
) -> TurnOutcome:
    """Run one turn to its text reply.

    Tools are offered afresh each iteration, so a tool that hides itself
    after use (the memory tool after its first successful upgrade) is gone
    from the next request. A failing or unknown tool call is answered with a
    failed result for the model to read, never raised. After
    ``max_iterations`` rounds with tool calls, one last request without
    tools forces a text answer.
    """
    messages = list(messages)
    outcome = TurnOutcome(reply="")
    text_so_far: list[str] = []
    for _ in range(max(1, max_iterations)):
        definitions = tools.definitions(ctx)
        turn = await model.complete(messages, definitions)
        outcome.model_calls += 1
        if turn.content:
            text_so_far.append(turn.content)
        if not turn.tool_calls:
            outcome.reply = "\n".join(text_so_far) or FALLBACK_REPLY
            return outcome
        offered = {d["function"]["name"] for d in definitions}
        messages.append(
            {
                "role": "assistant",
                "content": turn.content,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.name, "arguments": call.arguments},
                    }
                    for call in turn.tool_calls
                ],
            }
        )
        for call in turn.tool_calls:
            if call.name in offered:
                result = await tools.execute(call.name, ctx, call.arguments)
            else:
                result = ToolResult(
                    success=False, message=f"The tool {call.name!r} is not available in this turn."
                )
            log.debug("tool %s -> %s", call.name, result)
            outcome.tool_calls.append(ToolCallRecord(call.name, call.arguments, result))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result.message})
    final = await model.complete(messages, [])
    outcome.model_calls += 1
    if final.content:
        text_so_far.append(final.content)
    outcome.reply = "\n".join(text_so_far) or FALLBACK_REPLY
    return outcome
