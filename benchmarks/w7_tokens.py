"""W7 tokens: what memory adds to each prompt, with and without a token budget.

Part 1 counts, per turn, the tokens of everything memory adds (the blocks, the
nudge and the tool's definition when offered) on two kinds of traffic: W6's
realistic servers (``w6_server.World``: a busy server and two small ones,
Zipf-active members in favourite channels, DMs, the stand-in model's upgrades
copying its prompt), and a mixed traffic of this module (``traffic``: 30
servers by Zipf, a third chatting in Japanese, notes every five turns of up to
1,500 characters, two servers with five categories). Each budget is one run of
the same traffic, counted by the library's estimate or (``1000 (cl100k)``) by an
exact tokenizer passed as the host's counter; every run is counted with the
estimate and, where ``bpe-openai`` is installed, exactly with ``cl100k_base`` and
``o200k_base``: p50, p99, mean and max per turn, and how many turns were cut. It
also prints the estimate's ratio to the exact counts on the test corpus.

Part 2 is W1's turn (as ``w1_parts``: ``TurnContext``, intent check,
``GenerationFinished``, ``capture``, ``build_context``) with budgeting off and
on, in one process, alternating repetitions on fresh databases: off (no
budget), on with a budget that never cuts (count and compare: the common case),
and on with a budget that cuts most turns. Per mode: the median over
repetitions of the per-turn p50 and mean in microseconds.

    python -m benchmarks.w7_tokens            # both parts
    python -m benchmarks.w7_tokens --quick    # small sizes
    python -m benchmarks.w7_tokens --part 2 --reps 9
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .common import median, percentile
from .database import memory_database, open_memory
from .w1_chat import CHANNELS_PER_SERVER, turns

WORDS_EN = [
    "the",
    "plan",
    "release",
    "friday",
    "database",
    "migration",
    "review",
    "deploy",
    "staging",
    "bug",
    "fix",
    "test",
    "meeting",
    "notes",
    "tomorrow",
    "channel",
    "alice",
    "bob",
    "weekend",
    "game",
    "raid",
    "boss",
    "loot",
    "party",
    "music",
    "playlist",
    "recipe",
    "dinner",
    "project",
    "deadline",
    "ticket",
    "issue",
    "server",
    "role",
    "event",
    "stream",
]
SENTENCES_JA = [
    "金曜日のリリース計画について話しました。",
    "明日の10時からミーティングですね。",
    "資料は共有ドライブに置いておきます。",
    "ボスの攻略はまた週末にやりましょう。",
    "新しいプレイリストを作ったので聞いてください。",
    "チケットは三件残っています。",
    "今日の夕飯はカレーにしました。",
    "イベントの参加者を募集しています。",
]


@dataclass(frozen=True)
class Event:
    server: int
    channel: int
    user: int
    japanese: bool
    text: str
    reply: str
    upgrade: str | None  # a summary the model writes this turn, or None


def _zipf(rng: random.Random, n: int, s: float = 1.1) -> int:
    weights = [1 / (k + 1) ** s for k in range(n)]
    return rng.choices(range(n), weights)[0]


def _message(rng: random.Random, japanese: bool) -> str:
    # Most chat lines are short; a few are paragraphs (lognormal lengths).
    size = max(1, min(120, int(rng.lognormvariate(2.0, 0.9))))
    if japanese:
        return "".join(rng.choice(SENTENCES_JA) for _ in range(max(1, size // 6)))
    return " ".join(rng.choice(WORDS_EN) for _ in range(size))


def traffic(turns_total: int, seed: int = 7) -> list[Event]:
    """Skewed server traffic: 30 servers (Zipf by activity), up to 12 channels and 40
    users each (Zipf), a third of the servers in Japanese, notes every 5 turns."""
    rng = random.Random(seed)
    events = []
    since: dict[tuple[int, int], int] = {}
    for _ in range(turns_total):
        server = _zipf(rng, 30, 1.2)
        channel = _zipf(rng, 12)
        user = _zipf(rng, 40, 1.3)
        japanese = server % 3 == 2
        key = (server, channel)
        since[key] = since.get(key, 0) + 1
        upgrade = None
        if since[key] >= 5:
            since[key] = 0
            size = rng.randint(200, 1500)
            parts: list[str] = []
            while sum(map(len, parts)) < size:
                parts.append(_message(rng, japanese))
            upgrade = "\n".join(parts)[:size]
        events.append(
            Event(
                server,
                channel,
                user,
                japanese,
                _message(rng, japanese),
                _message(rng, japanese),
                upgrade,
            )
        )
    return events


def exact_counters() -> dict[str, Callable[[str], int]]:
    """cl100k_base and o200k_base where bpe-openai is installed, else none."""
    try:
        import bpe_openai
    except ImportError:
        return {}
    out = {}
    for name in ("cl100k_base", "o200k_base"):
        encoding = bpe_openai.get_encoding(name)
        out[name] = lambda text, e=encoding: len(e.encode(text))
    return out


CATEGORY_SERVERS = (0, 1)  # the two busiest servers keep five categories


async def tokens_per_turn(
    events: list[Event], budget: int | None, budget_counter: str | None = None
) -> dict[str, Any]:
    """Run ``events`` under ``budget`` (counted by ``budget_counter``, else the estimate);
    per counter, the tokens memory added per turn."""
    from stm import (
        Category,
        DialogueMessage,
        GenerationFinished,
        ShortTermMemory,
        STMConfig,
        TurnContext,
        estimate_tokens,
    )

    counters: dict[str, Callable[[str], int]] = {"estimate": estimate_tokens}
    counters.update(exact_counters())
    counts: dict[str, list[int]] = {name: [] for name in counters}
    reported: list[int] = []
    dropped = 0
    async with memory_database("sqlite", "w7") as database:
        settings: dict[str, Any] = {"max_other_channels": 3}
        if budget is not None:
            settings["context_token_budget"] = budget
        exact = exact_counters().get(budget_counter or "")
        config = STMConfig(database=database, **settings)
        memory = await ShortTermMemory.open(config, token_counter=exact)
        try:
            labels = ["Topics", "Decisions", "People", "Plans", "Open questions"]
            categories = [Category(label, f"{label} of this conversation") for label in labels]
            for server in CATEGORY_SERVERS:
                await memory.set_categories(1 + server, categories)
            for event in events:
                ctx = TurnContext(
                    user_id=100_000 + event.server * 100 + event.user,
                    channel_id=10_000 + event.server * 100 + event.channel,
                    server_id=1 + event.server,
                    user_name=f"user{event.user}",
                    channel_name=f"chan-{event.channel}",
                    user_text=event.text,
                )
                context = await memory.build_context(ctx)
                schema = memory.tool_schema(ctx)
                parts = [block.text for block in context.blocks]
                if context.nudge:
                    parts.append(context.nudge)
                if schema is not None:
                    parts.append(json.dumps(schema))
                for name, count in counters.items():
                    counts[name].append(sum(map(count, parts)))
                if context.tokens is not None:
                    reported.append(context.tokens)
                dropped += bool(context.dropped)
                if event.upgrade and schema is not None:
                    if event.server in CATEGORY_SERVERS:
                        chunk = event.upgrade
                        arguments = {slug: chunk for slug in _slugs(schema)}
                    else:
                        arguments = {"summary": event.upgrade}
                    await memory.run_tool(ctx, arguments)
                said = [
                    DialogueMessage(role="user", content=event.text, author_id=ctx.user_id),
                    DialogueMessage(role="assistant", content=event.reply),
                ]
                await memory.capture(GenerationFinished(context=ctx, messages=said))
        finally:
            await memory.close()
    out: dict[str, Any] = {
        "budget": budget,
        "budget_counter": budget_counter or "estimate",
        "turns": len(events),
        "cut_turns": dropped,
    }
    for name, values in counts.items():
        out[name] = {
            "p50": median([float(v) for v in values]),
            "p99": percentile([float(v) for v in values], 99),
            "mean": statistics.fmean(values),
            "max": max(values),
        }
    if reported:
        recount = counts[budget_counter or "estimate"]
        assert reported == recount, "PromptContext.tokens differs from a recount"
        assert budget is None or max(reported) <= budget
    return out


def _slugs(schema: dict[str, Any]) -> list[str]:
    return list(schema["function"]["parameters"]["properties"])


def estimate_ratios() -> dict[str, dict[str, float]]:
    """The estimate over each exact count, on the test corpus, per language."""
    from pathlib import Path

    from stm import estimate_tokens

    corpus_file = Path(__file__).resolve().parent.parent / "tests" / "token_corpus.json"
    corpus: dict[str, str] = json.loads(corpus_file.read_text("utf-8"))
    out: dict[str, dict[str, float]] = {}
    for name, count in exact_counters().items():
        out[name] = {label: estimate_tokens(t) / count(t) for label, t in corpus.items()}
    return out


async def tokens_on_w6(
    users: int, n_turns: int, budget: int | None, budget_counter: str | None = None
) -> dict[str, Any]:
    """W6's realistic servers (``w6_server.World``: a busy server and two small ones,
    Zipf-active members in favourite channels, DMs, the stand-in model's upgrades),
    ``n_turns`` turns under ``budget``; per counter, the tokens memory added per turn."""
    from stm import (
        DialogueMessage,
        GenerationFinished,
        ShortTermMemory,
        STMConfig,
        TurnContext,
        estimate_tokens,
    )

    from .w6_server import UPGRADE_P, World, _words, model_summary

    counters: dict[str, Callable[[str], int]] = {"estimate": estimate_tokens}
    counters.update(exact_counters())
    counts: dict[str, list[int]] = {name: [] for name in counters}
    cut = 0
    world, rng = World(users), random.Random(11)
    async with memory_database("sqlite", "w7w6") as database:
        settings = {} if budget is None else {"context_token_budget": budget}
        config = STMConfig(database=database, **settings)
        exact = exact_counters().get(budget_counter or "")
        memory = await ShortTermMemory.open(config, token_counter=exact)
        try:
            for turn in range(1, n_turns + 1):
                m, server, channel = world.pick(rng, turn)
                said = f"u{m.user}n{m.said} {_words(rng, 12)}"
                ctx = TurnContext(
                    user_id=m.user,
                    channel_id=channel,
                    server_id=server,
                    user_name=f"member{m.user}",
                    channel_name=None if server is None else f"chan-{channel % 10_000}",
                    server_name=None if server is None else f"server-{server}",
                    user_text=said,
                )
                context = await memory.build_context(ctx)
                schema = memory.tool_schema(ctx)
                parts = [block.text for block in context.blocks]
                if context.nudge:
                    parts.append(context.nudge)
                if schema is not None:
                    parts.append(json.dumps(schema))
                for name, count in counters.items():
                    counts[name].append(sum(map(count, parts)))
                if context.tokens is not None:
                    assert context.tokens == counts[budget_counter or "estimate"][-1]
                    assert budget is None or context.tokens <= budget
                cut += bool(context.dropped)
                if rng.random() < UPGRADE_P and schema is not None:
                    summary = model_summary(rng, str(context), said)
                    await memory.run_tool(ctx, {"summary": summary})
                reply = f"ok {said.split()[0]} {_words(rng, 8)}"
                said_by = [
                    DialogueMessage(role="user", content=said, author_id=m.user),
                    DialogueMessage(role="assistant", content=reply),
                ]
                await memory.capture(GenerationFinished(context=ctx, messages=said_by))
                m.said += 1
        finally:
            await memory.close()
    out: dict[str, Any] = {
        "budget": budget,
        "budget_counter": budget_counter or "estimate",
        "turns": n_turns,
        "cut_turns": cut,
    }
    for name, values in counts.items():
        out[name] = {
            "p50": median([float(v) for v in values]),
            "p99": percentile([float(v) for v in values], 99),
            "mean": statistics.fmean(values),
            "max": max(values),
        }
    return out


def _table(title: str, rows: list[dict[str, Any]], counters: list[str]) -> None:
    print(title)
    print(f"{'budget':>18} {'counted by':>12} {'p50':>7} {'p99':>7} {'mean':>8} {'max':>7} cut")
    for row in rows:
        budget = row["budget"]
        label = "none" if budget is None else f"{budget} ({row['budget_counter'][:6]})"
        for name in counters:
            figures = row[name]
            print(
                f"{label:>18} {name:>12} {figures['p50']:>7.0f} {figures['p99']:>7.0f} "
                f"{figures['mean']:>8.1f} {figures['max']:>7} {row['cut_turns']}/{row['turns']}"
            )


# -- part 2: W1's turn with budgeting off and on -----------------------------------------
async def w1_once(budget: int | None, channels: int, per_channel: int) -> tuple[float, float]:
    """One W1 run (as w1_parts): per-turn p50 and mean, in microseconds."""
    from stm import DialogueMessage, GenerationFinished, TurnContext

    plan = turns(channels, per_channel)
    times: list[float] = []
    clock = time.perf_counter
    async with memory_database("sqlite", "w7w1") as database:
        settings = {} if budget is None else {"context_token_budget": budget}
        memory = await open_memory(database, **settings)
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
                ctx.explicit_memory_intent = gate.matches(turn.user)
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
                await memory.capture(event)
                await memory.build_context(ctx)
                times.append((clock() - t0) * 1e6)
        finally:
            await memory.close()
    return median(times), statistics.fmean(times)


async def w1_modes(reps: int, channels: int, per_channel: int) -> dict[str, dict[str, float]]:
    modes: dict[str, int | None] = {"off": None, "on, never cuts": 1_000_000, "on, cuts": 400}
    seen: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
    await w1_once(None, channels, per_channel)  # warm-up: imports, caches
    for _ in range(reps):
        for mode, budget in modes.items():  # alternating, so drift hits every mode alike
            seen[mode].append(await w1_once(budget, channels, per_channel))
    return {
        mode: {
            "p50_us": median([p50 for p50, _ in runs]),
            "mean_us": median([mean for _, mean in runs]),
        }
        for mode, runs in seen.items()
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes")
    parser.add_argument("--reps", type=int, default=0, help="W1 repetitions per mode")
    parser.add_argument("--part", choices=("1", "2", "both"), default="both")
    args = parser.parse_args(argv)
    n_turns = 1500 if args.quick else 6000
    reps = args.reps or (3 if args.quick else 7)
    w1_channels, w1_turns = (50, 10) if args.quick else (200, 25)
    if args.part in ("1", "both"):
        counters = ["estimate", *exact_counters()]
        runs: list[tuple[int | None, str | None]] = [(None, None), (2000, None), (1000, None)]
        runs += [(500, None)] + [(1000, name) for name in counters[1:]]
        users, w6_turns = (100, 1500) if args.quick else (400, 6000)
        rows = [asyncio.run(tokens_on_w6(users, w6_turns, b, by)) for b, by in runs]
        _table(
            f"W7 part 1a: W6 traffic ({users} members, {w6_turns} turns), tokens per turn",
            rows,
            counters,
        )
        events = traffic(n_turns)
        rows = [asyncio.run(tokens_per_turn(events, b, by)) for b, by in runs]
        _table(
            f"W7 part 1b: {n_turns} turns of mixed traffic (30 servers, Zipf, a third in "
            "Japanese, two with five categories), tokens per turn",
            rows,
            counters,
        )
        ratios = estimate_ratios()
        for name, by_language in ratios.items():
            shown = ", ".join(f"{label} {ratio:.2f}" for label, ratio in by_language.items())
            print(f"estimate / {name}: lowest {min(by_language.values()):.2f}; {shown}")
    if args.part in ("2", "both"):
        print(
            f"W7 part 2: W1 turn ({w1_channels} channels x {w1_turns} turns), "
            f"median of {reps} alternating runs per mode"
        )
        results = asyncio.run(w1_modes(reps, w1_channels, w1_turns))
        off = results["off"]
        for mode, figures in results.items():
            p50, mean = figures["p50_us"], figures["mean_us"]
            print(
                f"{mode:>16}: p50 {p50:.1f} us ({p50 / off['p50_us']:.3f}x), "
                f"mean {mean:.1f} us ({mean / off['mean_us']:.3f}x)"
            )


if __name__ == "__main__":
    main()
