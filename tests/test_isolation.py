"""Isolation matrix: what one context writes, every other context sees only as the rules allow.

Contexts: two users x (a public and a private channel of server A, a thread
of each, a channel of server B and a thread of it, the user's own DM with the bot,
a DM both users are in: a group DM, or a user-installed bot in a DM between two
friends) x (no persona, a persona).
For every writer, distinctive text is written (a captured turn and an
upgrade); every reader's build_context and tool schema are then checked
against a predicate written from the scoping rules of the contract, both
with the writer's entries live in the cache and after a restart (rows only).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass

import pytest

from stm import Category, DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig
from stm import TurnContext as Ctx

# The matrix runs on both stores.
BOTH_STORES = True
# A fresh database for each of the 28 writers: seconds on PostgreSQL, the full run only.
SLOW_ON_POSTGRES = True


@dataclass(frozen=True)
class Place:
    name: str
    server: int | None
    channel: int
    private: bool = False
    parent: int | None = None


SERVER_A, SERVER_B = 100, 200
PLACES = [
    Place("A-public", SERVER_A, 11),
    Place("A-private", SERVER_A, 12, private=True),
    Place("A-thread", SERVER_A, 13, parent=11),
    Place("A-private-thread", SERVER_A, 14, private=True, parent=12),
    Place("B-public", SERVER_B, 21),
    Place("B-thread", SERVER_B, 22, parent=21),
    Place("DM", None, 0),  # each user's own DM channel: 900 + user
    Place("DM-shared", None, 950),  # one DM channel both users are in
]
USERS = (1, 2)
PERSONAS = (None, 7)
LABELS = {SERVER_A: "Alpha house notes", SERVER_B: "Beta house notes"}


@dataclass(frozen=True)
class Who:
    user: int
    place: Place
    persona: int | None

    @property
    def channel(self) -> int:
        return 900 + self.user if self.place.name == "DM" else self.place.channel

    @property
    def server(self) -> int | None:
        return self.place.server

    def context(self) -> Ctx:
        return Ctx(
            user_id=self.user,
            channel_id=self.channel,
            server_id=self.server,
            persona_id=self.persona,
            parent_channel_id=self.place.parent,
            channel_is_private=self.place.private,
            channel_name=self.place.name,
        )

    def __str__(self) -> str:
        return f"user{self.user}@{self.place.name}/persona{self.persona}"


CONTEXTS = [Who(u, p, q) for u, p, q in itertools.product(USERS, PLACES, PERSONAS)]


def same_channel_allowed(writer: Who, reader: Who) -> bool:
    """The reader's own channel memory: the server's shared memory of that channel and
    persona in a server; the user's own in a DM."""
    if reader.server is None:
        return (
            writer.server is None
            and writer.user == reader.user
            and writer.channel == reader.channel
            and writer.persona == reader.persona
        )
    return (
        writer.server == reader.server
        and writer.channel == reader.channel
        and writer.persona == reader.persona
    )


def other_channel_allowed(writer: Who, reader: Who) -> bool:
    """Other-channel memory: same server only (never across servers, never between a DM
    and a server), same persona only, never from a private channel; a DM recalls nothing
    (other people may be in it), and a DM's notes are recalled nowhere."""
    if writer.channel == reader.channel or writer.persona != reader.persona:
        return False
    if reader.server is None or writer.server is None:
        return False
    return writer.server == reader.server and not writer.place.private


async def write(memory: ShortTermMemory, writer: Who, tag: str) -> None:
    ctx = writer.context()
    await memory.capture(
        GenerationFinished(
            context=ctx,
            messages=[
                DialogueMessage(role="user", content=f"CRUDE-{tag}", author_id=writer.user),
                DialogueMessage(role="assistant", content=f"REPLY-{tag}"),
            ],
        )
    )
    if writer.server is None:
        arguments = {"summary": f"SUMMARY-{tag}"}
    else:
        slug = LABELS[writer.server].lower().replace(" ", "_")
        arguments = {slug: f"SUMMARY-{tag}", "x": "other"}
    result = await memory.run_tool(writer.context(), arguments)
    assert result.success, result.message


async def check_readers(
    memory: ShortTermMemory, writer: Who, tag: str, *, crude_kept: bool
) -> list[str]:
    wrong = []
    for reader in CONTEXTS:
        shown = str(await memory.build_context(reader.context()))
        summary = same_channel_allowed(writer, reader) or other_channel_allowed(writer, reader)
        # Crude turns are never shown in their own channel, and not kept across a restart.
        crude = crude_kept and other_channel_allowed(writer, reader)
        for text, allowed in ((f"SUMMARY-{tag}", summary), (f"CRUDE-{tag}", crude)):
            if (text in shown) != allowed:
                wrong.append(f"{writer} -> {reader}: {text} {'missing' if allowed else 'leaked'}")
        schema = json.dumps(memory.tool_schema(reader.context()))
        if tag in schema:
            wrong.append(f"{writer} -> {reader}: memory text in the tool schema")
        for server, label in LABELS.items():
            if (label in schema) != (reader.server == server):
                wrong.append(f"{reader}: tool schema shows the categories of server {server}")
    return wrong


async def test_every_pair_of_contexts(
    fresh_database: Callable[[str], str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Each writer x each reader, live and after a restart, against the scoping rules."""
    wrong: list[str] = []
    checks = 0
    for i, writer in enumerate(CONTEXTS):
        config = STMConfig(database=fresh_database(f"w{i}"), max_other_channels=50)
        tag = f"W{i:02d}X"
        async with ShortTermMemory.open(config) as memory:
            # Each server has its own categories; DMs keep the default summary.
            for server, label in LABELS.items():
                await memory.set_categories(server, [Category(label, "notes"), Category("x")])
            await write(memory, writer, tag)
            wrong += await check_readers(memory, writer, tag, crude_kept=True)
        async with ShortTermMemory.open(config) as memory:
            wrong += await check_readers(memory, writer, tag, crude_kept=False)
        checks += 2 * len(CONTEXTS)
    assert not wrong, "\n".join(wrong[:20])
    with capsys.disabled():
        print(
            f"\nisolation matrix: {len(CONTEXTS)} contexts, {len(CONTEXTS) ** 2} writer/reader "
            f"pairs, {checks} reader checks (live and after restart)"
        )
