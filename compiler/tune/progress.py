"""`vpuc tune`'s terminal side: the progress bar over candidates, and Ctrl-C asking the
search to stop between MetaSchedule calls."""

from __future__ import annotations

import time

from tvm.ir.utils import derived_object


class StopOnInterrupt:
    """Ctrl-C during the search asks it to stop after the current MetaSchedule call (a
    KeyboardInterrupt raised inside TVM's C++ can abort the process); a second Ctrl-C
    interrupts at once."""

    def __init__(self) -> None:
        self.requested = False
        self.previous = None

    def __enter__(self):
        import signal
        import threading

        if threading.current_thread() is threading.main_thread():
            self.previous = signal.signal(signal.SIGINT, self._handle)
        return self

    def __exit__(self, *exc) -> None:
        import signal

        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)

    def _handle(self, signum, frame) -> None:
        import signal
        import sys

        if self.requested:
            signal.signal(signal.SIGINT, self.previous)
            raise KeyboardInterrupt
        self.requested = True
        print("vpuc tune: stopping after this round (records so far are kept); Ctrl-C again stops at once",
              file=sys.stderr)  # fmt: skip


class Progress:
    """A rich progress bar over trials; says when the time budget is spent."""

    def __init__(self, tasks: int, trials: int, time_budget_s: float | None, enabled: bool) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.trials, self.total, self.budget = 0, trials, time_budget_s
        self.start = time.perf_counter()
        self.stopped = False
        self.bar = Progress(
            TextColumn("[bold]tuning[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeElapsedColumn(), disable=not enabled, transient=False,
        )  # fmt: skip
        self.task_id = self.bar.add_task(f"{tasks} tasks", total=trials)

    def __enter__(self):
        self.bar.__enter__()
        return self

    def __exit__(self, *exc):
        self.bar.__exit__(*exc)

    def callback(self, ms):
        progress = self

        @derived_object
        class ProgressCallback(ms.measure_callback.PyMeasureCallback):
            def apply(self, task_scheduler, task_id, measure_candidates, builder_results, runner_results):
                progress.update(task_scheduler, len(runner_results))

        return ProgressCallback()

    def update(self, task_scheduler, measured: int) -> None:
        self.trials += measured
        self.bar.update(self.task_id, completed=min(self.trials, self.total))
        if self.budget is not None and time.perf_counter() - self.start >= self.budget:
            self.bar.update(self.task_id, description="time budget spent: finishing")
