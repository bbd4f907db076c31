"""The switchable QDQ module: one build that evaluates any subset of the layers in int8.

    QDQ main(x) + Switches (realize.py)   ->   main(x, vpuc_switch0, ..., vpuc_switch{S-1})
                                               where every dequantize d = dequantize(...) is
                                               read as where(vpuc_switch{i}, d, float value of d)

The float value of a dequantize is the tensor its quantize read (an activation) or the
float constant it stands for (a weight, a bias, a constant operand). A layer is a composite
(named by its root binding); switch i is on when any of its layers is on, which is what
keeping the other layers in float means: a tensor between two VPU layers stays int8 while
either of them is on the VPU. With every switch on the module computes exactly the QDQ
module (`where` picks d), so the accuracy report, the per-layer sensitivity and the
accuracy floor's search (floor.py) all run on one executable instead of one build each.

Each switch is a boolean scalar parameter of its own, which `where` reads as it is: a
vector of switches needed a kernel per switch to read its entry (a strided_slice and a
compare; 131 of ocr_cls's 490 kernels, 42 of resnet_mini's 119), all built and run.
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
    """`mod` with one extra last parameter per switch, SWITCH_PARAM<i> (a boolean scalar)."""
    func = mod["main"]
    flags = [relax.Var(f"{SWITCH_PARAM}{i}", relax.TensorType((), "bool")) for i in range(len(switches))]
    mutated = _Switcher(mod, switches, flags, {p.name: p for p in func.params}).visit_expr(func)
    new_func = relax.Function([*func.params, *flags], mutated.body, mutated.ret_ty, func.is_pure, func.attrs)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return relax.transform.Normalize()(new_mod)


def switch_values(switches: list[Switch], quantized_layers: Iterable[str]) -> tuple[np.ndarray, ...]:
    """The SWITCH_PARAM inputs that quantise exactly `quantized_layers` (composite roots)."""
    on = set(quantized_layers)
    return tuple(np.array(bool(on.intersection(s.layers))) for s in switches)


@mutator
class _Switcher(PyExprMutator):
    def __init__(self, mod, switches: list[Switch], flags: list[relax.Var], params: dict) -> None:
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
        chosen = relax.op.where(self.flags[self.index[name]], new, alternative)
        self.set_var_remap(binding.var, rebind(self.builder_, binding.var, chosen, f"{name}_sw"))
