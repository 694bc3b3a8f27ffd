"""A purge from the command line reaches a bot process that is running on the database.

The bot process holds crude messages only in its own memory; the command line is
another process. After ``purge-user`` exits, the bot must stop showing anything of the
purged user within the coherence bound (``STM_COHERENCE_SECONDS``, default 2 s).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from bot_client import BotProcess
from test_cli import stm_process_at

BOUND = 2.0  # STM_COHERENCE_SECONDS' default
PURGED = "WORDS-OF-USER-42-3b7e"
PURGED_SUMMARY = "SUMMARY-HOLDING-USER-42-c1d9"
KEPT = "WORDS-OF-USER-7-88aa"
BOTH_STORES = True
pytestmark = pytest.mark.process


class Bot(BotProcess):
    """A bot process on the database, with the default coherence bound."""

    def shows(self, words: str) -> bool:
        """Does any context or entry this process would serve hold ``words``?"""
        views = [
            self.call(op="shown", user=7, channel=11, server=100),  # channel 10 as "other"
            self.call(op="shown", user=7, channel=10, server=100),
            self.call(op="shown", user=42, channel=10, server=100),
        ]
        return any(words in view["text"] for view in views)


@pytest.fixture
def bot(store_database: str, tmp_path: Path) -> Iterator[Bot]:
    running = Bot(store_database, tmp_path)
    try:
        yield running
    finally:
        running.close()


def test_a_cli_purge_reaches_a_running_bot(bot: Bot, store_database: str, tmp_path: Path) -> None:
    """After ``purge-user 42`` exits, the bot shows none of 42's words (crude messages held
    only in the bot, and the shared summary 42 contributed to) within the bound, and keeps
    the other user's words."""
    bot.call(op="capture", user=42, channel=10, server=100, text=PURGED)
    bot.call(op="capture", user=7, channel=10, server=100, text=KEPT)
    upgrade = bot.call(op="upgrade", user=42, channel=10, server=100, summary=PURGED_SUMMARY)
    assert upgrade["success"], upgrade["message"]
    assert bot.shows(PURGED) and bot.shows(PURGED_SUMMARY) and bot.shows(KEPT)

    purge = stm_process_at(tmp_path, store_database, "purge-user", "42", "--yes")
    committed = time.monotonic()
    assert purge.status == 0, purge.err
    while bot.shows(PURGED) or bot.shows(PURGED_SUMMARY):
        # Poll well past the bound so that the delay is measured, not just judged.
        assert time.monotonic() - committed < BOUND + 3, "the bot still shows user 42"
        time.sleep(0.02)
    delay = time.monotonic() - committed
    print(f"\nCLI purge reached the bot process in {delay:.3f} s (bound {BOUND} s)")
    assert delay <= BOUND
    for _ in range(5):
        assert not bot.shows(PURGED) and not bot.shows(PURGED_SUMMARY)
    assert bot.shows(KEPT)
