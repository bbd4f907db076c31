"""`vpuc tune`'s model check: a record is kept only when the whole model runs faster with it.

A kernel timed alone (keeper.py) runs with its inputs in cache and the cores to itself; in
the model it runs between other kernels, on a thread pool the others share, on a machine
other processes load. A record that won alone made the zoo's models slower (docs/tuning.md:
parallel kernels that fight the pool, cache-hungry tiles), so each one is also timed inside
its model:

    lowered model (host kernels) -> each kernel: its kept record, else the default schedule
                                 -> relax.build in memory -> the VM, timed on seeded inputs

Two builds are compared by timing them in alternation (MODEL_TIMING_ROUNDS rounds of at
least MODEL_MIN_REPEAT_MS each), so a change of the machine's load hits both alike; each
figure is the median of its rounds.
"""

from __future__ import annotations

import time

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.host.build import lowering_pipeline, schedule_options
from vpuc.compiler.host.defaults import scheduled_or_as_written
from vpuc.compiler.host.target import HostTarget
from vpuc.compiler.host.tasks import Task, kernels
from vpuc.targets.host_cores import follow_load

MODEL_TIMING_ROUNDS = 15
MODEL_MIN_REPEAT_MS = 5


class ModelTimer:
    """The model's host code built with a chosen set of tuned kernels, and timed."""

    def __init__(self, lowered: tvm.IRModule, tasks: list[Task], host: HostTarget) -> None:
        self.lowered, self.host = lowered, host
        self.calls = {task.name: list(task.kernels) for task in tasks}
        options = schedule_options(host)
        self.defaults = {name: scheduled_or_as_written(k, options) for name, k in kernels(lowered).items()}
        self.args = _seeded_inputs(lowered["main"])
        self.build_s = 0.0  # the last build's seconds: what a check costs, with its timing
        self.run_s = 0.0  # the last timed model run's seconds

    def build(self, tuned: dict[str, tvm.tirx.PrimFunc]) -> relax.VirtualMachine:
        """The model with `tuned` (task name -> scheduled kernel) applied, the rest default."""
        started = time.perf_counter()
        mod = tvm.IRModule(dict(self.lowered.functions), attrs=self.lowered.attrs)
        for name, kernel in self.defaults.items():
            mod[name] = kernel
        for task, kernel in tuned.items():
            for name in self.calls[task]:
                mod[name] = kernel.without_attr("global_symbol")
        executable = relax.build(mod, target=self.host.target, relax_pipeline=lowering_pipeline(self.host))
        vm = compat.virtual_machine(executable)
        self.build_s = time.perf_counter() - started
        return vm

    def compare(self, first: relax.VirtualMachine, second: relax.VirtualMachine) -> tuple[float, float]:
        """Median microseconds of a model run of each, timed in alternation."""
        timers = [
            vm.time_evaluator("main", tvm.cpu(), number=1, repeat=1, min_repeat_ms=MODEL_MIN_REPEAT_MS)
            for vm in (first, second)
        ]
        for timer in timers:  # warm-up: the thread pool, the caches
            timer(*self.args)
        rounds: list[list[float]] = [[], []]
        for _ in range(MODEL_TIMING_ROUNDS):
            for k, timer in enumerate(timers):
                follow_load()  # TVM's pool: the threads the load leaves, as `vpuc run` gets them
                rounds[k].append(timer(*self.args).mean)
        self.run_s = max(rounds[0][-1], rounds[1][-1])
        return float(np.median(rounds[0])) * 1e6, float(np.median(rounds[1])) * 1e6


class ModelGate:
    """The records kept so far, each admitted only when the model ran faster with it than
    without it (the other kept records applied in both builds)."""

    def __init__(self, timer: ModelTimer) -> None:
        self.timer = timer
        self.kept: dict[str, tvm.tirx.PrimFunc] = {}  # task name -> its kept kernel
        self.current = timer.build({})  # the model as the kept records make it

    def admit(self, task: str, kernel: tvm.tirx.PrimFunc) -> tuple[bool, float, float]:
        """(kept, model us with the kernel, model us without it)."""
        trial = {**self.kept, task: kernel}
        candidate = self.timer.build(trial)
        with_us, without_us = self.timer.compare(candidate, self.current)
        if with_us < without_us:
            self.kept, self.current = trial, candidate
        return with_us < without_us, with_us, without_us

    def final(self) -> tuple[float, float] | None:
        """(model us with every kept record, untuned us), timed afresh; None if none kept."""
        if not self.kept:
            return None
        return self.timer.compare(self.current, self.timer.build({}))

    def reserve_s(self) -> float:
        """What `final` takes, to hold back from a time budget: a build and the timing."""
        timing = 2 * (MODEL_TIMING_ROUNDS + 1) * max(MODEL_MIN_REPEAT_MS / 1e3, self.timer.run_s)
        return 1.5 * (self.timer.build_s + timing)


def _seeded_inputs(main: relax.Function) -> list[tvm.runtime.Tensor]:
    """Standard normal floats, zeros elsewhere (indices in range whatever the table)."""
    rng = np.random.default_rng(0)
    args = []
    for param in main.params:
        typed = compat.tensor_type(param)
        if typed is None:
            raise ValueError(f"input {param.name_hint} has no static shape")
        shape, dtype = typed
        if np.dtype(dtype).kind == "f":
            args.append(tvm.runtime.tensor(rng.standard_normal(shape).astype(dtype)))
        else:
            args.append(tvm.runtime.tensor(np.zeros(shape, dtype)))
    return args
