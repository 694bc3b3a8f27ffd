"""Purges that wipe a server's memory are seen: the watch's rules on their own, then through
the facade on both stores (what the store counted, the warning, the counters)."""

from __future__ import annotations

import logging

import pytest
from helpers import Opener
from prometheus_client.parser import text_string_to_metric_families

from stm import PurgeAlert, ShortTermMemory
from stm._purgewatch import (
    REPEAT_LIMIT,
    SHARE_MINIMUM,
    SHARE_THRESHOLD,
    WINDOW_SECONDS,
    PurgeWatch,
    describe_alert,
)
from stm.prometheus import exposition
from stm.testing import Clock, ctx, turn

BOTH_STORES = True
SERVER, OTHER = 100, 200
GENERAL = 10
ALICE, MOD = 1, 9


class TestTheRules:
    """The thresholds as the module states them, without a store."""

    def test_a_purge_over_the_share_is_an_alert_and_one_at_it_is_not(self) -> None:
        watch = PurgeWatch()
        at = int(SHARE_THRESHOLD * 40)
        assert watch.record(0, member=1, user_id=1, shared_by_server={SERVER: at},
                            distilled_by_server={SERVER: 40}) == []  # fmt: skip
        (alert,) = watch.record(
            1, member=2, user_id=2, shared_by_server={SERVER: at + 1},
            distilled_by_server={SERVER: 40},
        )  # fmt: skip
        assert (alert.reason, alert.server_id, alert.member, alert.shared) == (
            "share", SERVER, 2, at + 1,
        )  # fmt: skip
        assert alert.distilled == 40 and alert.share == pytest.approx((at + 1) / 40)

    def test_a_small_server_losing_a_few_entries_is_not_an_alert(self) -> None:
        watch = PurgeWatch()
        few = SHARE_MINIMUM - 1
        assert watch.record(0, member=1, user_id=1, shared_by_server={SERVER: few},
                            distilled_by_server={SERVER: few}) == []  # fmt: skip

    def test_repeats_by_one_member_in_one_server_within_the_window(self) -> None:
        watch = PurgeWatch()
        one = {SERVER: 1}
        big = {SERVER: 1000}
        for n in range(REPEAT_LIMIT - 1):
            assert watch.record(n, member=1, user_id=1, shared_by_server=one,
                                distilled_by_server=big) == []  # fmt: skip
        # Another member, another server, and a purge that cleared nothing shared: no
        # repeat of member 1's in SERVER.
        assert watch.record(10, member=2, user_id=2, shared_by_server=one,
                            distilled_by_server=big) == []  # fmt: skip
        assert watch.record(11, member=1, user_id=1, shared_by_server={OTHER: 1},
                            distilled_by_server={OTHER: 1000}) == []  # fmt: skip
        assert watch.record(12, member=1, user_id=1, shared_by_server={SERVER: 0},
                            distilled_by_server=big) == []  # fmt: skip
        (alert,) = watch.record(20, member=1, user_id=7, shared_by_server=one,
                                distilled_by_server=big)  # fmt: skip
        assert (alert.reason, alert.purges, alert.shared_in_window) == (
            "repeated", REPEAT_LIMIT, REPEAT_LIMIT,
        )  # fmt: skip
        assert "member 1 keeps clearing the memory of server 100" in describe_alert(alert)

    def test_purges_older_than_the_window_are_forgotten(self) -> None:
        watch = PurgeWatch()
        one, big = {SERVER: 2}, {SERVER: 1000}
        for at in (0, 10):
            watch.record(at, member=1, user_id=1, shared_by_server=one, distilled_by_server=big)
        later = WINDOW_SECONDS + 5  # the first has left the window, the second has not
        assert watch.recent(SERVER, later).purges == 1
        assert REPEAT_LIMIT == 3  # so two in the window are not a repeat yet
        assert watch.record(later, member=1, user_id=1, shared_by_server=one,
                            distilled_by_server=big) == []  # fmt: skip
        recent = watch.recent(SERVER, later)
        assert (recent.purges, recent.shared, recent.over_threshold) == (2, 4, 0)
        assert watch.recent(OTHER, later).purges == 0

    def test_what_it_keeps_is_bounded(self) -> None:
        watch = PurgeWatch(kept=10)
        for n in range(100):
            watch.record(n, member=n, user_id=n, shared_by_server={SERVER: 1},
                         distilled_by_server={SERVER: 9})  # fmt: skip
        assert watch.recent(SERVER, 100).purges == 10


async def _notes_showing_alice(memory: ShortTermMemory, users: range) -> None:
    """Alice speaks in #general and its notes are written (her own entry is distilled too),
    then each of ``users`` upgrades the channel's notes from a prompt that shows her
    message: each of their entries may hold her words."""
    alice = ctx(user=ALICE, channel=GENERAL, server=SERVER)
    await memory.capture(turn(alice, "ALICE-SAID"))
    assert (await memory.run_tool(alice, {"summary": "notes of Alice"})).success
    for user in users:
        here = ctx(user=user, channel=GENERAL, server=SERVER)
        await memory.capture(turn(here, f"user {user} here"))
        assert (await memory.run_tool(here, {"summary": f"notes of {user}"})).success


async def test_a_purge_that_clears_most_of_a_server_is_logged_counted_and_recent(
    open_memory: Opener, caplog: pytest.LogCaptureFixture
) -> None:
    """The store counts what the purge reaches when it plans it; over the threshold the
    facade warns, with the member, the server and the counts, and the counters move."""
    memory = await open_memory()
    await _notes_showing_alice(memory, range(100, 108))
    preview = await memory.preview_purge(ALICE, SERVER)
    with caplog.at_level(logging.WARNING, logger="stm"):
        done = await memory.purge(ALICE, SERVER, requested_by=MOD)
    # Counted when the purge was planned as the preview counts them: her own entry among
    # the server's distilled ones (before it went), not among the shared.
    assert (done.own, done.shared_by_server, done.distilled_by_server) == (
        1, preview.shared_by_server, preview.distilled_by_server,
    )  # fmt: skip
    assert done.distilled_by_server[SERVER] == done.shared_by_server[SERVER] + 1
    shared = done.shared_by_server[SERVER]
    assert shared >= SHARE_MINIMUM and done.share_of(SERVER) > SHARE_THRESHOLD
    (record,) = [r for r in caplog.records if r.levelno == logging.WARNING]
    line = record.getMessage()
    assert f"user {ALICE} by member {MOD}" in line and f"server {SERVER}" in line
    assert f"{shared} of the {done.distilled_by_server[SERVER]} distilled entries" in line
    m = memory.metrics
    assert (m.purged_shared_entries, m.purges_over_threshold, m.repeated_purges) == (
        shared, 1, 0,
    )  # fmt: skip
    recent = memory.recent_purges(SERVER)
    assert (recent.purges, recent.shared, recent.over_threshold) == (1, shared, 1)
    assert memory.recent_purges(OTHER).purges == 0
    families = {f.name: f for f in text_string_to_metric_families(exposition(memory))}
    assert families["stm_purged_shared_entries"].samples[0].value == shared
    assert families["stm_purges_over_threshold"].samples[0].value == 1


async def test_one_member_purging_again_and_again_is_told_to_the_handler(
    store_database: str, clock: Clock
) -> None:
    """Each purge clears a little; the third within the window goes to ``on_purge_alert``
    (nothing is logged instead), and a day later the count starts over."""
    from stm import STMConfig

    told: list[PurgeAlert] = []
    config = STMConfig(database=store_database)
    async with ShortTermMemory.open(config, clock=clock, on_purge_alert=told.append) as memory:
        for round_ in range(REPEAT_LIMIT):
            await _notes_showing_alice(memory, range(100 + round_, 101 + round_))
            done = await memory.purge(ALICE)
            assert 0 < done.shared < SHARE_MINIMUM
            clock.advance(hours=1)
        assert [a.reason for a in told] == ["repeated"]
        assert (told[0].member, told[0].user_id, told[0].purges) == (ALICE, ALICE, REPEAT_LIMIT)
        assert memory.metrics.repeated_purges == 1
        clock.advance(WINDOW_SECONDS)
        await _notes_showing_alice(memory, range(200, 201))
        await memory.purge(ALICE)
        assert len(told) == 1
        assert memory.recent_purges(SERVER).purges == 1


async def test_a_failing_handler_does_not_break_the_purge(
    store_database: str, caplog: pytest.LogCaptureFixture
) -> None:
    from stm import STMConfig

    def broken(alert: PurgeAlert) -> None:
        raise RuntimeError("handler on fire")

    config = STMConfig(database=store_database)
    async with ShortTermMemory.open(config, on_purge_alert=broken) as memory:
        await _notes_showing_alice(memory, range(100, 108))
        done = await memory.purge(ALICE)
        assert done.shared >= SHARE_MINIMUM
        assert (await memory.get_entry(f"shortterm:server:{SERVER}:{GENERAL}")) is None or (
            await memory.get_entry(f"shortterm:server:{SERVER}:{GENERAL}")
        ).summary is None
    assert "handler on fire" in caplog.text and "cleared the notes of" in caplog.text


async def test_a_purge_planned_over_several_transactions_is_counted_when_planned(
    open_memory: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When the store needs more than the purge's first transaction to plan it, what it
    reaches is counted by the step that completes the plan, and watched all the same."""
    from stm.store import _chains as chains

    monkeypatch.setattr(chains, "SEED_CHUNK", 1)  # one membership per planning step
    memory = await open_memory()
    channels = range(20, 20 + 2 * chains.PLAN_STEPS)
    for channel in channels:
        for user in (ALICE, 2):  # user 2's notes are written from a prompt showing Alice's
            here = ctx(user=user, channel=channel, server=SERVER)
            await memory.capture(turn(here, f"user {user} in {channel}"))
            assert (await memory.run_tool(here, {"summary": f"notes {user} {channel}"})).success
    preview = await memory.preview_purge(ALICE)
    done = await memory.purge(ALICE)
    assert (done.own, done.shared) == (len(channels), 2 * len(channels))
    assert (done.shared_by_server, done.distilled_by_server) == (
        preview.shared_by_server, preview.distilled_by_server,
    )  # fmt: skip
    assert memory.recent_purges(SERVER).shared == 2 * len(channels)
    assert memory.metrics.purges_over_threshold == 1
