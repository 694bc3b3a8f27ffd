"""Stage 02, summary upgrade: strict arguments, durable before success, one per turn."""

from __future__ import annotations

import asyncio
import sqlite3

from helpers import Opener, follower_read_once

from stm import Category, ShortTermMemory, STMConfig
from stm.store._shred import readable
from stm.testing import Clock, ctx, faulty_memory, turn

# Each test that does not inspect the SQLite file runs on both stores.
BOTH_STORES = True


def durable_rows(db_path: object) -> dict[str, tuple[object, ...]]:
    """What another connection sees in the file right now."""
    with sqlite3.connect(str(db_path)) as db:
        rows = db.execute(
            "SELECT key, summary, categories, turns_since_refresh, last_refreshed_turn "
            f"FROM {readable(db)}"
        ).fetchall()
    return {row[0]: row[1:] for row in rows}


async def test_success_is_durable_before_it_is_returned(
    memory: ShortTermMemory, db_path: object
) -> None:
    """Both keys hold the summary in the file the moment run_tool says success."""
    c = ctx()
    await memory.capture(turn(c, "we talk about trains"))
    result = await memory.run_tool(c, '{"summary": "Trains, mostly steam."}')
    assert result.success and "silent" in result.message
    rows = durable_rows(db_path)
    assert rows["shortterm:server:100:10"][0] == "Trains, mostly steam."
    assert rows["shortterm:user:1:10"][0] == "Trains, mostly steam."


async def test_success_resets_cadence_and_disables_the_tool(memory: ShortTermMemory) -> None:
    """Counter to 0, refreshed count +1, the turn's flag set, a second call refused."""
    c = ctx()
    for _ in range(4):
        await memory.capture(turn(ctx(), "x"))
    assert (await memory.run_tool(c, {"summary": "one"})).success
    assert c.disable_short_term_memory_update
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert (entry.turns_since_refresh, entry.last_refreshed_turn) == (0, 1)
    assert memory.tool_schema(c) is None
    second = await memory.run_tool(c, {"summary": "two"})
    assert not second.success and "already updated" in second.message
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary == "one"


async def test_explicit_memory_intent_hides_and_refuses_the_tool(memory: ShortTermMemory) -> None:
    """'Remember that...' belongs to long-term memory: no tool, refused if called anyway."""
    c = ctx(user_text="Please remember that my cat is called Mochi")
    assert memory.tool_schema(c) is None
    result = await memory.run_tool(c, {"summary": "cat"})
    assert not result.success and "long-term" in result.message
    flagged = ctx(explicit_memory_intent=True)
    assert memory.tool_schema(flagged) is None
    assert memory.tool_schema(ctx(user_text="my notebook is blue")) is not None


async def test_bad_arguments_change_nothing(memory: ShortTermMemory) -> None:
    """Refused arguments leave memory untouched and the tool available."""
    c = ctx()
    for bad in ('{"summary": 5}', "nope", {"summary": "x", "other": "y"}, {"summary": ""}):
        result = await memory.run_tool(c, bad)
        assert not result.success
    assert await memory.get_entry("shortterm:server:100:10") is None
    assert not c.disable_short_term_memory_update


async def test_category_write_sets_named_fields_and_keeps_others(
    memory: ShortTermMemory,
) -> None:
    """In category mode a write sets the fields it names and keeps the rest."""
    await memory.set_categories(100, [Category("Topic", "t"), Category("Mood", "m")])
    assert (await memory.run_tool(ctx(), {"topic": "chess", "mood": "tense"})).success
    assert (await memory.run_tool(ctx(), {"mood": "relieved"})).success
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert entry.categories == {"topic": "chess", "mood": "relieved"}
    refused = await memory.run_tool(ctx(), {"summary": "not a category here"})
    assert not refused.success and "unknown field 'summary'" in refused.message


async def test_values_are_bounded(open_memory: Opener) -> None:
    """Values are cut to max_summary_length."""
    memory = await open_memory(max_summary_length=20)
    assert (await memory.run_tool(ctx(), {"summary": "y" * 500})).success
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary == "y" * 20


async def test_concurrent_upgrades_share_commits(memory: ShortTermMemory) -> None:
    """Group commit: many concurrent upgrades need far fewer transactions than writes."""
    for channel in range(50):
        await memory.build_context(ctx(channel=channel))
    before = memory.stats["commits"]
    results = await asyncio.gather(
        *(memory.run_tool(ctx(channel=ch), {"summary": f"s{ch}"}) for ch in range(50))
    )
    assert all(r.success for r in results)
    assert memory.stats["commits"] - before < 25


async def test_tool_form_and_registry(memory: ShortTermMemory) -> None:
    """memory.tool plugs into a ToolRegistry; unknown tools fail softly."""
    from stm import ToolRegistry

    registry = ToolRegistry()
    registry.register(memory.tool)
    c = ctx()
    assert [d["function"]["name"] for d in registry.definitions(c)] == ["update_short_term_memory"]
    assert (
        await registry.execute("update_short_term_memory", c, '{"summary": "via registry"}')
    ).success
    assert registry.definitions(c) == []
    unknown = await registry.execute("nope", c, {})
    assert not unknown.success and "Unknown tool" in unknown.message
    registry.unregister("update_short_term_memory")
    assert len(registry) == 0


async def test_a_lone_category_labelled_summary_keeps_its_description(
    memory: ShortTermMemory,
) -> None:
    """Summary mode is only the default category: a server whose one category is labelled
    ``summary`` with its own description offers that description and stores a category,
    the tool and the stored entry agreeing on the mode."""
    own = Category("summary", "The quest the party is on and who carries what")
    settings = await memory.set_categories(100, [own])
    assert not settings.summary_mode
    c = ctx()
    tool = memory.tool_schema(c)
    assert tool is not None
    described = tool["function"]["parameters"]["properties"]["summary"]["description"]
    assert "who carries what" in described
    await memory.capture(turn(c, "we seek the amulet"))
    assert (await memory.run_tool(c, {"summary": "Seeking the amulet."})).success
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert entry.summary is None and entry.categories == {"summary": "Seeking the amulet."}


async def test_an_upgrade_is_refused_when_its_channel_was_cleared_during_the_turn(
    memory: ShortTermMemory,
) -> None:
    """The model saw the memory before /refresh; its summary would bring it back."""
    c = ctx()
    await memory.capture(turn(c, "SECRET-PLAN"))
    await memory.build_context(c)  # the turn begins: its prompt is built
    await memory.clear_short_term_memory_for_channel(10)
    result = await memory.run_tool(c, {"summary": "They discussed SECRET-PLAN."})
    assert not result.success and "cleared during the turn" in result.message
    assert await memory.get_entry("shortterm:server:100:10") is None
    assert await memory.get_entry("shortterm:user:1:10") is None


async def test_a_failed_upgrade_does_not_restore_what_a_purge_removed_meanwhile(
    config: STMConfig, clock: Clock
) -> None:
    """Rollback guard: the snapshot of an upgrade whose commit fails is put back only on
    entries nothing changed since; a purge during the commit stays in force."""
    memory, store = await faulty_memory(config, clock=clock)
    other, here = ctx(user=2), ctx(user=1)
    await memory.capture(turn(other, "user two speaks"))
    assert (await memory.run_tool(other, {"summary": "USER2-SECRET"})).success
    await memory.capture(turn(here, "user one speaks"))
    await memory.background.gather()  # the held commit is the upgrade's, not a hydration's
    store.hold()
    upgrade = asyncio.create_task(memory.run_tool(here, {"summary": "Both spoke."}))
    await store.holding()  # the upgrade's commit is in flight
    await memory.clear_short_term_memory_for_user(2)
    store.failures = 1
    store.release()
    result = await upgrade
    assert not result.success and "could not be saved" in result.message
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary is None
    await memory.flush()
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary is None
    await memory.close()


async def test_a_failed_upgrade_restores_the_entries_it_changed(
    config: STMConfig, clock: Clock
) -> None:
    """Rollback: when the commit fails and nothing else changed the entry, the turn's
    counters and the summary from before are back."""
    memory, store = await faulty_memory(config, clock=clock)
    c = ctx()
    await memory.capture(turn(c, "x"))
    assert (await memory.run_tool(c, {"summary": "BEFORE"})).success
    await memory.capture(turn(ctx(), "y"))
    store.failures = 1
    result = await memory.run_tool(ctx(), {"summary": "AFTER"})
    assert not result.success
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None
    assert entry.summary == "BEFORE" and entry.turns_since_refresh == 1
    assert entry.last_refreshed_turn == 1
    await memory.close()


async def test_two_concurrent_tool_calls_in_one_turn_upgrade_once(memory: ShortTermMemory) -> None:
    """The turn is claimed before the first await: of two calls racing, one succeeds and the
    other is refused, whatever order they finish in."""
    c = ctx()
    await memory.capture(turn(c, "x"))
    first, second = await asyncio.gather(
        memory.run_tool(c, {"summary": "FIRST"}), memory.run_tool(c, {"summary": "SECOND"})
    )
    assert [first.success, second.success] == [True, False]
    assert "already being applied" in second.message
    entry = await memory.get_entry("shortterm:server:100:10")
    assert entry is not None and entry.summary == "FIRST" and entry.last_refreshed_turn == 1


async def test_a_failed_upgrade_releases_the_turn_for_a_retry(
    config: STMConfig, clock: Clock
) -> None:
    """When the commit fails the claim is released: the model may call the tool again."""
    memory, store = await faulty_memory(config, clock=clock)
    c = ctx()
    await memory.capture(turn(c, "x"))
    await memory.build_context(c)  # the turn's reads are done: the failure is the commit's
    await memory.background.gather()
    store.failures = 1
    assert not (await memory.run_tool(c, {"summary": "LOST"})).success
    assert (await memory.run_tool(c, {"summary": "RETRIED"})).success
    await memory.close()


async def test_two_upgrades_of_one_entry_that_both_fail_leave_neither_in_the_cache(
    config: STMConfig, clock: Clock
) -> None:
    """Two turns upgrade the same entry at once and neither commit lands: the entry is back
    to what was saved before both, whichever failure is handled first (the later upgrade's
    "before" was the earlier one's content, which was never saved either)."""
    memory, store = await faulty_memory(config, clock=clock)
    try:
        first = ctx(user=1)
        await memory.capture(turn(first, "x"))
        assert (await memory.run_tool(first, {"summary": "SAVED"})).success
        first, second = ctx(user=1), ctx(user=2)  # new turns
        await memory.capture(turn(first, "y"))
        await memory.capture(turn(second, "z"))
        store.hold()
        one = asyncio.create_task(memory.run_tool(first, {"summary": "LOST-ONE"}))
        await store.holding()
        two = asyncio.create_task(memory.run_tool(second, {"summary": "LOST-TWO"}))
        await asyncio.sleep(0.01)
        store.broken = True
        store.release()
        results = await asyncio.gather(one, two)
        store.broken = False
        assert [r.success for r in results] == [False, False]
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is not None and entry.summary == "SAVED"
    finally:
        store.broken = False
        await memory.close()


async def test_an_upgrade_refused_by_the_store_is_undone_before_the_next_one_snapshots(
    config: STMConfig, clock: Clock
) -> None:
    """The store refuses an upgrade (its turn's feed position was pruned) and, before the
    refused turn resumes, another turn upgrades the same entry and is refused too: the
    entry holds what was saved before both, never the first refused summary (the second
    one's "before")."""
    config = config.model_copy(update={"coherence_seconds": 300})  # the follower reads rarely
    memory, store = await faulty_memory(config, clock=clock)
    try:
        await follower_read_once(memory)
        saved = ctx(user=1)
        await memory.capture(turn(saved, "x"))
        assert (await memory.run_tool(saved, {"summary": "SAVED"})).success
        first, second = ctx(user=1), ctx(user=2)
        for c in (first, second):
            await memory.build_context(c)  # both turns begin at the follower's old position
            await memory.capture(turn(c, "y"))
        await memory.flush()
        await store.prune_changes(older_than=clock.now + 3600)  # what came after is unknown
        store.hold()
        one = asyncio.create_task(memory.run_tool(first, {"summary": "REFUSED-ONE"}))
        await store.holding()
        ran = store._ran
        store.release()
        await store.until(lambda: store._ran is not ran)  # woken before the first turn resumes
        two = await memory.run_tool(second, {"summary": "REFUSED-TWO"})
        assert [(await one).success, two.success] == [False, False]
        entry = await memory.get_entry("shortterm:server:100:10")
        assert entry is not None and entry.summary == "SAVED"
    finally:
        await memory.close()
