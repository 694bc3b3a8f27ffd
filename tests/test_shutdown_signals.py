"""The signal handling of ``bot.py`` in this process: the first SIGTERM or Ctrl-C starts the
close, and a second one during it is ignored, so it cannot cut the memory's drain short.
(``test_bot_shutdown.py`` sends the first signal to the real bot as a subprocess.)"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from host.shutdown import run_until_signalled


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
async def test_a_second_signal_during_the_close_is_ignored(
    sig: signal.Signals, caplog: pytest.LogCaptureFixture
) -> None:
    started, drained = asyncio.Event(), asyncio.Event()
    release = asyncio.Event()
    steps: list[str] = []

    async def bot() -> int:
        try:
            started.set()
            await asyncio.Event().wait()  # runs until a signal cancels it
        except asyncio.CancelledError:
            steps.append("closing")
            drained.set()
            await release.wait()  # the drain takes a while; a second signal comes meanwhile
            steps.append("closed")
            raise
        return 1

    with caplog.at_level(logging.INFO, logger="host.shutdown"):
        running = asyncio.create_task(run_until_signalled(bot()))
        await started.wait()
        os.kill(os.getpid(), sig)
        await asyncio.wait_for(drained.wait(), 10)
        os.kill(os.getpid(), sig)  # during the close
        for _ in range(20):  # let the loop read the second signal and run its handler
            await asyncio.sleep(0.01)
        assert "still closing" in caplog.text
        release.set()
        assert await asyncio.wait_for(running, 10) == 0
    assert steps == ["closing", "closed"]  # the drain ran to its end
