"""Retries of the queue on their own: each failed transaction tells whoever waits, a batch
with deletes or write-behind in it is retried after the backoff, and a commit ends it."""

from __future__ import annotations

import logging

import pytest

from stm._queued import Queued
from stm._retrying import Retrying
from stm.store._base import DeleteChannel


def test_a_failure_tells_the_waiters_and_a_commit_ends_it(
    caplog: pytest.LogCaptureFixture,
) -> None:
    retrying = Retrying(0.5)
    trouble = retrying.trouble()
    assert retrying.healthy and retrying.due_at == 0.0
    kept = [Queued(1, DeleteChannel(10), what="clearing channel 10")]
    with caplog.at_level(logging.INFO, logger="stm.writer"):
        assert retrying.failed(OSError("locked"))
        assert trouble.is_set() and not retrying.trouble().is_set()
        retrying.retry(kept, True, 100.0)
        assert not retrying.healthy and retrying.due_at == 100.5
        assert not retrying.failed(OSError("locked"))  # not the first failure
        retrying.retry(kept, False, 101.0)
        assert retrying.due_at == 102.0  # the wait doubled
        retrying.now()
        assert retrying.due_at == 0.0 and not retrying.healthy
        retrying.succeeded()
    assert retrying.healthy and retrying.due_at == 0.0
    levels = [r.levelname for r in caplog.records]
    assert levels == ["ERROR", "WARNING", "INFO"]
    assert "retrying in 0.5s: clearing channel 10" in caplog.records[0].getMessage()
    assert "durable again" in caplog.records[-1].getMessage()


def test_a_batch_with_nothing_to_retry_leaves_nothing_failing() -> None:
    """Its callers heard the error; nothing stays at the head of the queue."""
    retrying = Retrying(0.5)
    retrying.failed(OSError("locked"))
    retrying.retry([], True, 100.0)
    assert retrying.healthy and retrying.due_at == 0.0
