"""`vpuc tune`: MetaSchedule search over a model's host kernels, into a tuning database.

    model -> prepare (the driver's stages before the host build) -> lower to kernels
          -> tasks (distinct kernels), each default schedule timed first: a task's share of
             the model's time, and the search's seed (keeper.py)
          -> MetaSchedule: evolutionary search over its default CPU design space, one task
             per round, chosen by its share (rounds.py), candidates built and timed here
          -> per task, after each round that improved its best: that candidate, checked
             against the default schedule (same outputs on seeded inputs, at least
             MIN_SPEEDUP times faster alone, and the whole model faster with it:
             model_check.py) -> the database (database.py), written at once: an
             interrupted tune (Ctrl-C, the budget) keeps every record stored so far, and a
             rerun on the same database starts from them
          -> the model with every record against the untuned model: the records are
             dropped unless it is faster (`_final_model_check`)

Budget: --trials N candidates in all (default TRIALS_PER_TASK per task) and/or
--time-budget seconds, whichever ends first. The search runs in rounds (one task, at most
MAX_TRIALS_PER_ITER candidates, BUDGET_TRIALS_PER_ROUND under a budget); under a budget each
round is sized to the time left (less what the final model check takes) at the seconds per
candidate measured so far, and a round that cannot fit one candidate is not started
(`RoundClock`); no TVM task is terminated. MetaSchedule's cost model here is "random" (its
default, XGBoost, is a dependency we do not pin): the search still keeps the measured best
of each batch and mutates it.

A MetaSchedule candidate is not trusted: on this TVM one random point of the attention
kernel's space computed wrong results, so every record is validated before it is stored.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, last_line
from vpuc.compiler.host import database as tuning_db
from vpuc.compiler.host.target import HostTarget
from vpuc.compiler.host.tasks import Task
from vpuc.compiler.tune.keeper import Keeper, TaskOutcome, rounded, save_uninterrupted
from vpuc.compiler.tune.model_check import ModelGate, ModelTimer
from vpuc.compiler.tune.progress import Progress, StopOnInterrupt
from vpuc.compiler.tune.rounds import RoundClock, RoundPlan, time_shares

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
    lowered = lower_to_kernels(prepared.mod, host.target)
    tasks = extract_tasks(lowered)
    db_dir = db_dir if db_dir is not None else tuning_db.default_db_dir(prepared.target.name)
    return tune_tasks(
        prepared.imported.name, tasks, host, db_dir, trials, time_budget_s, seed, progress, model=lowered
    )


def tune_tasks(
    model_name: str, tasks: list[Task], host: HostTarget, db_dir: str | Path,
    trials: int | None = None, time_budget_s: float | None = None, seed: int = 0,
    progress: bool = True, min_speedup: float | None = None, model: tvm.IRModule | None = None,
) -> TuneResult:  # fmt: skip
    """Search schedules for `tasks` and store the validated winners in `db_dir` as they are
    found (a record is a winner when it is at least `min_speedup`, default MIN_SPEEDUP,
    times faster than the default schedule, and, given `model` (the lowered module the tasks
    come from), when that model runs faster with it; at the end the model with every record
    is timed against the untuned one, and the records are dropped unless it is faster).
    Tests pass min_speedup=0 to store every validated candidate, with no speed check."""
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
        gate = _model_gate(model, tasks, keepers, host) if min_speedup > 0 else None
        for keeper in keepers:
            keeper.gate = gate
        plan = RoundPlan(time_shares([k.time_default(ms) for k in keepers]))
        for i in plan.closed:
            if not keepers[i].outcome.reason:
                keepers[i].outcome.reason = f"not searched: {plan.shares[i]:.1%} of the model's time"
        per_iter = max(1, min(MAX_TRIALS_PER_ITER, trials // max(len(tasks), 1)))
        if time_budget_s is not None:  # short rounds: the budget is checked between them
            per_iter = min(per_iter, BUDGET_TRIALS_PER_ROUND)
        bar = Progress(len(tasks), trials, time_budget_s, enabled=progress)
        reserve = gate.reserve_s() if gate is not None else 0.0  # for the final model check
        clock = RoundClock(None if time_budget_s is None else start + time_budget_s - reserve)
        builder = ms.builder.LocalBuilder(max_workers=host.num_cores, initializer=compat.metaschedule)
        runner = ms.runner.LocalRunner(initializer=compat.metaschedule)
        callbacks = [*ms.measure_callback.MeasureCallback.create("default"), bar.callback(ms)]
        try:
            with bar, StopOnInterrupt() as stop:
                _search_in_rounds(
                    ms, keepers, plan, host, work, work_db, builder, runner, callbacks, bar, trials,
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
        if gate is not None:
            _final_model_check(gate, keepers, db)
        outcomes = [k.finish() for k in keepers]
    first_call_s = None if clock.first_end is None else clock.first_end - start
    return TuneResult(Path(db_dir), bar.trials, time.perf_counter() - start, outcomes, resumed, first_call_s)


def _model_gate(model: tvm.IRModule | None, tasks: list[Task], keepers: list[Keeper], host: HostTarget):
    """The model check, starting from the records an earlier run stored (those that replay);
    None without a model, or when the model cannot be built and run here: then records are
    kept on the kernel check alone."""
    if model is None:
        return None
    try:
        gate = ModelGate(ModelTimer(model, tasks, host))
        gate.current["main"](*gate.timer.args)  # it runs, before a check relies on it
    except Exception:  # noqa: BLE001 - TVM's errors: no static input shape, a refused build, a run
        return None
    resumed = {k.task.name: k.resumed_kernel() for k in keepers}
    gate.kept = {name: kernel for name, kernel in resumed.items() if kernel is not None}
    if gate.kept:
        gate.current = gate.timer.build(gate.kept)
    return gate


def _final_model_check(gate: ModelGate, keepers: list[Keeper], db) -> None:
    """The model with every kept record against the untuned model, timed afresh: when it is
    not faster, the records of this model's tasks are dropped from the database, so a
    tuned build is never the slower one (as measured here)."""
    timed = gate.final()
    if timed is None:
        return
    tuned_us, untuned_us = timed
    if tuned_us < untuned_us:
        return
    dropped = [k for k in keepers if k.task.name in gate.kept]
    save_uninterrupted(db, lambda d: tuning_db.forget(d, [k.task.mod for k in dropped]))
    for keeper in dropped:
        keeper.outcome.stored = False
        keeper.outcome.reason = (
            f"dropped: the model took {tuned_us:.1f} us with the tuned kernels, {untuned_us:.1f} us untuned"
        )
    gate.kept = {}


def _search_in_rounds(
    ms, keepers, plan, host, work, work_db, builder, runner, callbacks, bar, trials, per_iter, clock, seed,
    evolve, stop,
) -> None:  # fmt: skip
    """One task per MetaSchedule call, chosen by its share of the model's time (`RoundPlan`),
    at most `per_iter` candidates, all into one database (the evolutionary search starts from
    its measured best, the default schedule first); after each call, a better best is checked
    and stored (`Keeper.update`). Under a deadline each call is sized to end before it
    (`RoundClock`), and none starts that would not: nothing of TVM's is terminated mid-task.
    A Ctrl-C (`stop`) ends the search between calls too."""
    remaining = trials
    while remaining > 0 and (i := plan.next()) is not None:
        if stop.requested:
            return
        keeper = keepers[i]
        n = clock.trials(i, min(per_iter, remaining))
        if n < 1:
            bar.stopped = True
            return
        before, started = bar.trials, time.perf_counter()
        context = ms.TuneContext(
            mod=keeper.task.mod, target=host.target, space_generator="post-order-apply",
            search_strategy=_strategy(ms, evolve), task_name=keeper.task.name,
            rand_state=seed + 7919 * plan.calls + i, num_threads=host.num_cores,
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
        plan.record(i, measured)


def _strategy(ms, evolve: bool):
    if not evolve:
        return "replay-trace"
    return ms.search_strategy.EvolutionarySearch(population_size=POPULATION, genetic_num_iters=GENETIC_ITERS)
