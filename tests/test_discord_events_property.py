"""A randomized interleaving of captures, Discord deletes and edits, upgrades (some whose
turn began before a delete) and purges: afterwards no deleted or superseded message text
is rendered, returned or written into notes.

The stand-in model writes each summary from the recent messages its turn was shown
(its own conversation's window and the other channels' recent messages in its prompt),
copying each message's token ``m<n>`` as ``n<n>``. Notes written before a message was
deleted are left for the model to rewrite at the next turn (docs/data.md, "What Discord
events remove"), so what is checked of notes is that none written after a delete (or by
a turn that was shown the message and began before its delete) holds its token.
"""

from __future__ import annotations

import asyncio
import itertools
import re
from collections.abc import Callable

from hypothesis import example, given, settings
from hypothesis import strategies as st

from stm import DialogueMessage, GenerationFinished, ShortTermMemory, STMConfig, TurnContext
from stm._keys import server_key, user_key

BOTH_STORES = True
SLOW_ON_POSTGRES = True
SERVER = 100
USERS = (1, 2, 3)
CHANNELS = (10, 11, 12)
TOKEN = re.compile(r"\bm(\d+)\b")
NOTED = re.compile(r"\bn(\d+)\b")

ops = st.lists(
    st.one_of(
        st.tuples(st.just("say"), st.sampled_from(USERS), st.sampled_from(CHANNELS)),
        st.tuples(st.just("delete"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("edit"), st.integers(0, 40), st.booleans()),
        st.tuples(st.just("begin"), st.sampled_from(USERS), st.sampled_from(CHANNELS)),
        st.tuples(st.just("upgrade"), st.integers(0, 5), st.booleans()),
        st.tuples(st.just("purge"), st.sampled_from(USERS), st.booleans()),
    ),
    max_size=30,
)


def keys() -> list[str]:
    found = [server_key(SERVER, c) for c in CHANNELS]
    return found + [user_key(u, c) for u in USERS for c in CHANNELS]


# A turn shown a message that is deleted before its upgrade, and one shown an edited one.
NAMED = [
    [("say", 1, 10), ("begin", 1, 10), ("delete", 0, False), ("upgrade", 0, False)],
    [("say", 2, 11), ("begin", 3, 11), ("edit", 1, True), ("upgrade", 0, False)],
]


def test_no_deleted_or_superseded_text_comes_back(
    store_kind: str, fresh_database: Callable[[str], str]
) -> None:
    """On each store (SQLite in memory; a PostgreSQL schema per example)."""
    made = itertools.count()

    @settings(max_examples=25, deadline=None)
    @given(script=ops)
    def never_back(script: list[tuple]) -> None:
        database = ":memory:" if store_kind == "sqlite" else fresh_database(f"e{next(made)}")
        asyncio.run(_play(database, script))

    for named in NAMED:
        never_back = example(script=named)(never_back)
    never_back()


async def _play(database: str, script: list[tuple]) -> None:
    memory = await ShortTermMemory.open(STMConfig(database=database, refresh_cadence=1000))
    try:
        counter = itertools.count(1)
        sent: list[tuple[int, int, str]] = []  # (channel, message id, token) of each message
        gone: dict[str, int] = {}  # token -> step it was deleted or superseded
        written: dict[str, int] = {}  # summary -> step it was committed
        # Turns begun: (context, step begun, the message tokens the turn was shown).
        turns: list[tuple[TurnContext, int, set[str]]] = []
        for step, op in enumerate(script):
            kind = op[0]
            if kind == "say":
                _, user, channel = op
                said, answered = next(counter), next(counter)
                ctx = TurnContext(
                    user_id=user, channel_id=channel, server_id=SERVER, message_id=said
                )
                await memory.capture(
                    GenerationFinished(
                        context=ctx,
                        messages=[
                            DialogueMessage(
                                role="user", content=f"m{said}", author_id=user, message_id=said
                            ),
                            DialogueMessage(
                                role="assistant", content=f"m{answered}", message_id=answered
                            ),
                        ],
                    )
                )
                sent += [(channel, said, f"m{said}"), (channel, answered, f"m{answered}")]
            elif kind in ("delete", "edit") and sent:
                channel, message_id, token = sent[op[1] % len(sent)]
                if kind == "delete":
                    await memory.forget_messages(channel, [message_id])
                    gone.setdefault(token, step)
                else:
                    new = f"m{next(counter)}"
                    await memory.edit_message(channel, message_id, new if op[2] else "  ")
                    gone.setdefault(token, step)
                    index = sent.index((channel, message_id, token))
                    sent[index] = (channel, message_id, new)
            elif kind == "begin":
                _, user, channel = op
                ctx = TurnContext(user_id=user, channel_id=channel, server_id=SERVER)
                context = await memory.build_context(ctx)
                shown = " ".join(block.text for block in context.blocks)
                own = await memory.get_entry(server_key(SERVER, channel))
                seen = set(TOKEN.findall(shown))
                if own is not None:
                    seen |= {t for m in own.messages for t in TOKEN.findall(m.content)}
                turns.append((ctx, step, seen))
            elif kind == "upgrade" and turns:
                ctx, _, seen = turns.pop(op[1] % len(turns))
                summary = " ".join(f"n{t}" for t in sorted(seen)) + f" at{step}"
                result = await memory.run_tool(ctx, {"summary": summary})
                if result.success:
                    written[summary] = step
            elif kind == "purge":
                await memory.clear_short_term_memory_for_user(op[1], SERVER if op[2] else None)
            # -- what must hold after every step ------------------------------------------
            await memory.flush()
            for key in keys():
                entry = await memory.get_entry(key)
                if entry is None:
                    continue
                for message in entry.messages:
                    assert message.content not in gone, (step, key, message.content)
                if entry.summary:
                    for number in NOTED.findall(entry.summary):
                        deleted = gone.get(f"m{number}")
                        if deleted is not None:
                            # Only a note committed before the delete may hold it.
                            assert written[entry.summary] < deleted, (entry.summary, deleted)
            for user in USERS:
                for channel in CHANNELS:
                    ctx = TurnContext(user_id=user, channel_id=channel, server_id=SERVER)
                    context = await memory.build_context(ctx)
                    for block in context.blocks:
                        for line in block.text.splitlines():
                            if NOTED.search(line):
                                continue  # a note, checked above
                            for token in TOKEN.findall(line):
                                assert f"m{token}" not in gone, (step, line)
    finally:
        await memory.close()
