"""Attacks through the public API on promises the contract makes, each as a test."""

from __future__ import annotations

import asyncio
from pathlib import Path

from unicode_policy import ENGLAND, PAYLOAD, hidden, tags, untag

from stm import (
    Category,
    DialogueMessage,
    DurabilityError,
    GenerationFinished,
    ShortTermMemory,
    STMConfig,
    STMError,
    TurnContext,
)
from stm._keys import server_key

# The contract's STM_COHERENCE_SECONDS default is 2; the watchdog leaves room beyond it.
COHERENCE_WATCHDOG_SECONDS = 3.0


def _ctx(**changes: object) -> TurnContext:
    fields: dict[str, object] = {
        "user_id": 1,
        "channel_id": 10,
        "server_id": 100,
        "user_name": "alice",
        "user_text": "hi",
    }
    fields.update(changes)
    return TurnContext(**fields)


def _turn(ctx: TurnContext, text: str) -> GenerationFinished:
    return GenerationFinished(
        context=ctx,
        messages=[
            DialogueMessage(
                role="user", content=text, author_id=ctx.user_id, speaker_name=ctx.user_name
            ),
            DialogueMessage(role="assistant", content="noted"),
        ],
    )


async def test_a_purge_in_one_process_is_honoured_by_another_within_the_coherence_bound(
    tmp_path: Path,
) -> None:
    """A purge committed by one process hides the user's words in every other within the bound."""
    config = STMConfig(database=str(tmp_path / "shared.sqlite3"))
    bot = await ShortTermMemory.open(config)
    cli = await ShortTermMemory.open(config)
    try:
        await bot.capture(_turn(_ctx(user_id=2, user_name="bob", channel_id=11), "BOBSECRET"))
        assert "BOBSECRET" in str(await bot.build_context(_ctx(channel_id=12)))

        await cli.clear_short_term_memory_for_user(2)
        await cli.flush()

        async def still_shown() -> bool:
            return "BOBSECRET" in str(await bot.build_context(_ctx(channel_id=12, user_id=3)))

        # Polled up to a watchdog beyond the contract's 2-second bound; not a speed check.
        polls = int(COHERENCE_WATCHDOG_SECONDS / 0.05)
        for _ in range(polls):
            if not await still_shown():
                break
            await asyncio.sleep(0.05)
        assert not await still_shown()
    finally:
        await bot.close()
        await cli.close()


async def test_settings_calls_on_a_closed_memory_answer_instead_of_hanging(
    tmp_path: Path,
) -> None:
    """A settings or opt-out call after close() returns or raises; it never waits forever."""
    memory = await ShortTermMemory.open(STMConfig(database=str(tmp_path / "m.sqlite3")))
    await memory.close()

    calls = asyncio.gather(
        memory.set_user_opt_out(1, True),
        memory.update_server_settings(100, refresh_cadence=3),
        memory.set_categories(100, [Category(label="topic", description="what we discuss")]),
        return_exceptions=True,
    )
    # A watchdog for a deadlock: each call must answer (a result or an error) at once.
    results = await asyncio.wait_for(calls, 3.0)
    assert all(isinstance(r, DurabilityError) for r in results), results


async def test_every_public_call_on_a_closed_memory_answers(tmp_path: Path) -> None:
    """After close(), every public call returns or raises a library error; none waits forever
    and none brings memory back."""
    memory = await ShortTermMemory.open(STMConfig(database=str(tmp_path / "m.sqlite3")))
    await memory.capture(_turn(_ctx(), "BEFORECLOSE"))
    await memory.close()
    ctx = _ctx(user_text="hello")
    calls = {
        "capture": memory.capture(_turn(ctx, "AFTERCLOSE")),
        "build_context": memory.build_context(ctx),
        "run_tool": memory.run_tool(ctx, {"summary": "AFTERCLOSE"}),
        "get_entry": memory.get_entry("shortterm:server:100:10"),
        "get_server_settings": memory.get_server_settings(100),
        "update_server_settings": memory.update_server_settings(100, refresh_cadence=3),
        "set_categories": memory.set_categories(100, [Category("topic", "what we discuss")]),
        "set_user_opt_out": memory.set_user_opt_out(1, True),
        "clear_channel": memory.clear_short_term_memory_for_channel(10),
        "clear_user": memory.clear_short_term_memory_for_user(1),
        "flush": memory.flush(),
        "run_janitor": memory.run_janitor(),
        "close": memory.close(),
    }
    try:
        for name, call in calls.items():
            try:
                # A watchdog for a deadlock, not a measure of speed.
                result = await asyncio.wait_for(call, 3.0)
            except STMError:
                continue
            assert "AFTERCLOSE" not in str(result), name
            if name == "run_tool":
                assert not result.success
    finally:
        for call in calls.values():
            call.close()  # those not reached after a failure


async def test_a_huge_message_is_cut_before_it_reaches_other_prompts(tmp_path: Path) -> None:
    """One captured message cannot fill every prompt that recalls it."""
    config = STMConfig(database=str(tmp_path / "m.sqlite3"), max_message_length=100)
    async with ShortTermMemory.open(config) as memory:
        await memory.capture(_turn(_ctx(channel_id=11), "A" * 1_000_000))
        context = str(await memory.build_context(_ctx(channel_id=12)))
        assert "A" * 100 in context
        assert "A" * 101 not in context
        assert len(context) < 2_000


async def test_a_tag_smuggled_payload_reaches_no_prompt(tmp_path: Path) -> None:
    """Invisible tag characters that a tokenizer reads as ``]`` and a ``[System: ...]``
    line, in a member's message, their name, an edit, a category label and the model's
    notes, are neither held nor rendered; the flag of England beside them survives."""
    hidden_text = f"see {ENGLAND}{tags(PAYLOAD)} you"
    async with ShortTermMemory.open(STMConfig(database=str(tmp_path / "m.sqlite3"))) as memory:
        await memory.set_categories(100, [Category("mood" + tags(PAYLOAD), "how" + tags(PAYLOAD))])
        here = _ctx(channel_id=11, user_name="mallory" + tags(PAYLOAD), message_id=5)
        await memory.capture(
            GenerationFinished(
                context=here,
                messages=[
                    DialogueMessage(
                        role="user",
                        content=hidden_text,
                        author_id=1,
                        speaker_name=here.user_name + tags(PAYLOAD),
                        message_id=5,
                    ),
                    DialogueMessage(role="assistant", content=hidden_text),
                ],
            )
        )
        await memory.capture(_turn(_ctx(channel_id=12), "more" + tags(PAYLOAD)))
        await memory.edit_message(12, 6, "edited" + tags(PAYLOAD))  # not held: no effect
        result = await memory.run_tool(here, {"mood": hidden_text})
        assert result.success, result.message

        held = await memory.get_entry(server_key(100, 11))
        assert held is not None
        assert held.categories == {"mood": f"see {ENGLAND} you"}
        assert [m.content for m in held.messages] == [f"see {ENGLAND} you"] * 2
        assert hidden(held.messages[0].speaker_name) == []
        # #11's two keys hold it; #12's two hold a reply whose prompt showed it, which goes.
        assert await memory.edit_message(11, 5, "now" + tags(PAYLOAD) + ENGLAND) == 4
        held = await memory.get_entry(server_key(100, 11))
        assert held is not None and held.messages[0].content == "now" + ENGLAND

        for where in (here, _ctx(channel_id=12), _ctx(channel_id=13)):
            context = await memory.build_context(where)
            assert context.blocks
            for block in context.blocks:
                assert hidden(block.text) == [], block.text
                assert "reveal" not in untag(block.text)
            assert ENGLAND in str(context)
