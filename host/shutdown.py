"""SIGTERM and Ctrl-C close the bundled bot cleanly, in every mode of ``bot.py``.

The memory holds work that is not yet in the file (identity rows and counters
written behind, the scrub after a purge). It lands only when the bot closes:
closing unloads the cog, whose ``memory.close()`` drains it. Dying on the
signal's default action would drop that work.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Coroutine
from typing import Any

__all__ = ["SIGNALS", "run_until_signalled"]

log = logging.getLogger("host.shutdown")

SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def run_until_signalled(main: Coroutine[Any, Any, int]) -> int:
    """Run ``main`` (which must close its bot on the way out, e.g. ``async with bot``).

    On SIGINT or SIGTERM ``main`` is cancelled, so its clean-up runs (the bot
    closes, the memory drains), and 0 is returned: a requested stop that
    finished its work is a success. Further signals while it closes are ignored,
    since interrupting the drain is what the handler is there to prevent.
    """
    loop = asyncio.get_running_loop()
    task = asyncio.ensure_future(main)
    received: list[signal.Signals] = []

    def on_signal(sig: signal.Signals) -> None:
        if received:
            log.warning("%s: still closing, finishing the memory's pending writes", sig.name)
            return
        received.append(sig)
        log.info("%s: closing the bot and finishing the memory's pending writes", sig.name)
        task.cancel()

    installed = []
    for sig in SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
        except NotImplementedError:  # Windows' event loops: Ctrl-C stays KeyboardInterrupt.
            continue
        installed.append(sig)
    try:
        return await task
    except asyncio.CancelledError:
        if not received:
            raise
        return 0
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
