"""W1's turn, part by part: where the microseconds of one turn go.

The same turns and calls as ``w1_chat.run_stm`` (200 channels × 25 turns), each
part timed on its own: building the ``TurnContext``, the host's intent check,
building ``GenerationFinished`` with its two ``DialogueMessage``s, ``capture``,
``build_context`` and turning the context into text. Run with
``python -m benchmarks.w1_parts [repetitions]``; prints, per part, the median
over repetitions (each in this process, on a fresh database) of the part's p50
and mean in microseconds.

Each repetition runs every turn three times, one variant after the other turn by turn,
so that the columns come from the same run and the machine's load falls on all alike (a
discord.py client holds W1's servers in all three, as a bot's cache does): as a host
without an audience; with the cog's (``DiscordAudience`` over a discord.py client
holding W1's servers, built from gateway payloads: public channels, as W1's are); and with
the cog's on locked servers (in each, eight chat channels synced to a category that hides
them from a muted role, and two staff channels; the audience refuses the staff channels'
memory in chat and the chat's in the staff channels, so prompts ask it more than once).
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import sys
import time
from typing import Any

from .database import memory_database
from .w1_chat import CHANNELS_PER_SERVER, turns

PARTS = ("context", "intent", "event", "capture", "build_context", "text", "turn")


def _servers(client: Any, channels: int, *, locked: bool) -> None:
    """W1's servers in ``client``'s cache, as the gateway would bring them."""
    from .audience import CATEGORY, TEXT, VIEW, Server, channel, load, overwrite, role

    for server in range((channels + CHANNELS_PER_SERVER - 1) // CHANNELS_PER_SERVER):
        g = 500 + server
        muted, staff = 9_000_000 + 2 * server, 9_000_001 + 2 * server
        hidden = [overwrite(muted, 0, deny=VIEW)] if locked else []
        staff_only = [overwrite(g, 0, deny=VIEW), overwrite(staff, 0, allow=VIEW)]
        staff_only = staff_only if locked else []
        made = Server(g, VIEW, roles=[role(muted, "muted", 0), role(staff, "staff", VIEW)])
        category = 8_000_000 + server
        made.channels.append(channel(category, g, CATEGORY, hidden))
        for c in range(server * CHANNELS_PER_SERVER, (server + 1) * CHANNELS_PER_SERVER):
            rule = hidden if c % CHANNELS_PER_SERVER < 8 else staff_only
            made.channels.append(channel(1_000_000 + c, g, TEXT, rule, category))
        load(client, made)


VARIANTS = ("without an audience", "the cog's audience", "the cog's, locked servers")


async def once(channels: int = 200, per_channel: int = 25) -> list[dict[str, list[float]]]:
    """One run of every turn in each variant (of VARIANTS), turn by turn in turn, so that
    a change in the machine's load falls on all alike; each part's seconds per turn."""
    import discord

    from cogs._utils.audience import DiscordAudience
    from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext

    plan = turns(channels, per_channel)
    times: list[dict[str, list[float]]] = [{part: [] for part in PARTS} for _ in VARIANTS]
    clock = time.perf_counter
    # The bot's cache holds the servers in every variant, as a bot's does.
    public = discord.Client(intents=discord.Intents.all())
    locked = discord.Client(intents=discord.Intents.all())
    _servers(public, channels, locked=False)
    _servers(locked, channels, locked=True)
    async with contextlib.AsyncExitStack() as stack:
        memories = []
        for variant, client in enumerate((public, public, locked)):
            database = await stack.enter_async_context(memory_database("sqlite", f"w1p{variant}"))
            audience = DiscordAudience(client) if variant else None
            memory = await ShortTermMemory.open(STMConfig(database=database), audience=audience)
            stack.push_async_callback(memory.close)
            memories.append(memory)
        stack.push_async_callback(public.close)
        stack.push_async_callback(locked.close)
        order = list(range(len(VARIANTS)))
        for turn in plan:
            order = order[1:] + order[:1]  # each variant first as often as the others
            for variant in order:
                memory = memories[variant]
                gate = memory.intent_gate
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
                mine = times[variant]
                for part, start, end in zip(PARTS, marks, marks[1:], strict=False):
                    mine[part].append(end - start)
                mine["turn"].append(t6 - t0)
    return times


def main(repetitions: int = 5) -> dict[str, Any]:
    runs: list[list[dict[str, list[float]]]] = [[] for _ in VARIANTS]
    for _ in range(repetitions):
        for variant, times in enumerate(asyncio.run(once())):
            runs[variant].append(times)
    out: dict[str, Any] = {name: {} for name in VARIANTS}
    print(f"{'':14}" + "".join(f"{name:>30}" for name in VARIANTS))
    for part in PARTS:
        row = []
        for name, run in zip(VARIANTS, runs, strict=True):
            p50 = statistics.median(statistics.median(r[part]) for r in run) * 1e6
            mean = statistics.median(statistics.fmean(r[part]) for r in run) * 1e6
            out[name][part] = {"p50_us": round(p50, 2), "mean_us": round(mean, 2)}
            row.append(f"p50 {p50:6.2f}  mean {mean:6.2f}")
        print(f"{part:14}" + "".join(f"{cell:>30}" for cell in row))
    print("(µs per turn: the median over repetitions of each run's p50 and mean)")
    return out


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
