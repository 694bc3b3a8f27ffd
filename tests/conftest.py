"""Shared fixtures: a controllable clock, a config on a temporary SQLite file, an open memory."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from stm import (
    DialogueMessage,
    GenerationFinished,
    ShortTermMemory,
    STMConfig,
    TurnContext,
)


class Clock:
    """A clock the test moves by hand (epoch seconds)."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float = 0.0, *, hours: float = 0.0, minutes: float = 0.0) -> None:
        self.now += seconds + minutes * 60 + hours * 3600


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "stm.sqlite3"


@pytest.fixture
def config(db_path: Path) -> STMConfig:
    return STMConfig(database=str(db_path), write_behind_seconds=0.05, delete_retry_seconds=0.05)


Opener = Callable[..., Awaitable[ShortTermMemory]]


@pytest.fixture
async def open_memory(config: STMConfig, clock: Clock) -> AsyncIterator[Opener]:
    """Open a memory on the test's database (call again after close() for a restart)."""
    opened: list[ShortTermMemory] = []

    async def opener(**overrides: object) -> ShortTermMemory:
        cfg = config.model_copy(update=overrides) if overrides else config
        memory = await ShortTermMemory.open(cfg, clock=clock)
        opened.append(memory)
        return memory

    yield opener
    for memory in opened:
        await memory.close()


@pytest.fixture
async def memory(open_memory: Opener) -> ShortTermMemory:
    return await open_memory()


def ctx(
    user: int = 1,
    channel: int = 10,
    server: int | None = 100,
    persona: int | None = None,
    **fields: object,
) -> TurnContext:
    """A turn context with small readable ids."""
    return TurnContext(
        user_id=user, channel_id=channel, server_id=server, persona_id=persona, **fields
    )


def turn(
    context: TurnContext, user_text: str, reply: str = "ok", **fields: object
) -> GenerationFinished:
    """A finished generation: the user's message and the bot's reply."""
    return GenerationFinished(
        context=context,
        messages=[
            DialogueMessage(
                role="user",
                content=user_text,
                author_id=context.user_id,
                speaker_name=f"user{context.user_id}",
            ),
            DialogueMessage(role="assistant", content=reply, speaker_name="Bot"),
        ],
        **fields,
    )
