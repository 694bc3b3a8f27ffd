"""The tool loop with the real ``openai`` client against a local OpenAI-compatible server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from discord_fakes import harness
from openai import AsyncOpenAI

from host.models import OpenAIChatModel
from host.pipeline import ChatPipeline
from host.prompt import assemble
from host.toolloop import run_tool_loop
from stm import PromptBlock, PromptContext, ToolRegistry, TurnContext


def tool_call(call_id: str, arguments: str, name: str = "update_short_term_memory") -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }


def completion(content: str | None, calls: list[dict] | None = None) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "local",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
            }
        ],
    }


class FakeEndpoint:
    """A chat-completions server that answers from a script and records each request."""

    def __init__(self, script: list[dict]) -> None:
        self.script = list(script)
        self.requests: list[dict] = []

    async def handle(self, request: web.Request) -> web.Response:
        self.requests.append(await request.json())
        if not self.script:
            return web.json_response(completion("(out of script)"))
        return web.json_response(self.script.pop(0))


@pytest.fixture
async def serve() -> AsyncIterator[Any]:
    runners: list[web.AppRunner] = []
    clients: list[AsyncOpenAI] = []

    async def start(script: list[dict]) -> tuple[FakeEndpoint, OpenAIChatModel]:
        endpoint = FakeEndpoint(script)
        app = web.Application()
        app.router.add_post("/v1/chat/completions", endpoint.handle)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        runners.append(runner)
        port = runner.addresses[0][1]
        client = AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="test", max_retries=0)
        clients.append(client)
        return endpoint, OpenAIChatModel(client, "local")

    yield start
    for client in clients:
        await client.close()
    for runner in runners:
        await runner.cleanup()


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def test_a_tool_call_upgrades_memory_and_the_reply_follows(tmp_path: Path, serve):
    endpoint, model = await serve(
        [
            completion(None, [tool_call("c1", json.dumps({"summary": "Alice plans Lisbon"}))]),
            completion("Have a great trip!"),
        ]
    )
    async with harness(tmp_path) as h:
        pipeline = ChatPipeline(h.bot, model, h.bot.tools)  # type: ignore[attr-defined]
        ctx = h.world.context(h.alice, h.general, "I'm off to Lisbon")
        record = await pipeline.run_turn(ctx, "I'm off to Lisbon")
        assert record.outcome.reply == "Have a great trip!"
        first, second = endpoint.requests
        assert first["model"] == "local"
        assert [t["function"]["name"] for t in first["tools"]] == ["update_short_term_memory"]
        assert first["messages"][-1] == {"role": "user", "content": "Alice: I'm off to Lisbon"}
        assert "Short-term memory updated" in tool_messages(second)[0]
        # The single-upgrade flag: the tool is no longer offered in the same turn.
        assert "tools" not in second
        entry = await h.memory.get_entry("shortterm:server:1100:1101")
        assert entry is not None and entry.summary == "Alice plans Lisbon"


async def test_malformed_and_repeated_calls_are_answered_not_raised(tmp_path: Path, serve):
    endpoint, model = await serve(
        [
            completion(None, [tool_call("c1", "{not json")]),
            completion(
                None,
                [
                    tool_call("c2", json.dumps({"summary": 42})),
                    tool_call("c3", json.dumps({"summary": "first good one"})),
                    tool_call("c4", json.dumps({"summary": "second one"})),
                    tool_call("c5", "{}", name="no_such_tool"),
                ],
            ),
            completion("Done."),
        ]
    )
    async with harness(tmp_path) as h:
        ctx = h.world.context(h.alice, h.general, "hello")
        messages = assemble("system", [{"role": "user", "content": "hello"}], PromptContext())
        outcome = await run_tool_loop(model, messages, h.bot.tools, ctx)  # type: ignore[attr-defined]
        assert outcome.reply == "Done."
        results = [(c.arguments, c.result.success) for c in outcome.tool_calls]
        assert [ok for _, ok in results] == [False, False, True, False, False]
        replies = tool_messages(endpoint.requests[2])
        assert len(replies) == 5 and "not available in this turn" in replies[4]
        assert "already updated" in replies[3]
        entry = await h.memory.get_entry("shortterm:server:1100:1101")
        assert entry is not None and entry.summary == "first good one"


async def test_iterations_are_bounded_and_a_text_answer_is_forced(tmp_path: Path, serve):
    looping = [completion(None, [tool_call(f"c{i}", "{}", name="echo")]) for i in range(3)]
    endpoint, model = await serve([*looping, completion("Finally.")])

    class Echo:
        name = "echo"

        def definition(self, ctx: TurnContext) -> dict:
            return {"type": "function", "function": {"name": "echo", "parameters": {}}}

        async def run(self, ctx: TurnContext, arguments: object):
            from stm import ToolResult

            return ToolResult(success=True, message="echo")

    tools = ToolRegistry()
    tools.register(Echo())
    ctx = TurnContext(user_id=1, channel_id=2)
    outcome = await run_tool_loop(model, [], tools, ctx, max_iterations=3)
    assert len(endpoint.requests) == 4 and outcome.model_calls == 4
    assert "tools" not in endpoint.requests[-1]
    assert outcome.reply == "Finally." and len(outcome.tool_calls) == 3


def test_blocks_are_placed_at_their_depths():
    conversation = [{"role": "user", "content": str(n)} for n in range(4)]
    context = PromptContext(
        blocks=[PromptBlock("top", -1), PromptBlock("two", 2)], nudge="nudge", nudge_depth=0
    )
    placed = [m["content"] for m in assemble("sys", conversation, context)]
    assert placed == ["sys", "top", "0", "1", "two", "2", "3", "nudge"]
    short = [m["content"] for m in assemble("sys", conversation[:1], context)]
    assert short == ["sys", "top", "two", "0", "nudge"]
