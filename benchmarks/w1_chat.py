"""W1 chat turns: record each turn, then read back what goes into the next prompt.

Channels take turns interleaved (turn 0 of every channel, then turn 1, ...).
Every system builds its inputs inside the clock, as a host does on each turn:
this library's ``TurnContext``, the host's intent check, ``GenerationFinished``
with its ``DialogueMessage``s, then ``capture`` and ``build_context``; each
peer its own message objects. Each turn is timed on its own, so every row
reports p50, mean and p99. The final window of every channel is checked
against the expected messages.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from .common import median, percentile, scratch_dir, text
from .database import Skipped, memory_database, open_memory, skipped

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
        "mean_us": total / n * 1e6,
        "p50_us": median(latencies),
        "p99_us": percentile(latencies, 99),
        "max_us": max(latencies),
        "turns": n,
    }


# -- this project ----------------------------------------------------------------
async def run_stm_restarted(channels: int, per_channel: int) -> dict[str, Any]:
    """The same turns on a database another process already filled (a bot restart):
    every channel's keys have rows, so each first turn reads them."""
    return await run_stm(channels, per_channel, restarted=True)


async def run_stm_postgresql(channels: int, per_channel: int) -> dict[str, Any]:
    """The same turns with the memory on PostgreSQL (skipped when none is named)."""
    return await run_stm(channels, per_channel, backend="postgresql")


async def run_stm(
    channels: int, per_channel: int, restarted: bool = False, backend: str = "sqlite"
) -> dict[str, Any]:
    from stm import DialogueMessage, GenerationFinished, TurnContext
    from stm._keys import server_key

    plan = turns(channels, per_channel)
    async with memory_database(backend, "w1") as database:
        if restarted:
            before = await open_memory(database)
            try:
                for c in range(channels):
                    ctx = TurnContext(
                        user_id=10_000 + c,
                        channel_id=1_000_000 + c,
                        server_id=500 + c // CHANNELS_PER_SERVER,
                    )
                    await before.capture(
                        GenerationFinished(
                            context=ctx, messages=[DialogueMessage(role="user", content="hi")]
                        )
                    )
            finally:
                await before.close()
        memory = await open_memory(database)
        try:
            chars = 0
            base_trips = memory.stats["round_trips"]
            gate = memory.intent_gate

            def step(turn: Turn) -> Callable[[], Awaitable[Any]]:
                async def run() -> None:
                    # What a host does per turn (host/pipeline.py): describe the turn, ask
                    # the intent gate, build the event of the delivered reply, hand it over.
                    nonlocal chars
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
                    ctx.explicit_memory_intent = gate.matches(turn.user)
                    event = GenerationFinished(
                        context=ctx,
                        messages=[
                            DialogueMessage(
                                role="user", content=turn.user, author_id=ctx.user_id,
                                speaker_name=ctx.user_name,
                            ),
                            DialogueMessage(
                                role="assistant", content=turn.reply, author_id=None,
                                speaker_name=ctx.bot_name,
                            ),
                        ],
                    )  # fmt: skip
                    await memory.capture(event)
                    chars += len(str(await memory.build_context(ctx)))

                return run

            total, latencies = await _timed([step(turn) for turn in plan])
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
        return {"messages": [RemoveMessage(id=str(m.id)) for m in old]} if old else {}

    builder = StateGraph(MessagesState)
    builder.add_node("remember", keep_window)
    builder.add_edge(START, "remember")
    builder.add_edge("remember", END)

    plan = turns(channels, per_channel)
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        async with AsyncSqliteSaver.from_conn_string(str(folder / "lg.sqlite3")) as saver:
            graph = builder.compile(checkpointer=saver)

            def step(turn: Turn) -> Callable[[], Awaitable[Any]]:
                async def run() -> None:
                    payload: Any = {"messages": [HumanMessage(turn.user), AIMessage(turn.reply)]}
                    config: Any = {"configurable": {"thread_id": str(turn.channel)}}
                    state = await graph.ainvoke(payload, config)
                    windows[turn.channel] = [str(m.content) for m in state["messages"]]

                return run

            total, latencies = await _timed([step(turn) for turn in plan])
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
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        engine = create_async_engine(f"sqlite+aiosqlite:///{folder / 'lc.sqlite3'}")
        histories = [
            SQLChatMessageHistory(session_id=str(c), connection=engine, async_mode=True)
            for c in range(channels)
        ]
        await histories[0].aget_messages()  # creates the table outside the clock

        def step(turn: Turn) -> Callable[[], Awaitable[Any]]:
            async def run() -> None:
                history = histories[turn.channel]
                await history.aadd_messages([HumanMessage(turn.user), AIMessage(turn.reply)])
                window = (await history.aget_messages())[-WINDOW:]
                windows[turn.channel] = [str(m.content) for m in window]

            return run

        try:
            total, latencies = await _timed([step(turn) for turn in plan])
        finally:
            await engine.dispose()
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


# -- floor 1: a dict of bounded deques ------------------------------------------------
# Both floors hold what the library's cache holds per message (role, content, speaker,
# author id, timestamp, the user whose turn it was) and build each message inside the
# clock, as the library's host builds its input models.
async def run_deque(channels: int, per_channel: int) -> dict[str, Any]:
    plan = turns(channels, per_channel)
    store: dict[int, deque[tuple[str, str, str, int | None, float, int]]] = {}
    windows: dict[int, list[str]] = {}
    clock = time.perf_counter
    now = time.time
    latencies: list[float] = []
    start = clock()
    for turn in plan:
        t0 = clock()
        c = turn.channel
        user_id = 10_000 + c
        window = store.get(c)
        if window is None:
            window = store[c] = deque(maxlen=WINDOW)
        window.append(("user", turn.user, f"user{c}", user_id, now(), user_id))
        window.append(("assistant", turn.reply, "Bot", None, now(), user_id))
        windows[c] = [m[1] for m in window]
        latencies.append((clock() - t0) * 1e6)
    total = clock() - start
    return _check(_summary(total, latencies, len(plan)), windows, channels, per_channel)


# -- floor 2: sqlite3, one WAL transaction per turn --------------------------------------
async def run_sqlite3(channels: int, per_channel: int) -> dict[str, Any]:
    plan = turns(channels, per_channel)
    windows: dict[int, list[str]] = {}
    with scratch_dir() as folder:
        db = sqlite3.connect(folder / "floor.sqlite3", isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode = WAL")
            # NORMAL: each turn's commit survives a crash of the process (the bot), not a
            # power cut; this library keeps crude messages in memory only, so the floor
            # is already the more durable of the two.
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute(
                "CREATE TABLE messages (id INTEGER PRIMARY KEY, channel INTEGER NOT NULL, "
                "role TEXT NOT NULL, content TEXT NOT NULL, speaker TEXT NOT NULL, "
                "author_id INTEGER, timestamp REAL NOT NULL, turn_user_id INTEGER NOT NULL)"
            )
            db.execute("CREATE INDEX messages_by_channel ON messages (channel, id)")
            insert = (
                "INSERT INTO messages (channel, role, content, speaker, author_id, timestamp, "
                "turn_user_id) VALUES (?, ?, ?, ?, ?, ?, ?)"
            )
            select = (
                "SELECT role, content, speaker, author_id, timestamp FROM messages "
                "WHERE channel = ? ORDER BY id DESC LIMIT ?"
            )
            clock = time.perf_counter
            now = time.time
            latencies: list[float] = []
            start = clock()
            for turn in plan:
                t0 = clock()
                c = turn.channel
                user_id = 10_000 + c
                db.execute("BEGIN")
                db.executemany(
                    insert,
                    (
                        (c, "user", turn.user, f"user{c}", user_id, now(), user_id),
                        (c, "assistant", turn.reply, "Bot", None, now(), user_id),
                    ),
                )
                db.execute("COMMIT")
                rows = db.execute(select, (c, WINDOW)).fetchall()
                windows[c] = [row[1] for row in reversed(rows)]
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


SYSTEMS: dict[str, Callable[[int, int], Coroutine[Any, Any, dict[str, Any]]]] = {
    "stm": run_stm,
    "stm-restarted": run_stm_restarted,
    "stm-postgresql": run_stm_postgresql,
    "langgraph": run_langgraph,
    "langchain": run_langchain,
    "deque": run_deque,
    "sqlite3": run_sqlite3,
}


def run(system: str, quick: bool) -> dict[str, Any]:
    channels, per_channel = (20, 10) if quick else (200, 25)
    try:
        result = asyncio.run(SYSTEMS[system](channels, per_channel))
    except Skipped as exc:
        result = skipped(str(exc))
    result["channels"], result["turns_per_channel"] = channels, per_channel
    return result
