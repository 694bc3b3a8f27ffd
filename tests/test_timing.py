"""The one backoff rule: waits double after each failure, from the first delay up to
``MAX_BACKOFF``, and a success starts over. A purge's steps are sized by how long the
last one took."""

from __future__ import annotations

from stm._timing import MAX_BACKOFF, Backoff, PurgeSteps, StepSizer


def test_waits_double_up_to_the_cap_and_reset_on_success() -> None:
    backoff = Backoff(1.0)
    waits = [backoff.failed(100.0) for _ in range(8)]
    assert waits == [1.0, 2.0, 4.0, 8.0, 16.0, MAX_BACKOFF, MAX_BACKOFF, MAX_BACKOFF]
    assert backoff.at == 100.0 + MAX_BACKOFF
    backoff.succeeded()
    assert (backoff.delay, backoff.at) == (0.0, 0.0)
    assert backoff.failed(5.0) == 1.0 and backoff.at == 6.0


def test_a_step_size_follows_how_long_steps_take() -> None:
    sizer = StepSizer(target=0.02, floor=1 / 16)
    sizer.took(0.04)  # twice the target: half the size
    assert sizer.size == 0.5
    sizer.took(1.0)  # far past it: halved at most
    assert sizer.size == 0.25
    sizer.took(0.02)  # on target: kept
    assert sizer.size == 0.25
    for _ in range(10):
        sizer.took(10.0)
    assert sizer.size == 1 / 16  # never below the floor
    sizer.took(0.005)  # four times quicker: doubled at most
    assert sizer.size == 1 / 8
    for _ in range(10):
        sizer.took(0.0)
    assert sizer.size == 1.0  # never past the full chunks


def test_each_kind_of_a_purge_step_is_sized_on_its_own() -> None:
    steps = PurgeSteps(target=0.02, start=0.25)
    assert steps.sizes() == ()
    steps.took(["clear"], 0.04)  # a slow clear halves the next clear only
    steps.took(["page"], 0.005)  # a quick page doubles the next page only
    assert dict(steps.sizes()) == {"clear": 0.125, "page": 0.5}
    assert steps.sizer("finish").size == 0.25  # a kind not seen yet starts at ``start``
    steps.took(["clear", "finish"], 0.04)  # a step of two kinds counts against both
    assert dict(steps.sizes()) == {"clear": 0.0625, "page": 0.5, "finish": 0.125}
