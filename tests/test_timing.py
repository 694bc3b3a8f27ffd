"""The one backoff rule: waits double after each failure, from the first delay up to
``MAX_BACKOFF``, and a success starts over."""

from __future__ import annotations

from stm.timing import MAX_BACKOFF, Backoff


def test_waits_double_up_to_the_cap_and_reset_on_success() -> None:
    backoff = Backoff(1.0)
    waits = [backoff.failed(100.0) for _ in range(8)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF]
    assert backoff.at == 100.0 + MAX_BACKOFF
    backoff.succeeded()
    assert (backoff.delay, backoff.at) == (0.0, 0.0)
    assert backoff.failed(5.0) == 1.0 and backoff.at == 6.0
