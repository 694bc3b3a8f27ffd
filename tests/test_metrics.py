"""Metrics: every counter moves with what it counts, the snapshot is plain data, and the
Prometheus adapter exposes the same numbers (and is imported only when used)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import Opener
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from stm import ShortTermMemory, STMConfig
from stm._metrics import REFUSAL_REASONS, MetricsSnapshot
from stm.prometheus import MemoryCollector, exposition, register
from stm.testing import Clock, ctx, faulty_memory, turn

ROOT = Path(__file__).resolve().parent.parent


async def upgrade(memory: ShortTermMemory, user: int = 1, channel: int = 10, **fields: object):
    c = ctx(user=user, channel=channel, **fields)
    await memory.capture(turn(c, f"hello from {user}"))
    return await memory.run_tool(c, {"summary": f"user {user} in {channel}"})


async def test_turns_upgrades_and_deletes_are_counted(open_memory: Opener) -> None:
    """Captures, upgrades (with their time), clears, purges and janitor passes."""
    memory = await open_memory()
    before = memory.metrics
    assert before.captures == before.upgrades == 0
    for user in (1, 2, 3):
        assert (await upgrade(memory, user=user)).success
    await memory.capture(turn(ctx(user=4), "just a turn"))
    await memory.clear_short_term_memory_for_channel(10)
    await memory.clear_short_term_memory_for_user(2)
    await memory.clear_short_term_memory_for_user(3, server_id=100)
    await memory.run_janitor()
    await memory.flush()
    m = memory.metrics
    assert (m.captures, m.upgrades) == (4, 3)
    assert m.upgrade_seconds > 0
    assert (m.channel_clears, m.user_purges, m.janitor_passes) == (1, 2, 1)
    assert m.writer_batches >= 3 and m.writer_batch_ops >= m.writer_batches
    assert m.writer_largest_batch >= 1 and m.commit_seconds > 0
    assert m.writer_queue_depth == 0
    assert (m.durable_write_failures, m.durable_write_retries) == (0, 0)
    assert m.feed_lag_seconds is None or m.feed_lag_seconds >= 0


async def test_refusals_are_counted_by_reason(open_memory: Opener) -> None:
    """Each reason the tool says no is a label of its own."""
    memory = await open_memory()
    assert not (await memory.run_tool(ctx(), "not json")).success
    assert not (
        await memory.run_tool(ctx(user_text="please remember this"), {"summary": "x"})
    ).success
    await memory.set_user_opt_out(5, True)
    assert not (await memory.run_tool(ctx(user=5), {"summary": "x"})).success
    done = ctx(user=6)
    await memory.capture(turn(done, "hi"))
    assert (await memory.run_tool(done, {"summary": "x"})).success
    assert not (await memory.run_tool(done, {"summary": "y"})).success
    cleared = ctx(user=7, channel=70)
    await memory.capture(turn(cleared, "hi"))
    await memory.build_context(cleared)  # the turn begins
    await memory.clear_short_term_memory_for_channel(70)
    assert not (await memory.run_tool(cleared, {"summary": "z"})).success
    await memory.update_server_settings(100, enabled=False)
    assert not (await memory.run_tool(ctx(user=8), {"summary": "x"})).success
    refusals = memory.metrics.refusals
    assert set(refusals) == set(REFUSAL_REASONS)
    assert refusals["invalid_arguments"] == 1
    assert refusals["explicit_intent"] == 1
    assert refusals["opted_out"] == 1
    assert refusals["already_updated"] == 1
    assert refusals["cleared"] == 1
    assert refusals["disabled"] == 1
    assert sum(refusals.values()) == 6


async def test_store_faults_are_counted(config: STMConfig, clock: Clock) -> None:
    """A failed commit is a durable-write failure and a 'not_saved' refusal, a failed read
    a hydration failure and an 'unavailable' refusal; each later attempt at the retried
    delete is a retry."""
    async with ShortTermMemory.open(config, clock=clock) as first:
        assert (await upgrade(first, user=9, channel=90)).success
    memory, store = await faulty_memory(config, clock=clock)
    try:
        assert (await upgrade(memory)).success  # read and saved while the store works
        store.broken = True
        assert not (await upgrade(memory)).success  # the commit fails
        assert not (await upgrade(memory, user=3, channel=33)).success  # the read fails
        await memory.get_entry("shortterm:user:9:90")
        await memory.clear_short_term_memory_for_channel(10)
        with pytest.raises(Exception, match="could not make this durable"):
            await memory.flush()
        store.broken = False
        await memory.flush()
        m = memory.metrics
        assert m.refusals["not_saved"] == 1
        assert m.refusals["unavailable"] == 1
        assert m.hydration_failures >= 1
        assert m.durable_write_failures >= 2
        assert m.durable_write_retries >= 1
    finally:
        await memory.close()


async def test_hydrations_and_the_cache_are_counted(open_memory: Opener) -> None:
    """Reads of rows after a restart, the cache's size and its evictions."""
    memory = await open_memory()
    for channel in (10, 11, 12):
        assert (await upgrade(memory, channel=channel)).success
    await memory.close()
    memory = await open_memory(cache_max_keys=2)
    for channel in (10, 11, 12):
        await memory.get_entry(f"shortterm:user:1:{channel}")
    m = memory.metrics
    assert m.hydrations >= 3 and m.hydrated_keys >= 3
    assert m.cache_keys == 2
    assert m.cache_evictions >= 1
    assert memory.stats["cached_keys"] == 2  # the older counters still answer
    assert memory.stats["evicted_keys"] == m.cache_evictions


async def test_a_snapshot_is_plain_data(open_memory: Opener) -> None:
    """A snapshot does not change after it was taken, and is a JSON-ready dict too."""
    memory = await open_memory()
    first = memory.metrics
    assert (await upgrade(memory)).success
    assert first.upgrades == 0 and memory.metrics.upgrades == 1
    data = memory.metrics.as_dict()
    assert data["upgrades"] == 1 and isinstance(data["refusals"], dict)
    assert isinstance(memory.metrics, MetricsSnapshot)


async def test_prometheus_text_has_the_same_numbers(open_memory: Opener) -> None:
    """The exposition parses, and its samples are the snapshot's numbers."""
    memory = await open_memory()
    assert (await upgrade(memory)).success
    await memory.capture(turn(ctx(channel=11), "another turn"))
    assert not (await memory.run_tool(ctx(), "not json")).success
    await memory.flush()
    text = exposition(memory)
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    m = memory.metrics
    assert samples[("stm_captures_total", ())] == m.captures == 2
    assert samples[("stm_upgrades_total", ())] == 1
    assert samples[("stm_upgrade_refusals_total", (("reason", "invalid_arguments"),))] == 1
    assert samples[("stm_upgrade_refusals_total", (("reason", "busy"),))] == 0
    assert samples[("stm_cache_keys", ())] == m.cache_keys == 4
    assert samples[("stm_writer_batch_ops_count", ())] == m.writer_batches
    assert samples[("stm_upgrade_seconds_sum", ())] == pytest.approx(m.upgrade_seconds)
    assert 0 <= samples[("stm_feed_lag_seconds", ())] < 60
    registry = CollectorRegistry()
    collector = register(memory, registry)
    assert isinstance(collector, MemoryCollector)
    assert registry.get_sample_value("stm_upgrades_total") == 1


@pytest.mark.process
def test_the_client_is_imported_only_when_used() -> None:
    """Importing stm (and stm.prometheus) does not import prometheus_client; using the
    adapter without it says which extra to install."""
    code = (
        "import sys, stm, stm.prometheus\n"
        "assert 'prometheus_client' not in sys.modules\n"
        "sys.modules['prometheus_client'] = None\n"
        "try:\n"
        "    stm.prometheus.MemoryCollector(lambda: None)\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "discord-stm[metrics]" in done.stdout
