"""The switchable QDQ module: one build that evaluates any subset of the layers in int8.

    QDQ main(x) + Switches (realize.py)   ->   main(x, vpuc_switch[S]) where every dequantize
                                               d = dequantize(...) is read as
                                               where(vpuc_switch[i] > 0.5, d, float value of d)

The float value of a dequantize is the tensor its quantize read (an activation) or the
float constant it stands for (a weight, a bias, a constant operand). A layer is a composite
(named by its root binding); switch i is on when any of its layers is on, which is what
keeping the other layers in float means: a tensor between two VPU layers stays int8 while
either of them is on the VPU. With every switch on the module computes exactly the QDQ
module (`where` picks d), so the accuracy report, the per-layer sensitivity and the
accuracy floor's search (floor.py) all run on one executable instead of one build each.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler.quantize.bindings import rebind
from vpuc.compiler.quantize.transforms.realize import Switch

SWITCH_PARAM = "vpuc_switch"


def switchable(mod: tvm.IRModule, switches: list[Switch]) -> tvm.IRModule:
    """`mod` with the extra last parameter SWITCH_PARAM (float32, one entry per switch)."""
    func = mod["main"]
    flags = relax.Var(SWITCH_PARAM, relax.TensorType((len(switches),), "float32"))
    mutated = _Switcher(mod, switches, flags, {p.name: p for p in func.params}).visit_expr(func)
    new_func = relax.Function([*func.params, flags], mutated.body, mutated.ret_ty, func.is_pure, func.attrs)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return relax.transform.Normalize()(new_mod)


def switch_values(switches: list[Switch], quantized_layers: Iterable[str]) -> np.ndarray:
    """The SWITCH_PARAM input that quantises exactly `quantized_layers` (composite roots)."""
    on = set(quantized_layers)
    return np.array([1.0 if on.intersection(s.layers) else 0.0 for s in switches], np.float32)


@mutator
class _Switcher(PyExprMutator):
    def __init__(self, mod, switches: list[Switch], flags: relax.Var, params: dict) -> None:
        super().__init__(mod)
        self.index = {s.dequantized: i for i, s in enumerate(switches)}
        self.switches, self.flags = switches, flags
        self.vars: dict[str, relax.Var] = dict(params)  # name -> the var that now holds it

    def visit_var_binding_(self, binding) -> None:
        value = self.visit_expr(binding.value)
        name = binding.var.name
        new = rebind(self.builder_, binding.var, value)
        self.vars[name] = new
        if name not in self.index:
            self.set_var_remap(binding.var, new)
            return
        switch = self.switches[self.index[name]]
        if switch.float_source is not None:
            alternative = self.vars[switch.float_source]
        else:
            alternative = relax.const(switch.float_value)
        index = self.index[name]
        flag = relax.op.strided_slice(self.flags, axes=[0], begin=[index], end=[index + 1])
        chosen = relax.op.where(relax.op.greater(flag, relax.const(0.5, "float32")), new, alternative)
        self.set_var_remap(binding.var, rebind(self.builder_, binding.var, chosen, f"{name}_sw"))
