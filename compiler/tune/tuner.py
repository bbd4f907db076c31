"""`vpuc tune`: MetaSchedule search over a model's host kernels, into a tuning database.

    model -> prepare (the driver's stages before the host build) -> lower to kernels
          -> tasks (distinct kernels) -> MetaSchedule: evolutionary search over its default
             CPU design space, candidates built and timed on this machine
          -> per task: the best candidate, checked against the default schedule
             (same outputs on seeded inputs, and faster) -> the database (database.py)

Budget: --trials N candidates in all (default TRIALS_PER_TASK per task) and/or
--time-budget seconds, whichever ends first. The search runs in rounds (one task, at most
MAX_TRIALS_PER_ITER candidates, BUDGET_TRIALS_PER_ROUND under a budget) and stops between
them, before a round the longest so far says would end past the budget; no TVM task is
terminated.
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
MIN_SPEEDUP = 1.05  # a record is kept only when this much faster than the default
TIMING_REPEATS = 20
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

    @property
    def stored(self) -> int:
        return sum(t.stored for t in self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {"database": str(self.database), "trials": self.trials, "elapsed_s": round(self.elapsed_s, 1),
                "tasks": [t.to_json() for t in self.tasks], "stored": self.stored}  # fmt: skip


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
    progress: bool = True, min_speedup: float = MIN_SPEEDUP,
) -> TuneResult:  # fmt: skip
    """Search schedules for `tasks` and store the validated winners in `db_dir` (a record
    is a winner when it is at least `min_speedup` times faster than the default schedule;
    tests pass 0 to store whatever was found)."""
    ms = compat.metaschedule()
    db = tuning_db.open_for_tuning(db_dir, host)
    trials = trials if trials is not None else TRIALS_PER_TASK * len(tasks)
    if trials < 1:
        raise CompileError(f"--trials: must be at least 1, got {trials}")
    start = time.perf_counter()
    # With a few trials per task, random samples of the space (no evolution) measure more.
    evolve = trials >= EVOLUTION_MIN_TRIALS_PER_TASK * len(tasks)
    with tempfile.TemporaryDirectory(prefix="vpuc-tune-") as work:
        work_db = ms.database.JSONDatabase(work_dir=work, module_equality="structural")
        per_iter = max(1, min(MAX_TRIALS_PER_ITER, trials // max(len(tasks), 1)))
        if time_budget_s is not None:  # short rounds: the budget is checked between them
            per_iter = min(per_iter, BUDGET_TRIALS_PER_ROUND)
        bar = _Progress(len(tasks), trials, time_budget_s, enabled=progress)
        builder = ms.builder.LocalBuilder(max_workers=host.num_cores, initializer=compat.metaschedule)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), bar.callback(ms)]
        try:
            with bar:
                _search_in_rounds(
                    ms, tasks, host, work, work_db, builder, callbacks, bar, trials, per_iter,
                    None if time_budget_s is None else start + time_budget_s, seed, evolve,
                )  # fmt: skip
        except CompileError:
            raise
        except Exception as exc:  # TVM's errors from the search
            raise CompileError(f"{model_name}: tuning failed: {last_line(exc)}") from None
        outcomes = [_keep_best(task, work_db, db, host, model_name, min_speedup) for task in tasks]
    tuning_db.save(db)
    return TuneResult(Path(db_dir), bar.trials, time.perf_counter() - start, outcomes)


def _search_in_rounds(
    ms, tasks, host, work, work_db, builder, callbacks, bar, trials, per_iter, deadline, seed, evolve
) -> None:
    """Round-robin over the tasks, `per_iter` candidates of one task per MetaSchedule call, all
    into one database (the evolutionary search starts from its measured best). The deadline
    is checked between calls, before starting one that the longest call so far says would
    end past it: nothing of TVM's is terminated mid-task."""
    remaining, longest, exhausted, round_index = trials, 0.0, set(), 0
    while remaining > 0 and len(exhausted) < len(tasks):
        for i, task in enumerate(tasks):
            if remaining <= 0 or i in exhausted:
                continue
            now = time.perf_counter()
            if deadline is not None and now + longest > deadline:
                bar.stopped = True
                return
            n = min(per_iter, remaining)
            before = bar.trials
            context = ms.TuneContext(
                mod=task.mod, target=host.target, space_generator="post-order-apply",
                search_strategy=_strategy(ms, evolve), task_name=task.name,
                rand_state=seed + i + 7919 * round_index, num_threads=host.num_cores,
            )  # fmt: skip
            ms.tune_tasks(
                tasks=[context], task_weights=[1.0], work_dir=work, max_trials_global=n,
                max_trials_per_task=n, num_trials_per_iter=n, builder=builder,
                runner=ms.runner.LocalRunner(initializer=compat.metaschedule), database=work_db,
                cost_model="random", measure_callbacks=callbacks, task_scheduler="round-robin",
            )  # fmt: skip
            longest = max(longest, time.perf_counter() - now)
            measured = bar.trials - before
            remaining -= max(measured, 1)
            if measured == 0:
                exhausted.add(i)
        round_index += 1


def _strategy(ms, evolve: bool):
    if not evolve:
        return "replay-trace"
    return ms.search_strategy.EvolutionarySearch(population_size=POPULATION, genetic_num_iters=GENETIC_ITERS)


def _keep_best(task: Task, work_db, db, host: HostTarget, model_name: str, min_speedup: float) -> TaskOutcome:
    """Store the task's best candidate if it computes what the default schedule computes
    and runs faster than it."""
    outcome = TaskOutcome(task.name, task.weight)
    records = work_db.get_top_k(work_db.commit_workload(task.mod), 1)
    if not records:
        outcome.reason = "no valid candidate measured"
        return outcome
    record = records[0]
    default = default_schedule(task.mod["main"], _options(host))
    try:
        tuned = work_db.query_schedule(task.mod, host.target, "main").mod["main"]
        tuned_out, outcome.tuned_us = _run(tuned, host)
        default_out, outcome.default_us = _run(default, host)
    except Exception as exc:  # a candidate that does not replay, build or run here
        outcome.reason = f"does not run: {last_line(exc)}"
        return outcome
    if not _same(tuned_out, default_out):
        outcome.reason = "wrong results (differs from the default schedule): discarded"
        return outcome
    if outcome.tuned_us * min_speedup > outcome.default_us:
        outcome.reason = "not faster than the default schedule"
        return outcome
    db.records.commit_workload(task.mod)
    db.records.commit_tuning_record(record)
    key = str(compat.structural_hash(task.mod))
    db.tasks[key] = {"kernel": task.name, "model": model_name, "default_us": _round(outcome.default_us),
                     "tuned_us": _round(outcome.tuned_us)}  # fmt: skip
    outcome.stored = True
    return outcome


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
    timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=TIMING_REPEATS)
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
