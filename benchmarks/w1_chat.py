"""W1 chat turns: record each turn, then read back what goes into the next prompt.

Channels take turns interleaved (turn 0 of every channel, then turn 1, ...).
Each system's inputs are built before the clock starts (every system gets its
own native message objects), so the figure is the memory layer's cost alone.
The final window of every channel is checked against the expected messages.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from .common import median, percentile, scratch_dir, text

WINDOW = 10  # messages kept per channel: the library's default max_messages_per_channel
CHANNELS_PER_SERVER = 10
BOT_ID = 1


@dataclass(frozen=True)
class Turn:
    channel: int  # 0-based channel number
    index: int  # the channel's turn number
    user: str
    reply: str


def turns(channels: int, per_channel: int) -> list[Turn]:
    """Every turn, interleaved across channels."""
    return [
        Turn(c, t, text(f"u{c}.{t}", 120), text(f"r{c}.{t}", 240))
        for t in range(per_channel)
        for c in range(channels)
    ]


def expected_window(channel: int, per_channel: int) -> list[str]:
    """The contents the channel's window must hold at the end, oldest first."""
    out: list[str] = []
    for t in range(per_channel):
        out += [text(f"u{channel}.{t}", 120), text(f"r{channel}.{t}", 240)]
    return out[-WINDOW:]


async def _timed(steps: list[Callable[[], Awaitable[Any]]]) -> tuple[float, list[float]]:
    """Run the turn steps in order; total seconds and each step's microseconds."""
    latencies: list[float] = []
    clock = time.perf_counter
    start = clock()
    for step in steps:
        t0 = clock()
        await step()
        latencies.append((clock() - t0) * 1e6)
    return clock() - start, latencies


def _summary(total: float, latencies: list[float], n: int) -> dict[str, Any]:
    return {
        "us_per_turn": total / n * 1e6,
        "p50_us": median(latencies),
        "p99_us": percentile(latencies, 99),
        "turns": n,
    }


# -- this project ----------------------------------------------------------------
async def run_stm_restarted(channels: int, per_channel: int) -> dict[str, Any]:
    """The same turns on a database another process already filled (a bot restart):
    every channel's keys have rows, so each first turn reads them."""
    return await run_stm(channels, per_channel, restarted=True)


async def run_stm(channels: int, per_channel: int, restarted: bool = False) -> dict[str, Any]:
    from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
    from stm.keys import server_key

    plan = turns(channels, per_channel)
    build_start = time.perf_counter()
    inputs = []
    for turn in plan:
        c = turn.channel
        ctx = TurnContext(
            user_id=10_000 + c,
            channel_id=1_000_000 + c,
            server_id=500 + c // CHANNELS_PER_SERVER,
            user_name=f"user{c}",
            channel_name=f"chan-{c}",
            server_name=f"server-{c // CHANNELS_PER_SERVER}",
            user_text=turn.user,
        )
        event = GenerationFinished(
            context=ctx,
            messages=[
                DialogueMessage(
                    role="user", content=turn.user, author_id=10_000 + c, speaker_name=f"user{c}"
                ),
                DialogueMessage(
                    role="assistant", content=turn.reply, author_id=BOT_ID, speaker_name="Bot"
                ),
            ],
        )
        inputs.append((ctx, event))
    build_us = (time.perf_counter() - build_start) / len(plan) * 1e6

    with scratch_dir() as folder:
        config = STMConfig(database=str(folder / "stm.sqlite3"))
        if restarted:
            async with ShortTermMemory.open(config) as before:
                for ctx, _ in inputs[:channels]:
                    await before.capture(
                        GenerationFinished(
                            context=ctx, messages=[DialogueMessage(role="user", content="hi")]
                        )
                    )
        memory = await ShortTermMemory.open(config)
        try:
            chars = 0
            base_trips = memory.stats["round_trips"]

            def step(ctx: TurnContext, event: GenerationFinished) -> Callable[[], Awaitable[Any]]:
                async def run() -> None:
                    nonlocal chars
                    await memory.capture(event)
                    chars += len(str(await memory.build_context(ctx)))

                return run

            total, latencies = await _timed([step(ctx, event) for ctx, event in inputs])
            loop_trips = memory.stats["round_trips"] - base_trips
            flush_start = time.perf_counter()
            await memory.flush()
            flush_ms = (time.perf_counter() - flush_start) * 1e3
            all_trips = memory.stats["round_trips"] - base_trips
            bad = 0
            for c in range(channels):
                key = server_key(500 + c // CHANNELS_PER_SERVER, 1_000_000 + c)
                entry = await memory.get_entry(key)
                got = [m.content for m in entry.messages] if entry else []
                bad += got != expected_window(c, per_channel)
        finally:
            await memory.close()
    out = _summary(total, latencies, len(plan))
    out.update(
        round_trips=loop_trips,
        round_trips_per_turn=loop_trips / len(plan),
        round_trips_with_flush=all_trips,
        flush_ms=flush_ms,
        context_chars_per_turn=chars / len(plan),
        input_build_us=build_us,
        wrong_windows=bad,
    )
    return out


# -- LangGraph with its async SQLite checkpointer --------------------------------
async def run_langgraph(channels: int, per_channel: int) -> dict[str, Any]:
    from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
    from langgraph.graph import END, START, MessagesState, StateGraph

    def keep_window(state: MessagesState) -> dict[str, Any]:
        # The node a chat bot would have: it sees the window and keeps it bounded.
        old = state["messages"][:-WINDOW]
        return {"messages": [RemoveMessage(id=m.id) for m in old]} if old else {}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", keep_window)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)

    plan = turns(channels, per_channel)
    inputs = [
        ({"messages": [HumanMessage(t.user), AIMessage(t.reply)]}, str(t.channel)) for t in plan
    ]
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        async with AsyncSqliteSaver.from_conn_string(str(folder / "lg.sqlite3")) as saver:
            graph = builder.compile(checkpointer=saver)

            def step(payload: dict[str, Any], thread: str) -> Callable[[], Awaitable[Any]]:
                async def run() -> None:
                    state = await graph.ainvoke(payload, {"configurable": {"thread_id": thread}})
                    windows[int(thread)] = [str(m.content) for m in state["messages"]]

                return run

            total, latencies = await _timed([step(p, th) for p, th in inputs])
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


# -- LangChain SQL chat message history on an async engine ------------------------
async def run_langchain(channels: int, per_channel: int) -> dict[str, Any]:
    import warnings

    from langchain_core.messages import AIMessage, HumanMessage
    from sqlalchemy.ext.asyncio import create_async_engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the package announces its own deprecation
        from langchain_community.chat_message_histories import SQLChatMessageHistory

    plan = turns(channels, per_channel)
    inputs = [([HumanMessage(t.user), AIMessage(t.reply)], t.channel) for t in plan]
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        engine = create_async_engine(f"sqlite+aiosqlite:///{folder / 'lc.sqlite3'}")
        histories = [
            SQLChatMessageHistory(session_id=str(c), connection=engine, async_mode=True)
            for c in range(channels)
        ]
        await histories[0].aget_messages()  # creates the table outside the clock

        def step(messages: list[Any], channel: int) -> Callable[[], Awaitable[Any]]:
            async def run() -> None:
                history = histories[channel]
                await history.aadd_messages(messages)
                window = (await history.aget_messages())[-WINDOW:]
                windows[channel] = [str(m.content) for m in window]

            return run

        try:
            total, latencies = await _timed([step(m, c) for m, c in inputs])
        finally:
            await engine.dispose()
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


# -- floor 1: a dict of bounded deques ------------------------------------------------
async def run_deque(channels: int, per_channel: int) -> dict[str, Any]:
    plan = turns(channels, per_channel)
    inputs = [(("user", t.user), ("assistant", t.reply), t.channel) for t in plan]
    store: dict[int, deque[tuple[str, str]]] = {}
    windows: dict[int, list[str]] = {}
    clock = time.perf_counter
    latencies: list[float] = []
    start = clock()
    for user, reply, channel in inputs:
        t0 = clock()
        window = store.get(channel)
        if window is None:
            window = store[channel] = deque(maxlen=WINDOW)
        window.append(user)
        window.append(reply)
        windows[channel] = [content for _, content in window]
        latencies.append((clock() - t0) * 1e6)
    total = clock() - start
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


# -- floor 2: sqlite3, one WAL transaction per turn --------------------------------------
async def run_sqlite3(channels: int, per_channel: int) -> dict[str, Any]:
    plan = turns(channels, per_channel)
    inputs = [(t.channel, t.user, t.reply) for t in plan]
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        db = sqlite3.connect(folder / "floor.sqlite3", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            # NORMAL: in WAL mode a commit does not wait for fsync; this project's turn path
            # does not either, so the floor is compared like for like.
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(
                "CREATE TABLE messages (id INTEGER PRIMARY KEY, channel INTEGER NOT NULL, "
                "role TEXT NOT NULL, content TEXT NOT NULL)"
            )
            db.execute("CREATE INDEX messages_by_channel ON messages (channel, id)")
            clock = time.perf_counter
            latencies: list[float] = []
            start = clock()
            for channel, user, reply in inputs:
                t0 = clock()
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO messages (channel, role, content) VALUES (?, ?, ?)",
                    ((channel, "user", user), (channel, "assistant", reply)),
                )
                db.execute("COMMIT")
                rows = db.execute(
                    "SELECT content FROM messages WHERE channel = ? ORDER BY id DESC LIMIT ?",
                    (channel, WINDOW),
                ).fetchall()
                windows[channel] = [row[0] for row in reversed(rows)]
                latencies.append((clock() - t0) * 1e6)
            total = clock() - start
        finally:
            db.close()
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


def _check(
    out: dict[str, Any], windows: dict[int, list[str]], channels: int, per_channel: int
) -> dict[str, Any]:
    out["wrong_windows"] = sum(
        windows.get(c) != expected_window(c, per_channel) for c in range(channels)
    )
    return out


SYSTEMS: dict[str, Callable[[int, int], Awaitable[dict[str, Any]]]] = {
    "stm": run_stm,
    "stm-restarted": run_stm_restarted,
    "langgraph": run_langgraph,
    "langchain": run_langchain,
    "deque": run_deque,
    "sqlite3": run_sqlite3,
}


def run(system: str, quick: bool) -> dict[str, Any]:
    channels, per_channel = (20, 10) if quick else (200, 25)
    result = asyncio.run(SYSTEMS[system](channels, per_channel))
    result["channels"], result["turns_per_channel"] = channels, per_channel
    return result
