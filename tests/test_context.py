"""build_context: same-channel distilled memory, other channels by scope rules, the nudge."""

from __future__ import annotations

from helpers import Opener

from stm import ShortTermMemory, STMConfig, TurnContext
from stm.testing import Clock, ctx, turn

# Each test that does not inspect the SQLite file runs on both stores.
BOTH_STORES = True


async def upgrade(memory: ShortTermMemory, text: str, **where: object) -> None:
    c = ctx(**where)  # type: ignore[arg-type]
    await memory.capture(turn(c, f"chat about {text}", f"reply about {text}"))
    result = await memory.run_tool(c, {"summary": text})
    assert result.success, result.message


async def test_same_channel_shows_distilled_never_crude(memory: ShortTermMemory) -> None:
    """The current channel contributes its summary only."""
    await upgrade(memory, "SUMMARY-A")
    text = str(await memory.build_context(ctx()))
    assert "SUMMARY-A" in text and "chat about" not in text


async def test_other_channels_newest_first_and_bounded(
    memory: ShortTermMemory, clock: Clock
) -> None:
    """At most max_other_channels, newest first, never the current channel."""
    for ch in range(11, 16):
        await upgrade(memory, f"TOPIC-{ch}", channel=ch)
        clock.advance(60)
    context = await memory.build_context(ctx(channel=10))
    text = str(context)
    shown = [ch for ch in range(11, 16) if f"TOPIC-{ch}" in text]
    assert shown == [13, 14, 15]
    assert text.index("TOPIC-15") < text.index("TOPIC-14") < text.index("TOPIC-13")


async def test_scoping_rules(memory: ShortTermMemory) -> None:
    """Same server and persona only; never private channels, other servers or DMs; a DM
    recalls nothing, not even the same user's other DMs (other people may be in one)."""
    await upgrade(memory, "PUBLIC-SAME-SERVER", channel=11)
    await upgrade(memory, "PRIVATE-CHANNEL", channel=12, channel_is_private=True)
    await upgrade(memory, "OTHER-SERVER", channel=13, server=200)
    await upgrade(memory, "A-DM", channel=14, server=None)
    await upgrade(memory, "PERSONA-7", channel=15, persona=7)
    await upgrade(memory, "OTHER-USER-SAME-SERVER", channel=16, user=2)
    text = str(await memory.build_context(ctx(channel=10)))
    assert "PUBLIC-SAME-SERVER" in text and "OTHER-USER-SAME-SERVER" in text
    for hidden in ("PRIVATE-CHANNEL", "OTHER-SERVER", "A-DM", "PERSONA-7"):
        assert hidden not in text
    persona_text = str(await memory.build_context(ctx(channel=10, persona=7)))
    assert "PERSONA-7" in persona_text and "PUBLIC-SAME-SERVER" not in persona_text
    dm_text = str(await memory.build_context(ctx(channel=99, server=None)))
    assert "A-DM" not in dm_text and "PUBLIC-SAME-SERVER" not in dm_text
    own_dm = str(await memory.build_context(ctx(channel=14, server=None)))
    assert "A-DM" in own_dm
    other_user_dm = str(await memory.build_context(ctx(user=2, channel=98, server=None)))
    assert "A-DM" not in other_user_dm


async def test_render_modes(memory: ShortTermMemory) -> None:
    """crude_summary adds other channels' crude messages; supersede leaves them out."""
    await upgrade(memory, "CATS", channel=11)
    assert "chat about CATS" in str(await memory.build_context(ctx()))
    await memory.update_server_settings(100, render_mode="supersede")
    text = str(await memory.build_context(ctx()))
    assert "CATS" in text and "chat about CATS" not in text


async def test_nudge_after_cadence_and_at_its_depth(memory: ShortTermMemory) -> None:
    """The nudge appears once the live counter reaches the cadence, names the tool,
    and goes away after a successful upgrade or with explicit intent."""
    await memory.update_server_settings(100, refresh_cadence=3, nudge_depth=1)
    for i in range(2):
        await memory.capture(turn(ctx(), f"m{i}"))
    assert (await memory.build_context(ctx())).nudge is None
    await memory.capture(turn(ctx(), "m2"))
    context = await memory.build_context(ctx())
    assert context.nudge is not None and "update_short_term_memory" in context.nudge
    assert context.nudge_depth == 1
    assert (await memory.build_context(ctx(user_text="remember this please"))).nudge is None
    assert (await memory.run_tool(ctx(), {"summary": "done"})).success
    assert (await memory.build_context(ctx())).nudge is None


async def test_relative_time_and_depth(memory: ShortTermMemory, clock: Clock) -> None:
    """Blocks say how long ago, and fresh memory sits no higher than depth 2."""
    await upgrade(memory, "EARLIER", channel=11)
    await upgrade(memory, "HERE")
    clock.advance(minutes=12)
    context = await memory.build_context(ctx())
    assert "12 minutes ago" in str(context)
    assert all(block.depth == 2 for block in context.blocks)
    clock.advance(hours=2)
    assert all(b.depth == -1 for b in (await memory.build_context(ctx())).blocks)


async def test_disabled_server_is_fully_off(memory: ShortTermMemory) -> None:
    """enabled=False: no context, no tool, no capture."""
    await upgrade(memory, "BEFORE")
    await memory.update_server_settings(100, enabled=False)
    context = await memory.build_context(ctx())
    assert not context and str(context) == ""
    assert memory.tool_schema(ctx()) is None
    assert not (await memory.run_tool(ctx(), {"summary": "x"})).success


async def test_first_turn_after_restart_sees_memory(open_memory: Opener) -> None:
    """After a restart the entry is hydrated before build_context returns; crude is empty."""
    first = await open_memory()
    await upgrade(first, "SURVIVES", channel=10)
    await upgrade(first, "OTHER-SURVIVES", channel=11)
    await first.close()
    second = await open_memory()
    assert second.stats["cached_keys"] == 0
    text = str(await second.build_context(ctx(channel=10)))
    assert "SURVIVES" in text and "OTHER-SURVIVES" in text
    entry = await second.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.messages == [] and entry.summary == "SURVIVES"


async def test_channel_is_private_hook_makes_an_unflagged_channel_private(
    config: STMConfig, clock: Clock
) -> None:
    """The hook is asked about a server channel the context calls public: its True, or
    its failure, keeps the channel's memory out of other channels; DMs and flagged
    channels are not asked."""
    asked: list[int] = []

    def is_private(context: TurnContext) -> bool:
        asked.append(context.channel_id)
        if context.channel_id == 13:
            raise RuntimeError("no idea")
        return context.channel_id == 12

    async with ShortTermMemory.open(config, clock=clock, channel_is_private=is_private) as memory:
        for channel in (11, 12, 13):
            await upgrade(memory, f"NOTES-{channel}", channel=channel, parent_channel_id=10)
        await upgrade(memory, "FLAGGED", channel=14, channel_is_private=True)
        await upgrade(memory, "A-DM", channel=15, server=None)
        text = str(await memory.build_context(ctx(channel=10)))
        assert "NOTES-11" in text and "NOTES-12" not in text and "NOTES-13" not in text
        assert 14 not in asked and 15 not in asked and {11, 12, 13} <= set(asked)
