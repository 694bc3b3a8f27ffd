"""A bot-like process holding one ShortTermMemory open on a shared database, for every
test that needs another process (tests/bot_client.py starts and drives it).

    python tests/bot_process.py        (STM_* settings from the environment)

Test hooks, also from the environment: ``BOT_PROCESS_ABANDONED_SECONDS`` sets how often
the memory looks for purges another process left unfinished; ``BOT_PROCESS_CHUNKS=1``
makes every chunk of a purge's steps one row, so that a purge takes many steps.

Prints ``{"ready": true, "origin": ...}`` once open, then answers each JSON command on
stdin with one JSON line (``{"error": ...}`` if it failed) until ``quit`` or end of
input, and prints ``{"closed": true}`` after closing. Everything a turn captured lives
only in this process, as in a bot."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from typing import Any

import stm._memory as memory_module
from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm._keys import turn_keys
from stm.store import _chains as chains
from stm.store._base import SweepPurge


def _ctx(user: int, channel: int, server: int | None) -> TurnContext:
    return TurnContext(user_id=user, channel_id=channel, server_id=server, user_name=f"u{user}")


def _key(user: int, channel: int, server: int | None) -> str:
    user_k, server_k = turn_keys(user, channel, server, None)
    key = server_k or user_k
    assert key is not None
    return key


async def _shown(memory: ShortTermMemory, cmd: dict[str, Any]) -> str:
    """Everything this process would show for the turn: prompt context and its entry."""
    ctx = _ctx(cmd["user"], cmd["channel"], cmd.get("server"))
    context = await memory.build_context(ctx)
    parts = [block.text for block in context.blocks]
    entry = await memory.get_entry(_key(cmd["user"], cmd["channel"], cmd.get("server")))
    if entry is not None:
        parts.append(entry.summary or "")
        parts.extend(m.content for m in entry.messages)
        parts.extend(entry.categories.values())
    return "\n".join(parts)


async def _handle(memory: ShortTermMemory, cmd: dict[str, Any]) -> dict[str, Any]:
    op = cmd["op"]
    server = cmd.get("server")
    if op == "capture":
        ctx = _ctx(cmd["user"], cmd["channel"], server)
        await memory.capture(
            GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(
                        role="user",
                        content=cmd["text"],
                        author_id=cmd["user"],
                        speaker_name=f"u{cmd['user']}",
                    ),
                    DialogueMessage(role="assistant", content="ok", speaker_name="Bot"),
                ],
            )
        )
        return {}
    if op == "upgrade":
        ctx = _ctx(cmd["user"], cmd["channel"], server)
        await memory.build_context(ctx)
        result = await memory.run_tool(ctx, {"summary": cmd["summary"]})
        return {"success": result.success, "message": result.message}
    if op == "shown":
        return {"text": await _shown(memory, cmd)}
    if op == "wait_gone":
        # Poll what a turn would show until ``marker`` is gone; answer the wall time then.
        deadline = time.monotonic() + cmd.get("timeout", 10.0)
        while time.monotonic() < deadline:
            if cmd["marker"] not in await _shown(memory, cmd):
                return {"at": time.time()}
            await asyncio.sleep(0.002)
        return {"at": None}
    if op == "wait_shown":
        deadline = time.monotonic() + cmd.get("timeout", 10.0)
        while time.monotonic() < deadline:
            if cmd["marker"] in await _shown(memory, cmd):
                return {"at": time.time()}
            await asyncio.sleep(0.002)
        return {"at": None}
    if op == "purge":
        started = time.time()
        await memory.clear_short_term_memory_for_user(cmd["user"], server)
        await memory.flush()
        return {"started": started, "committed": time.time()}
    if op == "purge_then_die":
        # The process dies (no close, nothing more written) as its purge's first step after
        # the first transaction is about to run.
        run = memory.store.run

        async def dying(ops: list[Any]) -> list[Any]:
            if any(isinstance(o, SweepPurge) for o in ops):
                os._exit(9)
            return await run(ops)

        memory.store.run = dying  # type: ignore[method-assign]
        await memory.clear_short_term_memory_for_user(cmd["user"], server)
        raise AssertionError("the purge's later steps never ran")
    if op == "clear":
        started = time.time()
        await memory.clear_short_term_memory_for_channel(cmd["channel"])
        await memory.flush()
        return {"started": started, "committed": time.time()}
    if op == "opt_out":
        await memory.set_user_opt_out(cmd["user"], cmd["opted_out"])
        await memory.flush()
        return {}
    if op == "opted_out":
        return {"value": memory.is_opted_out(cmd["user"])}
    if op == "flush":
        await memory.flush()
        return {}
    if op == "caught_up":
        # Once the follower has read the feed up to what is committed now.
        target = await memory.store.current_position()
        for _ in range(2000):
            if memory.follower.position >= target:
                break
            await asyncio.sleep(0.005)
        await memory.background.gather()
        return {"position": memory.follower.position, "target": target}
    if op == "entries":
        # Every entry this process holds: key, summary, crude message texts.
        held = []
        for entry in list(memory.cache):
            held.append(
                {
                    "key": entry.key,
                    "summary": entry.summary,
                    "categories": dict(entry.categories),
                    "messages": [m.content for m in entry.messages],
                    "hydrated": entry.hydrated,
                }
            )
        return {"entries": held}
    if op == "drop_listener":
        await memory.store.drop_listener()  # type: ignore[attr-defined]
        return {}
    if op == "lose_wakeups":
        # Every wake-up is lost from now on (no NOTIFY arrives, data_version never seems
        # to move): only the follower's timed reads remain.
        store: Any = memory.store

        class _Deaf(asyncio.Event):
            def set(self) -> None:
                pass

        if hasattr(store, "_notified"):
            store._notified = _Deaf()
        else:

            async def never() -> bool:
                return False

            store.poll_changed = never
        return {}
    if op == "stats":
        return {
            "applied": memory.follower.applied,
            "dropped_caches": memory.follower.dropped_caches,
            "position": memory.follower.position,
        }
    raise ValueError(f"unknown op {op!r}")


def _test_hooks() -> None:
    if "BOT_PROCESS_ABANDONED_SECONDS" in os.environ:
        memory_module.ABANDONED_PURGE_SECONDS = float(os.environ["BOT_PROCESS_ABANDONED_SECONDS"])
    if os.environ.get("BOT_PROCESS_CHUNKS") == "1":
        for name in ("SEED_CHUNK", "FOLLOW_CHUNK", "SWEEP_CHUNK", "REACH_PAGE", "FINISH_CHUNK"):
            setattr(chains, name, 1)


async def main() -> None:
    _test_hooks()
    config = STMConfig()
    loop = asyncio.get_running_loop()
    async with ShortTermMemory.open(config) as memory:
        print(json.dumps({"ready": True, "origin": memory.store.origin}), flush=True)
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line:
                break
            cmd = json.loads(line)
            if cmd["op"] == "quit":
                break
            try:
                answer = await _handle(memory, cmd)
            except Exception as exc:  # reported to the test, which fails on it
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            print(json.dumps(answer), flush=True)
    print(json.dumps({"closed": True}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
