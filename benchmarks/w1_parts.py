"""W1's turn, part by part: where the microseconds of one turn go.

The same turns and calls as ``w1_chat.run_stm`` (200 channels × 25 turns), each
part timed on its own: building the ``TurnContext``, the host's intent check,
building ``GenerationFinished`` with its two ``DialogueMessage``s, ``capture``,
``build_context`` and turning the context into text. Run with
``python -m benchmarks.w1_parts [repetitions]``; prints, per part, the median
over repetitions (each in this process, on a fresh database) of the part's p50
and mean in microseconds.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from typing import Any

from .database import memory_database, open_memory
from .w1_chat import CHANNELS_PER_SERVER, turns

PARTS = ("context", "intent", "event", "capture", "build_context", "text", "turn")


async def once(channels: int = 200, per_channel: int = 25) -> dict[str, list[float]]:
    """One run of every turn; each part's seconds per turn."""
    from stm import DialogueMessage, GenerationFinished, TurnContext

    plan = turns(channels, per_channel)
    times: dict[str, list[float]] = {part: [] for part in PARTS}
    clock = time.perf_counter
    async with memory_database("sqlite", "w1parts") as database:
        memory = await open_memory(database)
        try:
            gate = memory.intent_gate
            for turn in plan:
                c = turn.channel
                user_id, server = 10_000 + c, c // CHANNELS_PER_SERVER
                t0 = clock()
                ctx = TurnContext(
                    user_id=user_id,
                    channel_id=1_000_000 + c,
                    server_id=500 + server,
                    user_name=f"user{c}",
                    channel_name=f"chan-{c}",
                    server_name=f"server-{server}",
                    user_text=turn.user,
                )
                t1 = clock()
                ctx.explicit_memory_intent = gate.matches(turn.user)
                t2 = clock()
                event = GenerationFinished(
                    context=ctx,
                    messages=[
                        DialogueMessage(
                            role="user", content=turn.user, author_id=user_id,
                            speaker_name=ctx.user_name,
                        ),
                        DialogueMessage(
                            role="assistant", content=turn.reply, speaker_name=ctx.bot_name
                        ),
                    ],
                )  # fmt: skip
                t3 = clock()
                await memory.capture(event)
                t4 = clock()
                context = await memory.build_context(ctx)
                t5 = clock()
                str(context)
                t6 = clock()
                marks = (t0, t1, t2, t3, t4, t5, t6)
                for part, start, end in zip(PARTS, marks, marks[1:], strict=False):
                    times[part].append(end - start)
                times["turn"].append(t6 - t0)
        finally:
            await memory.close()
    return times


def main(repetitions: int = 5) -> dict[str, Any]:
    runs = [asyncio.run(once()) for _ in range(repetitions)]
    out: dict[str, Any] = {}
    for part in PARTS:
        p50 = statistics.median(statistics.median(run[part]) for run in runs) * 1e6
        mean = statistics.median(statistics.fmean(run[part]) for run in runs) * 1e6
        out[part] = {"p50_us": round(p50, 2), "mean_us": round(mean, 2)}
        print(f"{part:14} p50 {p50:6.2f} µs   mean {mean:6.2f} µs")
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
