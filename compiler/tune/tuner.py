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
that cannot fit one candidate is not started (`RoundClock`); no TVM task is terminated.
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

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, last_line
from vpuc.compiler.host import database as tuning_db
from vpuc.compiler.host.target import HostTarget
from vpuc.compiler.host.tasks import Task
from vpuc.compiler.tune.keeper import Keeper, TaskOutcome, rounded, save_uninterrupted
from vpuc.compiler.tune.progress import Progress, StopOnInterrupt
from vpuc.compiler.tune.rounds import RoundClock

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
                "resumed": self.resumed, "first_call_s": rounded(self.first_call_s)}  # fmt: skip


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
        keepers = [Keeper(task, work_db, db, host, model_name, min_speedup) for task in tasks]
        resumed = sum(k.resume(ms) for k in keepers)
        save_uninterrupted(db)  # the database exists from the start, whole at every moment
        per_iter = max(1, min(MAX_TRIALS_PER_ITER, trials // max(len(tasks), 1)))
        if time_budget_s is not None:  # short rounds: the budget is checked between them
            per_iter = min(per_iter, BUDGET_TRIALS_PER_ROUND)
        bar = Progress(len(tasks), trials, time_budget_s, enabled=progress)
        clock = RoundClock(None if time_budget_s is None else start + time_budget_s)
        builder = ms.builder.LocalBuilder(max_workers=host.num_cores, initializer=compat.metaschedule)
        runner = ms.runner.LocalRunner(initializer=compat.metaschedule)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), bar.callback(ms)]
        try:
            with bar, StopOnInterrupt() as stop:
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
    each call, a better best is checked and stored (`Keeper.update`). Under a deadline each
    call is sized to end before it (`RoundClock`), and none starts that would not: nothing of
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


def _strategy(ms, evolve: bool):
    if not evolve:
        return "replay-trace"
    return ms.search_strategy.EvolutionarySearch(population_size=POPULATION, genetic_num_iters=GENETIC_ITERS)
