"""The memory's audience hook: asked at each prompt which other channels may be shown,
once for the newest candidates; what it refuses, fails on or is not asked about is not
shown; the flag of capture is not trusted when there is one; DMs never ask."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence

import pytest

from stm import Audience, ShortTermMemory, STMConfig
from stm.testing import Clock, ctx, turn

BOTH_STORES = True
SERVER = 100
EVERYONE = {"alice", "bob", "sam"}
STAFF = {"sam"}


class Readers:
    """A host's audience: channel -> who reads it; records every question."""

    def __init__(self, readers: dict[int, set[str]] | None = None) -> None:
        self.readers = readers or {}
        self.asked: list[tuple[int, int, list[int]]] = []
        self.fail = False

    def may_recall(self, server_id: int, into: int, from_: Sequence[int]) -> Collection[int]:
        self.asked.append((server_id, into, list(from_)))
        if self.fail:
            raise RuntimeError("the platform's cache is gone")
        present = self.readers.get(into, EVERYONE)
        return {c for c in from_ if present <= self.readers.get(c, EVERYONE)}


async def opened(config: STMConfig, clock: Clock, audience: Audience | None) -> ShortTermMemory:
    return await ShortTermMemory.open(config, clock=clock, audience=audience)


async def say_in(memory: ShortTermMemory, clock: Clock, *channels: int, **fields: bool) -> None:
    for channel in channels:
        clock.advance(1)
        await memory.capture(turn(ctx(channel=channel, **fields), f"words of {channel}"))


def shown(text: str, *channels: int) -> set[int]:
    return {c for c in channels if f"words of {c}" in text}


async def test_one_question_per_prompt_for_the_newest_candidates(config: STMConfig, clock: Clock):
    readers = Readers()
    async with await opened(config, clock, readers) as memory:
        await say_in(memory, clock, 11, 12, 13, 14, 15)
        readers.asked.clear()
        text = str(await memory.build_context(ctx(channel=10)))
    assert readers.asked == [(SERVER, 10, [15, 14, 13])]  # max_other_channels: 3
    assert shown(text, 11, 12, 13, 14, 15) == {13, 14, 15}


async def test_refused_channels_are_left_out_and_more_are_asked_at_once(
    config: STMConfig, clock: Clock
):
    readers = Readers({14: STAFF, 15: STAFF})
    async with await opened(config, clock, readers) as memory:
        await say_in(memory, clock, 11, 12, 13, 14, 15)
        readers.asked.clear()
        text = str(await memory.build_context(ctx(channel=10)))
        assert shown(text, 11, 12, 13, 14, 15) == {11, 12, 13}
        assert readers.asked == [(SERVER, 10, [15, 14, 13]), (SERVER, 10, [12, 11])]
        # The staff's channels are shown in each other, and the public ones in them.
        text = str(await memory.build_context(ctx(channel=14)))
        assert shown(text, 11, 12, 13, 15) == {15, 13, 12}


async def test_the_flag_of_capture_is_not_trusted_with_an_audience(config: STMConfig, clock: Clock):
    """Flagged private at capture but readable by all now: shown; flagged public but
    refused now: not shown. The audience decides at each prompt."""
    readers = Readers()
    async with await opened(config, clock, readers) as memory:
        await say_in(memory, clock, 11, channel_is_private=True)
        await say_in(memory, clock, 12)
        assert shown(str(await memory.build_context(ctx(channel=10))), 11, 12) == {11, 12}
        readers.readers[12] = STAFF
        assert shown(str(await memory.build_context(ctx(channel=10))), 11, 12) == {11}


async def test_a_restart_decides_from_the_audience(config: STMConfig, clock: Clock):
    """After a restart, notes are read back whatever their flag of capture, and the
    audience decides (crude messages stay in the process that captured them)."""
    async with await opened(config, clock, None) as memory:
        for channel, private in ((11, True), (12, False)):
            turn_ctx = ctx(channel=channel, channel_is_private=private)
            await memory.capture(turn(turn_ctx, "hello"))
            await memory.build_context(turn_ctx)
            result = await memory.run_tool(turn_ctx, {"summary": f"words of {channel}"})
            assert result.success, result.message
    readers = Readers({12: STAFF})
    async with await opened(config, clock, readers) as memory:
        assert shown(str(await memory.build_context(ctx(channel=10))), 11, 12) == {11}
    async with await opened(config, clock, None) as memory:  # no audience: as before
        assert shown(str(await memory.build_context(ctx(channel=10))), 11, 12) == {12}


async def test_an_audience_that_fails_recalls_nothing(
    config: STMConfig, clock: Clock, caplog: pytest.LogCaptureFixture
):
    readers = Readers()
    async with await opened(config, clock, readers) as memory:
        await say_in(memory, clock, 11, 10)
        readers.fail = True
        with caplog.at_level(logging.ERROR, logger="stm"):
            text = str(await memory.build_context(ctx(channel=10)))
    assert shown(text, 11) == set()
    assert "nothing recalled" in caplog.text


async def test_an_answer_that_is_not_channel_ids_recalls_nothing(
    config: STMConfig, clock: Clock, caplog: pytest.LogCaptureFixture
):
    class Wrong:
        def may_recall(self, server_id: int, into: int, from_: Sequence[int]) -> object:
            return 11  # not a collection

    async with await opened(config, clock, Wrong()) as memory:  # type: ignore[arg-type]
        await say_in(memory, clock, 11)
        with caplog.at_level(logging.ERROR, logger="stm"):
            assert shown(str(await memory.build_context(ctx(channel=10))), 11) == set()
    assert "not channel ids" in caplog.text


async def test_dms_never_ask(config: STMConfig, clock: Clock):
    readers = Readers()
    async with await opened(config, clock, readers) as memory:
        await memory.capture(turn(ctx(channel=900, server=None), "dm one"))
        await memory.capture(turn(ctx(channel=901, server=None), "dm two"))
        text = str(await memory.build_context(ctx(channel=900, server=None)))
    assert readers.asked == [] and "dm two" not in text


def test_an_audience_without_may_recall_is_refused(config: STMConfig):
    with pytest.raises(TypeError, match="may_recall"):
        ShortTermMemory(config, store=None, audience=lambda *a: set())  # type: ignore[arg-type]
