"""A bot-like process holding a memory open; tests drive it line by line over stdin.

    python tests/memory_process.py        (STM_* settings from the environment)

Prints ``ready`` once open, then answers each JSON command on stdin with one JSON
line: ``turn`` (capture a user's message and the reply), ``upgrade`` (run the tool),
``context`` (the rendered Short-Term Memory Context of a turn, and ``get_entry`` of
its keys), ``close``. Everything a turn captured lives only in this process, as in a
bot.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm.keys import turn_keys


def context(command: dict[str, Any]) -> TurnContext:
    return TurnContext(
        user_id=command["user"],
        channel_id=command["channel"],
        server_id=command.get("server"),
        user_text=command.get("text", ""),
    )


async def answer(memory: ShortTermMemory, command: dict[str, Any]) -> dict[str, Any]:
    ctx = context(command)
    match command["op"]:
        case "turn":
            await memory.capture(
                GenerationFinished(
                    context=ctx,
                    messages=[
                        DialogueMessage(
                            role="user",
                            content=command["text"],
                            author_id=ctx.user_id,
                            speaker_name=f"user{ctx.user_id}",
                        ),
                        DialogueMessage(role="assistant", content="ok", speaker_name="Bot"),
                    ],
                )
            )
            return {"ok": True}
        case "upgrade":
            result = await memory.run_tool(ctx, {"summary": command["summary"]})
            return {"ok": result.success, "message": result.message}
        case "context":
            built = await memory.build_context(ctx)
            entries = []
            for key in turn_keys(ctx.user_id, ctx.channel_id, ctx.server_id, ctx.persona_id):
                entry = None if key is None else await memory.get_entry(key)
                if entry is not None:
                    entries.append(entry.model_dump_json())
            return {"text": "\n".join(b.text for b in built.blocks), "entries": entries}
    raise ValueError(f"unknown command {command!r}")


async def main() -> None:
    memory = await ShortTermMemory.open(STMConfig())
    print("ready", flush=True)
    loop = asyncio.get_running_loop()
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = json.loads(line)
            if command["op"] == "close":
                break
            print(json.dumps(await answer(memory, command)), flush=True)
    finally:
        await memory.close()
    print(json.dumps({"closed": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
