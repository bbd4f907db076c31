"""`vpuc tune`'s check of a candidate: one task's best so far, replayed, built and run beside
the default schedule on seeded inputs; stored in the tuning database (at once, whole) only
when its outputs agree, it is faster alone, and the whole model runs faster with it
(model_check.py). tuner.py drives it.

The default schedule is timed first (`Keeper.time_default`): its latency is the task's
share of the model's time (rounds.py), and its trace, with that latency, seeds the search's
database, so a candidate is checked only when MetaSchedule measured it faster than the
default."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import tvm

from vpuc.compiler import compat
from vpuc.compiler.errors import last_line
from vpuc.compiler.host import database as tuning_db
from vpuc.compiler.host.defaults import default_schedule_of
from vpuc.compiler.host.target import HostTarget
from vpuc.compiler.host.tasks import Task
from vpuc.targets.host_cores import follow_load

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
            "default_us": rounded(self.default_us), "tuned_us": rounded(self.tuned_us),
        }  # fmt: skip


class Keeper:
    """One task's best so far: each new best MetaSchedule measured is checked against the
    default schedule (same outputs, faster, the two timed in alternation) and, when it wins, stored
    in the database on disk at once."""

    def __init__(
        self, task: Task, work_db, db, host: HostTarget, model_name: str, min_speedup: float, gate=None
    ) -> None:  # fmt: skip
        """`gate`: the model check (model_check.ModelGate), None to store without one."""
        self.task, self.work_db, self.db, self.host = task, work_db, db, host
        self.model_name, self.min_speedup, self.gate = model_name, min_speedup, gate
        self.outcome = TaskOutcome(task.name, task.weight)
        self.checked_secs = float("inf")  # MetaSchedule's figure of the last best checked
        self.default: _Built | None = None  # the default schedule, built
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

    def resumed_kernel(self):
        """The stored record's kernel, None when it does not replay here."""
        return self.db.lookup(self.task.mod, self.host.target) if self.outcome.stored else None

    def time_default(self, ms) -> float | None:
        """Time the default schedule (its outputs kept for the checks) and seed the search's
        database with its trace (unless min_speedup is 0: every candidate stored); the model's
        time in this task (us x calls), None if the default schedule does not build or run."""
        try:
            sch = default_schedule_of(self.task.mod["main"], _options(self.host))
            self.default = _build(sch.mod["main"], self.host)
            (default_us,) = _median_us(self.default)
        except Exception:  # noqa: BLE001 - TVM's errors: no baseline, so no check either
            return None
        if not self.outcome.stored:
            self.outcome.default_us = default_us
        default_secs = default_us / 1e6
        if self.min_speedup <= 0:  # tests: every validated candidate is stored, so none seeds
            return default_us * self.task.weight
        self.checked_secs = min(self.checked_secs, default_secs)
        try:
            workload = self.work_db.commit_workload(self.task.mod)
            args_info = ms.arg_info.ArgInfo.from_prim_func(self.task.mod["main"])
            self.work_db.commit_tuning_record(
                ms.database.TuningRecord(sch.trace, workload, [default_secs], self.host.target, args_info)
            )
        except Exception:  # noqa: BLE001 - a trace MetaSchedule cannot store: search unseeded
            pass
        return default_us * self.task.weight

    def update(self) -> None:
        records = self.work_db.get_top_k(self.work_db.commit_workload(self.task.mod), 1)
        # a check builds and times two kernels: only for a best clearly better than the last
        if not records or _mean_secs(records[0]) * self.min_check_gain > self.checked_secs:
            return
        self.checked_secs = _mean_secs(records[0])
        self._check(records[0])

    def finish(self) -> TaskOutcome:
        if not self.outcome.reason:
            self.outcome.reason = "no candidate measured faster than the default schedule"
        return self.outcome

    def _check(self, record) -> None:
        outcome = TaskOutcome(self.task.name, self.task.weight)
        try:
            tuned = self.work_db.query_schedule(self.task.mod, self.host.target, "main").mod["main"]
            if self.default is None:
                raise RuntimeError("the default schedule does not run here")
            candidate = _build(tuned, self.host)
            tuned_out, default_out = candidate.outputs, self.default.outputs
            outcome.tuned_us, outcome.default_us = _median_us(candidate, self.default)
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
        if self.gate is not None and self.min_speedup > 0:
            kernel = tuned.with_attr("tirx.is_scheduled", True)
            kept, with_us, without_us = self.gate.admit(self.task.name, kernel)
            verdict += f"; the model {with_us:.1f} us with it, {without_us:.1f} us without"
            if not kept:
                self._reject(outcome, verdict)
                return
        # the record rewritten onto the database's own workload (its pruning keeps one best
        # per workload object, and the search's workload is another object), with this
        # check's latency, so that pruning ranks records as the checks did
        workload = self.db.records.commit_workload(self.task.mod)
        self.db.records.commit_tuning_record(
            compat.metaschedule().database.TuningRecord(
                record.trace, workload, [outcome.tuned_us / 1e6], record.target, record.args_info
            )
        )
        self.db.tasks[str(compat.structural_hash(self.task.mod))] = {
            "kernel": self.task.name, "model": self.model_name,
            "default_us": rounded(outcome.default_us), "tuned_us": rounded(outcome.tuned_us),
        }  # fmt: skip
        save_uninterrupted(self.db)
        outcome.stored, outcome.reason = True, verdict
        self.earlier_us, self.outcome = outcome.tuned_us, outcome

    def _reject(self, outcome: TaskOutcome, reason: str) -> None:
        if not self.outcome.stored:  # a stored record stays the task's outcome
            outcome.reason = reason
            self.outcome = outcome


def _mean_secs(record) -> float:
    secs = [float(s) for s in (record.run_secs or [])]
    return sum(secs) / len(secs) if secs else float("inf")


def save_uninterrupted(db, write=tuning_db.save) -> None:
    """Write the database (`write(db)`) with Ctrl-C held back until the files are whole."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        write(db)
        return
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        write(db)
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _options(host: HostTarget):
    from vpuc.compiler.host.build import schedule_options

    return schedule_options(host)


@dataclass
class _Built:
    """A kernel built for the host, its outputs on seeded inputs, and a timer of one repeat
    (at least TIMING_MIN_REPEAT_MS of calls; seconds per call)."""

    outputs: list[np.ndarray]
    timer: Any
    tensors: list[Any]

    def repeat_s(self) -> float:
        return float(self.timer(*self.tensors).mean)


def _build(kernel: tvm.tirx.PrimFunc, host: HostTarget) -> _Built:
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
    timer = lib.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=TIMING_MIN_REPEAT_MS)
    return _Built(outputs, timer, tensors)


def _median_us(*built: _Built) -> list[float]:
    """Median microseconds per call of each, over TIMING_REPEATS repeats taken in alternation
    (one repeat of each in turn), so a change of the machine's load hits them alike."""
    times: list[list[float]] = [[] for _ in built]
    for _ in range(TIMING_REPEATS):
        for k, b in enumerate(built):
            follow_load()  # TVM's pool: the threads the load leaves, as a run gets them
            times[k].append(b.repeat_s())
    return [float(np.median(t)) * 1e6 for t in times]


def _same(a: list[np.ndarray], b: list[np.ndarray]) -> bool:
    for x, y in zip(a, b, strict=True):
        scale = float(np.max(np.abs(y))) if y.size and np.issubdtype(y.dtype, np.floating) else 0.0
        if not np.allclose(
            x, y, rtol=VALIDATION_RTOL, atol=VALIDATION_RTOL * max(scale, 1.0), equal_nan=True
        ):
            return False
    return True


def rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)
