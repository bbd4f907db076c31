"""`vpuc tune` shares its rounds among tasks by their share of the model's time
(compiler/tune/rounds.py); the expected counts are worked by hand from the shares."""

from __future__ import annotations

import pytest

from vpuc.compiler.tune.rounds import MIN_SHARE, RoundPlan, time_shares


def test_shares_are_latency_times_calls_over_the_model():
    # 3 calls of 10 us, 1 of 50 us, one kernel that did not run: 30 + 50 + 0 = 80 us
    assert time_shares([30.0, 50.0, None]) == pytest.approx([0.375, 0.625, 0.0])


def test_rounds_follow_the_shares_and_skip_small_tasks():
    plan = RoundPlan([0.6, 0.3, 0.09, 0.01])
    assert plan.closed == {3}  # 1% < MIN_SHARE
    assert MIN_SHARE > 0.01
    for _ in range(99):
        plan.record(plan.next(), 1)
    # 99 candidates over shares 0.6 : 0.3 : 0.09 (0.99 in all): 60, 30 and 9
    assert plan.spent == [60, 30, 9, 0]


def test_a_task_whose_space_is_spent_is_not_searched_again():
    plan = RoundPlan([0.5, 0.5])
    first = plan.next()
    plan.record(first, 0)  # the call measured no new candidate
    assert plan.next() == 1 - first
    plan.record(1 - first, 0)
    assert plan.next() is None


def test_when_every_task_is_small_the_largest_is_searched():
    shares = [0.015] * 60 + [0.1]
    assert RoundPlan(shares).next() == 60
