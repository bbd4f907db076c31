"""`vpuc tune`'s rounds: which task the next MetaSchedule call searches (`RoundPlan`, by each
task's share of the model's time) and how many candidates it measures (`RoundClock`, sized
to the time budget left)."""

from __future__ import annotations

import time

FIRST_CALL_TRIALS = 2  # with --time-budget, the first call measures a candidate's cost


class RoundClock:
    """Sizes each MetaSchedule call to the time left (issue 26 item 2): a call of n candidates
    is projected at n times the seconds per candidate its task's last call took (build, run and
    the check after it, at the machine's load then), a task not yet searched at the slowest
    first call's rate, and the very first call tries FIRST_CALL_TRIALS. A call whose projection
    ends past the deadline is shortened; one that cannot fit a candidate is not started."""

    def __init__(self, deadline: float | None) -> None:
        self.deadline = deadline
        self.rate: dict[int, float] = {}  # task -> seconds per candidate, its last call
        self.first_rate = 0.0  # the slowest first call of any task, seconds per candidate
        self.first_end: float | None = None  # when the search's first call ended

    def trials(self, task: int, wanted: int) -> int:
        if self.deadline is None:
            return wanted
        rate = self.rate.get(task, self.first_rate)
        if rate == 0.0:
            return min(wanted, FIRST_CALL_TRIALS)
        return min(wanted, int((self.deadline - time.perf_counter()) / rate))

    def record(self, task: int, n: int, seconds: float) -> None:
        if self.first_end is None:
            self.first_end = time.perf_counter()
        if task not in self.rate:
            self.first_rate = max(self.first_rate, seconds / n)
        self.rate[task] = seconds / n


MIN_SHARE = 0.02  # a task under this share of the model's time is not searched


def time_shares(costs_us: list[float | None]) -> list[float]:
    """Each task's share of the model's time: its default schedule's latency times the calls
    the model makes to it, over the sum of all (a task not timed counts 0)."""
    costs = [max(c or 0.0, 0.0) for c in costs_us]
    total = sum(costs)
    return [c / total if total > 0 else 1.0 / len(costs) for c in costs]


class RoundPlan:
    """Which task the next MetaSchedule call searches: the one furthest behind its share of the
    model's time (candidates measured so far over its share, least first), so the search time
    each task gets follows what it can save the model. Tasks under MIN_SHARE are not searched
    (5% faster on 2% of the model is 0.1% of it); nor is one whose last call measured nothing
    new (its space is spent)."""

    def __init__(self, shares: list[float]) -> None:
        self.shares = shares
        self.spent = [0] * len(shares)
        self.closed = {i for i, share in enumerate(shares) if share < MIN_SHARE}
        if len(self.closed) == len(shares) and shares:  # every task small: the largest is searched
            self.closed.discard(max(range(len(shares)), key=lambda i: shares[i]))
        self.calls = 0

    def next(self) -> int | None:
        open_tasks = [i for i in range(len(self.shares)) if i not in self.closed]
        if not open_tasks:
            return None
        return min(open_tasks, key=lambda i: (self.spent[i] / self.shares[i], -self.shares[i]))

    def record(self, task: int, measured: int) -> None:
        self.calls += 1
        self.spent[task] += max(measured, 1)
        if measured == 0:
            self.closed.add(task)
