"""W1's per-turn inputs alone: what a host builds before ``capture`` on every turn.

The same sequence as ``w1_chat.run_stm`` (a ``TurnContext`` of seven fields, the
host's intent check, ``GenerationFinished`` with two ``DialogueMessage``\\ s) over
the same texts, without the memory: the part of a turn that is the inputs' cost.
Each repetition uses a fresh intent gate, so no answer is remembered from an
earlier repetition. Run with ``python -m benchmarks.w1_inputs``; prints the
median microseconds per turn of each part and of the whole sequence.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from statistics import median
from types import ModuleType
from typing import Any

from .w1_chat import CHANNELS_PER_SERVER, Turn, turns


def parts(stm: ModuleType, plan: list[Turn]) -> dict[str, Callable[[], float]]:
    """Timers of each part and of the whole sequence, each over ``plan``: seconds per turn."""
    TurnContext = stm.TurnContext
    GenerationFinished = stm.GenerationFinished
    DialogueMessage = stm.DialogueMessage
    IntentGate = stm.IntentGate
    # The fields of each turn's context, as run_stm computes them (outside the clock here,
    # as the f-strings are the host's own work, not the library's).
    rows = [
        (
            10_000 + t.channel,
            1_000_000 + t.channel,
            500 + t.channel // CHANNELS_PER_SERVER,
            f"user{t.channel}",
            f"chan-{t.channel}",
            f"server-{t.channel // CHANNELS_PER_SERVER}",
            t.user,
            t.reply,
        )
        for t in plan
    ]
    n = len(rows)
    clock = time.perf_counter

    def context() -> float:
        start = clock()
        for uid, cid, sid, uname, cname, sname, user, _ in rows:
            TurnContext(
                user_id=uid, channel_id=cid, server_id=sid, user_name=uname,
                channel_name=cname, server_name=sname, user_text=user,
            )  # fmt: skip
        return (clock() - start) / n

    def matches() -> float:
        gate = IntentGate()
        start = clock()
        for row in rows:
            gate.matches(row[6])
        return (clock() - start) / n

    contexts = []
    for uid, cid, sid, uname, cname, sname, user, _ in rows:
        ctx = TurnContext(
            user_id=uid, channel_id=cid, server_id=sid, user_name=uname,
            channel_name=cname, server_name=sname, user_text=user,
        )  # fmt: skip
        contexts.append(ctx)

    def event() -> float:
        start = clock()
        for ctx, row in zip(contexts, rows, strict=True):
            GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(
                        role="user", content=row[6], author_id=ctx.user_id,
                        speaker_name=ctx.user_name,
                    ),
                    DialogueMessage(
                        role="assistant", content=row[7], author_id=None,
                        speaker_name=ctx.bot_name,
                    ),
                ],
            )  # fmt: skip
        return (clock() - start) / n

    def whole() -> float:
        gate = IntentGate()
        start = clock()
        for uid, cid, sid, uname, cname, sname, user, reply in rows:
            ctx = TurnContext(
                user_id=uid, channel_id=cid, server_id=sid, user_name=uname,
                channel_name=cname, server_name=sname, user_text=user,
            )  # fmt: skip
            ctx.explicit_memory_intent = gate.matches(user)
            GenerationFinished(
                context=ctx,
                messages=[
                    DialogueMessage(
                        role="user", content=user, author_id=ctx.user_id,
                        speaker_name=ctx.user_name,
                    ),
                    DialogueMessage(
                        role="assistant", content=reply, author_id=None,
                        speaker_name=ctx.bot_name,
                    ),
                ],
            )  # fmt: skip
        return (clock() - start) / n

    return {"context": context, "matches": matches, "event": event, "whole": whole}


def compare(packages: dict[str, ModuleType], repeats: int = 21) -> dict[str, dict[str, Any]]:
    """Median microseconds per turn of every part, for each package, runs interleaved."""
    plan = turns(200, 25)
    timers = {label: parts(pkg, plan) for label, pkg in packages.items()}
    seen: dict[str, dict[str, list[float]]] = {
        label: {part: [] for part in t} for label, t in timers.items()
    }
    gc.collect()
    for _ in range(repeats):
        for label, t in timers.items():
            for part, timer in t.items():
                seen[label][part].append(timer() * 1e6)
    return {
        label: {part: round(median(values), 3) for part, values in by_part.items()}
        for label, by_part in seen.items()
    }


if __name__ == "__main__":
    import stm

    for label, figures in compare({"stm": stm}).items():
        print(label, figures)
