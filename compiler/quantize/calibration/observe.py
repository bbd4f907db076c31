"""Run a module on samples with TVM's VM and read chosen intermediate tensors.

Calibration and the accuracy report both need values inside the graph: `expose` returns a
copy of the module whose main also returns the named bindings, `Observer` builds it once
for the host (its kernels fused and scheduled as the host library's, kernels.py; once per
process for one module: `_built`) and runs it per sample:

    main(x) -> out                 =>   main(x) -> (out..., binding_1, ..., binding_k)

Inputs are passed in the order of main's params, which is the order of the model inputs.

With AHEAD (off by default, below), `over` runs the next sample on a worker thread while
its caller reads the values of this one (calibration's histograms, the accuracy report's
figures): TVM's FFI releases the GIL while the VM runs, so on two cores the two overlap.
The caller still sees the samples in order. Every such run is on one worker thread, and
one lock keeps the VMs to one call at a time, its TVM tensors freed before the next call
(the accuracy report reads two views of one executable at once, one_build.py, or two
executables); AHEAD = False runs the samples one after the other on the caller's thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.quantize.calibration import kernels
from vpuc.compiler.quantize.calibration.data import CalibrationData

# over() runs the next sample on a thread while the caller reads this one (module docstring).
# Off by default: with the next sample held beside this one, CI's run of
# tests/quantize/test_calibration_memory.py saw a 1-megapixel compile at 1.12 GB (budget 1 GB)
# and the synthetic samples' peak grow with their count, for a wall gain not shown idle.
AHEAD = False


def expose(mod: tvm.IRModule, names: list[str]) -> tuple[tvm.IRModule, int]:
    """(module returning the original outputs then `names`, number of original outputs)."""
    flat = relax.transform.ToNonDataflow()(mod)
    func = flat["main"]
    bound = {b.var.name: b.var for block in func.body.blocks for b in block.bindings}
    bound.update({p.name: p for p in func.params})
    outputs = [func.body.body]
    missing = [name for name in names if name not in bound]
    if missing:
        raise KeyError(f"no binding named {', '.join(missing)} in main")
    returned = [*outputs, *(bound[n] for n in names)]
    body = relax.SeqExpr(func.body.blocks, relax.Tuple(returned))
    ret_ty = relax.TupleType([v.ty for v in returned])
    new_func = relax.Function(func.params, body, ret_ty, func.is_pure, func.attrs)
    new_mod = flat.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return relax.transform.Normalize()(new_mod), _tensor_count(func.body.body.ty)


def _tensor_count(ty) -> int:
    """How many arrays a value of this type flattens to (compat.flatten_outputs)."""
    if isinstance(ty, relax.TupleType):
        return sum(_tensor_count(field_) for field_ in ty.fields)
    return 1


class Observer:
    """A module built for the host, returning its outputs and the named bindings."""

    def __init__(self, mod: tvm.IRModule, names: list[str], llvm_target: str = "llvm") -> None:
        self.names = list(names)
        self._position = {name: index for index, name in enumerate(self.names)}
        exposed, self.output_count = expose(_without_attrs(mod), self.names)
        self.param_names = [p.name for p in mod["main"].params]
        self.shapes = _shapes(mod["main"], self.names)
        self._vm = compat.virtual_machine(_built(exposed, llvm_target))

    def run(
        self,
        inputs: list[np.ndarray],
        converted: tuple = (),
        outputs_only: bool = False,
        names: Sequence[str] | None = None,
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """(model outputs, {binding name: value}) for one sample; `converted`: further
        inputs, already TVM tensors (one_build.Bound's lifted constants). `outputs_only`:
        the bindings' values are not copied out ({}): the sensitivity's and the floor's
        runs read only the outputs (ocr_cls: 172 of 220 runs, each 112 bindings). `names`:
        only these bindings are copied out (default: all; one_build.Bound's views read
        either the float tensors or the quantised ones, not both)."""
        wanted = () if outputs_only else self.names if names is None else names
        with _VM_LOCK:  # one VM at a time, its tensors freed before the next runs
            arguments = [compat.to_tvm(x) for x in inputs]
            result = self._vm["main"](*arguments, *converted)
            # main returns (the model's output, binding_1, ..., binding_k)
            outputs = compat.flatten_outputs(result[0])
            values = {name: result[1 + self._position[name]].numpy() for name in wanted}
            del arguments, result
        return outputs, values

    def over(
        self,
        data: CalibrationData,
        extra: tuple[np.ndarray, ...] = (),
        converted: tuple = (),
        outputs_only: bool = False,
        names: Sequence[str] | None = None,
    ) -> Iterator[tuple[list[np.ndarray], dict[str, np.ndarray]]]:
        """run() for every sample of `data`, inputs taken in main's param order, then `extra`
        (the switches of a switchable module, switch.py; converted once), then `converted`;
        `names` the bindings to copy out (default: all).
        With AHEAD, the next sample runs on a thread while the caller reads this one."""
        stacks = list(data.samples.values())
        tail = (*(compat.to_tvm(x) for x in extra), *converted)

        def run(index: int):
            return self.run([stack[index, ...] for stack in stacks], tail, outputs_only, names)

        return _ahead(run, data.count) if AHEAD else (run(index) for index in range(data.count))


def _ahead(run: Callable[[int], tuple], count: int) -> Iterator[tuple]:
    """run(0), ..., run(count - 1) in order, each computed on the worker thread while the
    caller still reads the one before."""
    pending = _worker().submit(run, 0) if count else None
    try:
        for index in range(count):
            result = pending.result()
            pending = _worker().submit(run, index + 1) if index + 1 < count else None
            yield result
    finally:  # a caller that stops early: the run under way ends before the VM is let go
        if pending is not None:
            pending.cancel() or pending.exception()


# Every run over() makes is on this one thread (TVM's VM is not run from two at once), and
# _VM_LOCK keeps a run() called elsewhere from overlapping one.
_VM_LOCK = threading.Lock()
_WORKER: list[ThreadPoolExecutor] = []


def _worker() -> ThreadPoolExecutor:
    if not _WORKER:
        _WORKER.append(ThreadPoolExecutor(max_workers=1, thread_name_prefix="vpuc-observe"))
    return _WORKER[0]


def _after_fork() -> None:
    """A forked child (a process pool) has neither the worker thread nor a lock it held."""
    global _VM_LOCK
    _WORKER.clear()
    _VM_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_after_fork)


def _built(mod: tvm.IRModule, llvm_target: str):
    """compat.build_host of the module's fused, scheduled kernels (kernels.py), memoised
    within the process by the module's structural hash (the module itself checks a match):
    a float model compiled again (a script, the tests) gets the executables its first
    compile built, whose results are the same bits."""
    key = (compat.structural_hash(mod), llvm_target)
    for cached, executable in _BUILT.get(key, ()):
        if compat.structural_equal(cached, mod):
            return executable
    executable = compat.build_host(kernels.scheduled_kernels(mod, llvm_target), llvm_target)
    if sum(len(entries) for entries in _BUILT.values()) >= _BUILT_MAX:
        _BUILT.clear()
    _BUILT.setdefault(key, []).append((mod, executable))
    return executable


# The quantiser's executables built in this process (at most _BUILT_MAX: each holds its
# machine code and the module's constants).
_BUILT: dict[tuple, list] = {}
_BUILT_MAX = 8


def _shapes(func: relax.Function, names: list[str]) -> dict[str, tuple[int, ...]]:
    found = {p.name: p for p in func.params}
    found.update({b.var.name: b.var for block in func.body.blocks for b in block.bindings})
    return {name: compat.tensor_type(found[name])[0] for name in names}


def _without_attrs(mod: tvm.IRModule) -> tvm.IRModule:
    """relax.build wants no vpuc bookkeeping attributes on the module."""
    if mod.attrs is None:
        return mod
    kept = {k: mod.attrs[k] for k in mod.attrs.keys() if not str(k).startswith("vpuc.")}
    return tvm.IRModule(mod.functions, attrs=kept or None)
