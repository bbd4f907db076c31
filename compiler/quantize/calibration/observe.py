"""Run a module on samples with TVM's VM and read chosen intermediate tensors.

Calibration and the accuracy report both need values inside the graph: `expose` returns a
copy of the module whose main also returns the named bindings, `Observer` builds it once
for the host (its kernels fused and scheduled as the host library's, kernels.py; once per
process for one module: `_built`) and runs it per sample:

    main(x) -> out                 =>   main(x) -> (out..., binding_1, ..., binding_k)

Inputs are passed in the order of main's params, which is the order of the model inputs.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.quantize.calibration import kernels
from vpuc.compiler.quantize.calibration.data import CalibrationData


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
        exposed, self.output_count = expose(_without_attrs(mod), self.names)
        self.param_names = [p.name for p in mod["main"].params]
        self.shapes = _shapes(mod["main"], self.names)
        self._vm = compat.virtual_machine(_built(exposed, llvm_target))

    def run(
        self, inputs: list[np.ndarray], converted: tuple = (), outputs_only: bool = False
    ) -> tuple[list[np.ndarray], dict[str, np.ndarray]]:
        """(model outputs, {binding name: value}) for one sample; `converted`: further
        inputs, already TVM tensors (one_build.Bound's lifted constants). `outputs_only`:
        the bindings' values are not copied out ({}): the sensitivity's and the floor's
        runs read only the outputs (ocr_cls: 172 of 220 runs, each 112 bindings)."""
        result = self._vm["main"](*[compat.to_tvm(x) for x in inputs], *converted)
        if outputs_only:  # main returns (the model's output, binding_1, ..., binding_k)
            return compat.flatten_outputs(result[0]), {}
        values = compat.flatten_outputs(result)
        outputs = values[: self.output_count]
        return outputs, dict(zip(self.names, values[self.output_count :], strict=True))

    def over(
        self,
        data: CalibrationData,
        extra: tuple[np.ndarray, ...] = (),
        converted: tuple = (),
        outputs_only: bool = False,
    ) -> Iterator[tuple[list[np.ndarray], dict[str, np.ndarray]]]:
        """run() for every sample of `data`, inputs taken in main's param order, then `extra`
        (the switches of a switchable module, switch.py; converted once), then `converted`."""
        stacks = list(data.samples.values())
        tail = (*(compat.to_tvm(x) for x in extra), *converted)
        for index in range(data.count):
            yield self.run([stack[index, ...] for stack in stacks], tail, outputs_only)


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
