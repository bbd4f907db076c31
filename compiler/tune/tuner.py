"""`vpuc tune`: MetaSchedule search over a model's host kernels, into a tuning database.

    model -> prepare (the driver's stages before the host build) -> lower to kernels
          -> tasks (distinct kernels) -> MetaSchedule: evolutionary search over its default
             CPU design space, candidates built and timed on this machine
          -> per task, after each round that improved its best: that candidate, checked
             against the default schedule (same outputs on seeded inputs, and at least
             MIN_SPEEDUP times faster, both timed here) -> the database (database.py),
             written at once: an interrupted tune (Ctrl-C, the budget) keeps every record
             stored so far, and a rerun on the same database starts from them

Budget: --trials N candidates in all (default TRIALS_PER_TASK per task) and/or
--time-budget seconds, whichever ends first. The search runs in rounds (one task, at most
MAX_TRIALS_PER_ITER candidates, BUDGET_TRIALS_PER_ROUND under a budget); under a budget each
round is sized to the time left at the seconds per candidate measured so far, and a round
that cannot fit one candidate is not started (`_RoundClock`); no TVM task is terminated.
MetaSchedule's cost model here is "random" (its default, XGBoost, is a dependency we do
not pin): the search still keeps the measured best of each batch and mutates it.

A MetaSchedule candidate is not trusted: on this TVM one random point of the attention
kernel's space computed wrong results, so every record is validated before it is stored.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import tvm
from tvm.ir.utils import derived_object

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, last_line
from vpuc.compiler.host import database as tuning_db
from vpuc.compiler.host.defaults import default_schedule
from vpuc.compiler.host.target import HostTarget
from vpuc.compiler.host.tasks import Task

TRIALS_PER_TASK = 256
MAX_TRIALS_PER_ITER = 32
# With the random cost model, evolving a big population between rounds buys nothing but
# minutes per round (MetaSchedule's default is 512 x 4 iterations): a small population
# around the measured best keeps rounds short, so a time budget reaches every task.
POPULATION = 64
GENETIC_ITERS = 1
EVOLUTION_MIN_TRIALS_PER_TASK = 16  # below: random samples of the space (replay-trace)
BUDGET_TRIALS_PER_ROUND = 8  # with --time-budget: rounds short enough to stop within 10 %
FIRST_CALL_TRIALS = 2  # with --time-budget, the first call measures a candidate's cost
MIN_SPEEDUP = 1.05  # a record is kept only when this much faster than the default
TIMING_REPEATS = 20
CHECK_GAIN = 1.05  # a task's new best is checked when this much faster than the last checked
TIMING_MIN_REPEAT_MS = 2  # each timed repeat runs the kernel enough times to last this long
VALIDATION_RTOL = 1e-4


@dataclass
class TaskOutcome:
    name: str
    kernels: int
    default_us: float | None = None
    tuned_us: float | None = None
    stored: bool = False
    reason: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.name, "kernels": self.kernels, "stored": self.stored, "reason": self.reason,
            "default_us": _round(self.default_us), "tuned_us": _round(self.tuned_us),
        }  # fmt: skip


@dataclass
class TuneResult:
    database: Path
    trials: int
    elapsed_s: float
    tasks: list[TaskOutcome] = field(default_factory=list)
    resumed: int = 0  # tasks that already had a record in the database before this run
    # seconds from the start to the end of the first MetaSchedule call (the worker pools'
    # start and one call): the least any budget takes, since one call always runs
    first_call_s: float | None = None

    @property
    def stored(self) -> int:
        return sum(t.stored for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {"database": str(self.database), "trials": self.trials, "elapsed_s": round(self.elapsed_s, 1),
                "tasks": [t.to_json() for t in self.tasks], "stored": self.stored,
                "resumed": self.resumed, "first_call_s": _round(self.first_call_s)}  # fmt: skip


def tune_model(
    model, target, options=None, db_dir: str | Path | None = None, trials: int | None = None,
    time_budget_s: float | None = None, seed: int = 0, progress: bool = True,
) -> TuneResult:  # fmt: skip
    """Tune the host kernels of `model` (path or ModelProto) compiled for `target`, into
    `db_dir` (default: database.default_db_dir(target name))."""
    from vpuc.compiler.driver import CompileOptions, prepare_model
    from vpuc.compiler.host.target import resolve_host_target
    from vpuc.compiler.host.tasks import extract_tasks, lower_to_kernels

    prepared = prepare_model(model, target, options or CompileOptions())
    host = resolve_host_target(prepared.target)
    tasks = extract_tasks(lower_to_kernels(prepared.mod, host.target))
    db_dir = db_dir if db_dir is not None else tuning_db.default_db_dir(prepared.target.name)
    return tune_tasks(prepared.imported.name, tasks, host, db_dir, trials, time_budget_s, seed, progress)


def tune_tasks(
    model_name: str, tasks: list[Task], host: HostTarget, db_dir: str | Path,
    trials: int | None = None, time_budget_s: float | None = None, seed: int = 0,
    progress: bool = True, min_speedup: float | None = None,
) -> TuneResult:  # fmt: skip
    """Search schedules for `tasks` and store the validated winners in `db_dir` as they are
    found (a record is a winner when it is at least `min_speedup`, default MIN_SPEEDUP,
    times faster than the default schedule; tests pass 0 to store whatever was found)."""
    ms = compat.metaschedule()
    min_speedup = MIN_SPEEDUP if min_speedup is None else min_speedup
    db = tuning_db.open_for_tuning(db_dir, host)
    trials = trials if trials is not None else TRIALS_PER_TASK * len(tasks)
    if trials < 1:
        raise CompileError(f"--trials: must be at least 1, got {trials}")
    start = time.perf_counter()
    # With a few trials per task, random samples of the space (no evolution) measure more.
    evolve = trials >= EVOLUTION_MIN_TRIALS_PER_TASK * len(tasks)
    with tempfile.TemporaryDirectory(prefix="vpuc-tune-") as work:
        work_db = ms.database.JSONDatabase(work_dir=work, module_equality="structural")
        keepers = [_Keeper(task, work_db, db, host, model_name, min_speedup) for task in tasks]
        resumed = sum(k.resume(ms) for k in keepers)
        _save_uninterrupted(db)  # the database exists from the start, whole at every moment
        per_iter = max(1, min(MAX_TRIALS_PER_ITER, trials // max(len(tasks), 1)))
        if time_budget_s is not None:  # short rounds: the budget is checked between them
            per_iter = min(per_iter, BUDGET_TRIALS_PER_ROUND)
        bar = _Progress(len(tasks), trials, time_budget_s, enabled=progress)
        clock = _RoundClock(None if time_budget_s is None else start + time_budget_s)
        builder = ms.builder.LocalBuilder(max_workers=host.num_cores, initializer=compat.metaschedule)
        runner = ms.runner.LocalRunner(initializer=compat.metaschedule)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), bar.callback(ms)]
        try:
            with bar, _StopOnInterrupt() as stop:
                _search_in_rounds(
                    ms, keepers, host, work, work_db, builder, runner, callbacks, bar, trials,
                    per_iter, clock, seed, evolve, stop,
                )  # fmt: skip
        except CompileError:
            raise
        except Exception as exc:  # TVM's errors from the search
            raise CompileError(f"{model_name}: tuning failed: {last_line(exc)}") from None
        finally:
            runner.pool.shutdown(wait=False)
        if stop.requested:  # every record stored so far is on disk, whole
            raise KeyboardInterrupt
        outcomes = [k.finish() for k in keepers]
    first_call_s = None if clock.first_end is None else clock.first_end - start
    return TuneResult(Path(db_dir), bar.trials, time.perf_counter() - start, outcomes, resumed, first_call_s)


def _search_in_rounds(
    ms, keepers, host, work, work_db, builder, runner, callbacks, bar, trials, per_iter, clock, seed,
    evolve, stop,
) -> None:  # fmt: skip
    """Round-robin over the tasks, at most `per_iter` candidates of one task per MetaSchedule
    call, all into one database (the evolutionary search starts from its measured best); after
    each call, a better best is checked and stored (`_Keeper.update`). Under a deadline each
    call is sized to end before it (`_RoundClock`), and none starts that would not: nothing of
    TVM's is terminated mid-task. A Ctrl-C (`stop`) ends the search between calls too."""
    remaining, exhausted, round_index = trials, set(), 0
    while remaining > 0 and len(exhausted) < len(keepers):
        for i, keeper in enumerate(keepers):
            if remaining <= 0 or i in exhausted:
                continue
            if stop.requested:
                return
            n = clock.trials(i, min(per_iter, remaining))
            if n < 1:
                bar.stopped = True
                return
            before, started = bar.trials, time.perf_counter()
            context = ms.TuneContext(
                mod=keeper.task.mod, target=host.target, space_generator="post-order-apply",
                search_strategy=_strategy(ms, evolve), task_name=keeper.task.name,
                rand_state=seed + i + 7919 * round_index, num_threads=host.num_cores,
            )  # fmt: skip
            ms.tune_tasks(
                tasks=[context], task_weights=[1.0], work_dir=work, max_trials_global=n,
                max_trials_per_task=n, num_trials_per_iter=n, builder=builder,
                runner=runner, database=work_db,
                cost_model="random", measure_callbacks=callbacks, task_scheduler="round-robin",
            )  # fmt: skip
            keeper.update()
            clock.record(i, n, time.perf_counter() - started)
            measured = bar.trials - before
            remaining -= max(measured, 1)
            if measured == 0:
                exhausted.add(i)
        round_index += 1


class _RoundClock:
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


def _strategy(ms, evolve: bool):
    if not evolve:
        return "replay-trace"
    return ms.search_strategy.EvolutionarySearch(population_size=POPULATION, genetic_num_iters=GENETIC_ITERS)


class _Keeper:
    """One task's best so far: each new best MetaSchedule measured is checked against the
    default schedule (same outputs, faster, both timed by `_run`) and, when it wins, stored
    in the database on disk at once."""

    def __init__(self, task: Task, work_db, db, host: HostTarget, model_name: str, min_speedup: float):
        self.task, self.work_db, self.db, self.host = task, work_db, db, host
        self.model_name, self.min_speedup = model_name, min_speedup
        self.outcome = TaskOutcome(task.name, task.weight)
        self.checked_secs = float("inf")  # MetaSchedule's figure of the last best checked
        self.default: tuple[list[np.ndarray], float] | None = None
        self.earlier_us: float | None = None  # the stored record's tuned latency (a rerun)
        self.min_check_gain = max(min_speedup, CHECK_GAIN)

    def resume(self, ms) -> bool:
        """Seed the search with the record an earlier run stored, if any (True)."""
        records = self.db.records
        if not records.has_workload(self.task.mod):
            return False
        found = records.get_top_k(records.commit_workload(self.task.mod), 1)
        if not found:
            return False
        old = found[0]
        workload = self.work_db.commit_workload(self.task.mod)
        self.work_db.commit_tuning_record(
            ms.database.TuningRecord(old.trace, workload, old.run_secs, old.target, old.args_info)
        )
        entry = self.db.tasks.get(str(compat.structural_hash(self.task.mod)), {})
        self.outcome.stored, self.outcome.reason = True, "kept: stored by an earlier run"
        self.outcome.default_us, self.outcome.tuned_us = entry.get("default_us"), entry.get("tuned_us")
        self.earlier_us = entry.get("tuned_us")
        self.checked_secs = _mean_secs(old)
        return True

    def update(self) -> None:
        records = self.work_db.get_top_k(self.work_db.commit_workload(self.task.mod), 1)
        # a check builds and times two kernels: only for a best clearly better than the last
        if not records or _mean_secs(records[0]) * self.min_check_gain > self.checked_secs:
            return
        self.checked_secs = _mean_secs(records[0])
        self._check(records[0])

    def finish(self) -> TaskOutcome:
        if self.checked_secs == float("inf") and not self.outcome.reason:
            self.outcome.reason = "no valid candidate measured"
        return self.outcome

    def _check(self, record) -> None:
        outcome = TaskOutcome(self.task.name, self.task.weight)
        try:
            tuned = self.work_db.query_schedule(self.task.mod, self.host.target, "main").mod["main"]
            tuned_out, outcome.tuned_us = _run(tuned, self.host)
            if self.default is None:
                self.default = _run(default_schedule(self.task.mod["main"], _options(self.host)), self.host)
            default_out, outcome.default_us = self.default
        except Exception as exc:  # a candidate that does not replay, build or run here
            self._reject(outcome, f"does not run: {last_line(exc)}")
            return
        if not _same(tuned_out, default_out):
            self._reject(outcome, "wrong results (differs from the default schedule): discarded")
            return
        speedup = outcome.default_us / outcome.tuned_us if outcome.tuned_us > 0 else float("inf")
        verdict = f"{speedup:.2f}x the default schedule's speed (applied from {self.min_speedup:.2f}x)"
        if speedup < self.min_speedup:
            self._reject(outcome, verdict)
            return
        if self.earlier_us is not None and outcome.tuned_us >= self.earlier_us:
            return  # the earlier run's record is as fast: keep it (and its outcome)
        # the record rewritten onto the database's own workload: its pruning keeps one best
        # per workload object, and the search's workload is another object
        workload = self.db.records.commit_workload(self.task.mod)
        self.db.records.commit_tuning_record(
            compat.metaschedule().database.TuningRecord(
                record.trace, workload, record.run_secs, record.target, record.args_info
            )
        )
        self.db.tasks[str(compat.structural_hash(self.task.mod))] = {
            "kernel": self.task.name, "model": self.model_name,
            "default_us": _round(outcome.default_us), "tuned_us": _round(outcome.tuned_us),
        }  # fmt: skip
        _save_uninterrupted(self.db)
        outcome.stored, outcome.reason = True, verdict
        self.earlier_us, self.outcome = outcome.tuned_us, outcome

    def _reject(self, outcome: TaskOutcome, reason: str) -> None:
        if not self.outcome.stored:  # a stored record stays the task's outcome
            outcome.reason = reason
            self.outcome = outcome


def _mean_secs(record) -> float:
    secs = [float(s) for s in (record.run_secs or [])]
    return sum(secs) / len(secs) if secs else float("inf")


class _StopOnInterrupt:
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


def _save_uninterrupted(db) -> None:
    """Write the database with Ctrl-C held back until the files are whole."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        tuning_db.save(db)
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        tuning_db.save(db)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _options(host: HostTarget):
    from vpuc.compiler.host.build import schedule_options

    return schedule_options(host)


def _run(kernel: tvm.tirx.PrimFunc, host: HostTarget) -> tuple[list[np.ndarray], float]:
    """Outputs on seeded inputs, and the median latency in microseconds."""
    lib = tvm.tirx.build(kernel.with_attr("global_symbol", "main"), target=host.target)
    rng = np.random.default_rng(0)
    args = []
    for param in kernel.params:
        shape = [int(d) for d in param.shape]
        if "float" in str(param.dtype):
            args.append(rng.standard_normal(shape).astype(str(param.dtype)))
        else:
            args.append(np.zeros(shape, dtype=str(param.dtype)))
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    outputs = [t.numpy() for t in tensors]
    timer = lib.time_evaluator(
        "main", tvm.cpu(), number=1, repeat=TIMING_REPEATS, min_repeat_ms=TIMING_MIN_REPEAT_MS
    )
    return outputs, float(np.median(timer(*tensors).results)) * 1e6


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    for x, y in zip(a, b, strict=True):
        scale = float(np.max(np.abs(y))) if y.size and np.issubdtype(y.dtype, np.floating) else 0.0
        if not np.allclose(
            x, y, rtol=VALIDATION_RTOL, atol=VALIDATION_RTOL * max(scale, 1.0), equal_nan=True
        ):
            return False
    return True


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class _Progress:
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
