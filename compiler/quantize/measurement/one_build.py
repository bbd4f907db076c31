"""One LLVM build for calibration, the accuracy report, the sensitivity and the floor.

    float module + QuantPlan   ->   the switchable QDQ module (switch.py) of the plan, its
                                    quantize/dequantize constants lifted into parameters,
                                    built once, before calibration

Calibration needs the float module's tensors before any QDQ parameter is known; the
accuracy report, the sensitivity and the floor need the QDQ module those parameters make.
The switchable module with every switch off computes the float module: each dequantize
reads the tensor its quantize read or the float constant it stands for (`where` picks it
whole, bit for bit), and every other op is the float module's op on the same values. What
the calibrated parameters change are only constants: activation scales and zero points,
the int32 biases (their scale is the input's times the weight's; bias correction shifts
them) and the int8 weights (adaptive rounding). Lifted into parameters, they leave a
module whose structure the plan alone fixes:

    q = quantize(x, 0.0123f, -5i8)      =>   main(x, vpuc_switch0.., vpuc_qdq0, vpuc_qdq1, ...)
                                              q = quantize(x, vpuc_qdq0, vpuc_qdq1)

So the plan is realised once with placeholder parameters and built (`OneBuild`); its
all-float view (`float_view`) is the reference calibration reads, and the realisation with
the calibrated parameters runs on the same executable with its constants passed as inputs
(`bind`) when its lifted module is structurally the placeholder one (the same plan).
Otherwise (the floor's final plan moved more to the CPU) the caller builds as before.

Not used when SmoothQuant or bias absorption rewrite the module: those change the float
module between calibration and realisation, so the QDQ module is not the calibrated one's
(prepare.py keeps the float reference build then). tests/quantize/test_one_build.py holds
ranges, parameters and the accuracy report bit-identical with the two-build path.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.calibration.calibrate import choose_params
from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.observe import Observer
from vpuc.compiler.quantize.measurement.switch import switch_values, switchable
from vpuc.compiler.quantize.plan import QuantPlan
from vpuc.compiler.quantize.transforms.realize import Realized, realize

LIFTED_PREFIX = "vpuc_qdq"
_QDQ_OPS = ("relax.quantize", "relax.dequantize")


def lift_qdq_constants(mod: tvm.IRModule) -> tuple[tvm.IRModule, list[np.ndarray]]:
    """(`mod` whose main takes every constant argument of a quantize or dequantize as an
    extra last parameter, in binding order; those constants' values)."""
    func = mod["main"]
    lifter = _Lifter(mod)
    mutated = lifter.visit_expr(func)
    new_func = relax.Function(
        [*func.params, *lifter.params], mutated.body, mutated.ret_ty, func.is_pure, func.attrs
    )
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return relax.transform.Normalize()(new_mod), lifter.values


@mutator
class _Lifter(PyExprMutator):
    def __init__(self, mod) -> None:
        super().__init__(mod)
        self.params: list[relax.Var] = []
        self.values: list[np.ndarray] = []

    def visit_call_(self, call: relax.Call) -> relax.Expr:
        call = super().visit_call_(call)
        if not isinstance(call.op, tvm.ir.Op) or call.op.name not in _QDQ_OPS:
            return call
        args = [self._lifted(arg) for arg in call.args]
        return relax.Call(call.op, args, call.attrs, call.ty_args)

    def _lifted(self, arg: relax.Expr) -> relax.Expr:
        value = compat.constant_array(arg)
        if value is None:
            return arg
        var = relax.Var(f"{LIFTED_PREFIX}{len(self.params)}", relax.TensorType(value.shape, str(value.dtype)))
        self.params.append(var)
        self.values.append(value)
        return var


class OneBuild:
    """The plan's switchable QDQ module with lifted constants, built once (module docstring);
    it returns the model's outputs, `names` (float tensors) and every quantize binding."""

    def __init__(self, mod: tvm.IRModule, plan: QuantPlan, names: list[str], llvm: str) -> None:
        placeholder = {name: (-1.0, 1.0) for name in plan.tensors_to_calibrate()}
        params = choose_params(plan, {}, "minmax", 0.0, placeholder)  # every range given
        realized = realize(mod, plan, params, {})
        self.module, placeholder_values = self._lifted(realized)
        self.quantized = list(dict.fromkeys(t.quantized for t in realized.tensors))
        self.observer = Observer(self.module, list(dict.fromkeys([*names, *self.quantized])), llvm)
        # off: every dequantize reads its float value, so the lifted constants are not read;
        # this view's readers (calibration, the rewrites' statistics, the accuracy report's
        # reference) read the float tensors only, so only those are copied out
        float_names = list(dict.fromkeys(names))
        self._float = Bound(
            self.observer, placeholder_values, switch_values(realized.switches, ()), float_names
        )

    def float_view(self) -> Bound:
        """The float module's outputs and tensors (every switch off)."""
        return self._float

    def bind(self, realized: Realized) -> Bound | None:
        """The executable running `realized` (made switchable), or None when its structure is
        not the placeholder realisation's."""
        module, values = self._lifted(realized)
        if not compat.structural_equal(module, self.module):
            return None
        return Bound(self.observer, values, names=self.quantized)  # the accuracy report reads these

    @staticmethod
    def _lifted(realized: Realized) -> tuple[tvm.IRModule, list[np.ndarray]]:
        return lift_qdq_constants(switchable(realized.mod, realized.switches))


class Bound:
    """An Observer of a lifted module with its constants bound: `over` takes what an
    Observer of the module before lifting takes (the switches as `extra`, or `flags` when
    given here) and copies out the tensors `names` (default: all the observer exposes)."""

    def __init__(
        self,
        observer: Observer,
        values: list[np.ndarray],
        flags: tuple[np.ndarray, ...] | None = None,
        names: list[str] | None = None,
    ) -> None:
        self.observer = observer
        self.names = observer.names if names is None else names
        self.shapes = {name: observer.shapes[name] for name in self.names}
        self._flags = () if flags is None else tuple(compat.to_tvm(f) for f in flags)
        self._tail = tuple(compat.to_tvm(v) for v in values)

    def over(
        self, data: CalibrationData, extra: tuple[np.ndarray, ...] = (), outputs_only: bool = False
    ) -> Iterator[tuple[list[np.ndarray], dict[str, np.ndarray]]]:
        tail = (*(compat.to_tvm(x) for x in extra), *self._flags, *self._tail)
        return self.observer.over(data, converted=tail, outputs_only=outputs_only, names=self.names)
