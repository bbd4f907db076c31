"""`vpuc tune`'s rounds: how many candidates the next MetaSchedule call measures, sized to
the time budget left."""

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
