"""Realisation: the pass that turns the planned VPU composites of a float module into QDQ form.

    float main + QuantPlan + activation QParams   ->   QDQ main (+ provenance of new bindings)

Each planned composite becomes the shape the VPU patterns (compiler/partition/patterns.py)
match, everything else stays float:

    before   y = conv2d(x, W);  z = add(y, b);  r = relu(z);  ... = op_cpu(r)
    after    x_q  = quantize(x, s_x, zp_x)                   on the CPU (x is a float tensor)
             x_dq = dequantize(x_q, s_x, zp_x)               \
             W_dq = dequantize(W_int8, s_w[c], 0, axis=O)     |
             y    = conv2d(x_dq, W_dq)                        |  the VPU composite
             b_dq = dequantize(b_int32, s_x*s_w[c], 0, axis=C)|
             z    = add(y, b_dq);  r = relu(z)                |
             r_q  = quantize(r, s_r, zp_r)                   /
             r_dq = dequantize(r_q, s_r, zp_r);  ... = op_cpu(r_dq)

A tensor read by several VPU composites is quantised once (one `_q` binding) and
dequantised once per reading composite (each dequantize belongs to its consumer's
composite); CPU readers of a composite's output share one dequantize. A composite's output
that another composite reads is not requantised in between: the consumer dequantizes the
producer's int8 tensor. Bindings keep their names; new ones are named after the tensor
they quantise (`<t>_q`, `<t>_dq`, `<t>_out` for a model output) or the op they feed
(`<op>_in<i>`, `<op>_weight`, `<op>_bias`, `<op>_const<i>`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.quantize.bindings import OUTPUT, BindingView
from vpuc.compiler.quantize.layouts import expected_output_error, output_channel_axis, weight_channel_axis
from vpuc.compiler.quantize.params import (
    QParams,
    bias_scale,
    quantize_bias,
    quantize_constant,
    quantize_weight,
)
from vpuc.compiler.quantize.plan import MAC_KINDS, CompositePlan, QuantPlan


@dataclass(frozen=True)
class QuantizedTensor:
    """A float tensor of the float module and the int8 binding that holds it quantised."""

    tensor: str  # binding (or model input) name in the float module
    quantized: str  # the quantize binding in the QDQ module
    params: QParams
    role: str  # "output of vpu.conv2d_bias_act" or "input of the VPU"


@dataclass(frozen=True)
class Switch:
    """A dequantize of the QDQ module and what it reads in float when its layers are off:
    the input of the quantize it dequantizes (`float_source`), or the float constant
    (`float_value`). It is on when any of `layers` (composite roots) is quantised."""

    dequantized: str
    layers: tuple[str, ...]
    float_source: str | None = None
    float_value: np.ndarray | None = None


@dataclass
class Realized:
    mod: tvm.IRModule
    provenance: dict[str, list[str]]
    tensors: list[QuantizedTensor] = field(default_factory=list)
    weights: dict[str, QParams] = field(default_factory=dict)  # core binding -> weight params
    switches: list[Switch] = field(default_factory=list)  # every dequantize (switch.py)


def realize(
    mod: tvm.IRModule,
    plan: QuantPlan,
    params: dict[str, QParams],
    provenance: dict[str, list[str]],
    input_means: dict[str, np.ndarray] | None = None,
    rounded_weights: dict[str, tuple[np.ndarray, QParams]] | None = None,
) -> Realized:
    """Insert quantize/dequantize around the planned composites (see the module docstring).
    `input_means` (per-channel means of MAC inputs over the calibration samples) turns on
    bias correction: b -= E[(W_q - W) x], the mean error weight quantisation adds.
    `rounded_weights` ({core binding: (int8 weight, params)}, adaround.py) replaces the
    round-to-nearest weights of those cores."""
    func = mod["main"]
    realizer = _Realizer(mod, plan, params, provenance, BindingView.of(func), input_means or {})
    realizer.rounded = rounded_weights or {}
    new_func = realizer.visit_expr(func)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return Realized(new_mod, realizer.provenance, realizer.tensors, realizer.weight_params, realizer.switches)


def _qdq(op, data: relax.Expr, params: QParams) -> relax.Call:
    return op(
        data,
        relax.const(params.scale),
        relax.const(params.zero_point),
        axis=params.axis,
        out_dtype=_out(op, params),
    )


def _out(op, params: QParams) -> str:
    return params.dtype if op is relax.op.quantize else "float32"


@mutator
class _Realizer(PyExprMutator):
    def __init__(self, mod, plan: QuantPlan, params, provenance, view: BindingView, input_means) -> None:
        super().__init__(mod)
        self.plan, self.params, self.view, self.input_means = plan, params, view, input_means
        self.weight_errors: dict[str, np.ndarray] = {}  # core -> W_q - W (dequantized)
        self.member_of, self.root_of = plan.member_of, plan.root_of
        self.provenance = {k: list(v) for k, v in provenance.items()}
        self.names = set(view.vars)
        self.new_vars: dict[str, relax.Var] = {p: view.vars[p] for p in view.params}
        self.int8: dict[str, relax.Var] = {}  # tensor -> its quantize binding
        self.dq_for: dict[tuple[str, str], relax.Var] = {}  # (tensor, composite root) -> dequantize
        self.tensors: list[QuantizedTensor] = []
        self.weight_params: dict[str, QParams] = {}
        self.switches: list[Switch] = []
        self.rounded: dict[str, tuple[np.ndarray, QParams]] = {}
        self.source_of_q: dict[str, str] = {}  # quantize binding -> the float tensor it reads

    # -- bindings -------------------------------------------------------------------------

    def visit_var_binding_(self, binding) -> None:
        name, old = binding.var.name, binding.var
        composite = self.member_of.get(name)
        if composite is None:
            value = self.visit_expr(binding.value)
        else:
            value = self._vpu_value(name, binding.value, composite)
        is_output = not isinstance(old, relax.DataflowVar)
        if composite is None or name != composite.root:
            self.new_vars[name] = self._emit(name, value, output=is_output)
            self.set_var_remap(old, self.new_vars[name])
            return
        self.new_vars[name] = self._emit(name, value, output=False)
        self._quantize_root(name, composite, old, is_output)

    def _quantize_root(self, name: str, composite: CompositePlan, old: relax.Var, is_output: bool) -> None:
        params = self.params[name]
        quantized = self._emit(f"{name}_q", _qdq(relax.op.quantize, self.new_vars[name], params), like=name)
        self.int8[name] = quantized
        self.source_of_q[quantized.name] = name
        self.tensors.append(QuantizedTensor(name, quantized.name, params, f"output of {composite.name}"))
        readers = self.view.readers.get(name, [])
        if is_output:  # the model output, and what CPU ops read
            out = self._emit(
                f"{name}_out", _qdq(relax.op.dequantize, quantized, params), output=True, like=name
            )
            self.set_var_remap(old, out)
            self.switches.append(Switch(out.name, (name,), float_source=name))
        elif any(r != OUTPUT and r not in self.member_of for r in readers):
            cpu = self._emit(f"{name}_dq", _qdq(relax.op.dequantize, quantized, params), like=name)
            self.set_var_remap(old, cpu)
            self.switches.append(Switch(cpu.name, (name,), float_source=name))

    def _emit(self, base: str, value: relax.Expr, output: bool = False, like: str | None = None) -> relax.Var:
        """Bind `value`: an original binding (like=None) keeps its name; a new one is named
        after `base` (made unique) and inherits the ONNX nodes of the binding `like`."""
        name = base if like is None else self._fresh(base)
        self.names.add(name)
        value = self.builder_.normalize(value)
        var = (relax.Var if output else relax.DataflowVar)(name, value.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, value))
        if like is not None and like in self.provenance:
            self.provenance[name] = list(self.provenance[like])
        return var

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self.names:
            name, k = f"{base}_{k}", k + 1
        return name

    # -- inside a composite -----------------------------------------------------------------

    def _vpu_value(self, name: str, value: relax.Call, composite: CompositePlan) -> relax.Call:
        args = []
        for index, arg in enumerate(value.args):
            if isinstance(arg, relax.Tuple):
                args.append(
                    relax.Tuple([self._vpu_arg(name, i, f, composite) for i, f in enumerate(arg.fields)])
                )
            else:
                args.append(self._vpu_arg(name, index, arg, composite))
        return relax.Call(value.op, args, value.attrs, value.ty_args)

    def _vpu_arg(self, name: str, index: int, arg: relax.Expr, composite: CompositePlan) -> relax.Expr:
        if isinstance(arg, relax.Var):
            if arg.name in composite.members:
                return self.new_vars[arg.name]
            return self._dequantized_input(arg.name, name, index, composite)
        array = compat.constant_array(arg)
        if array is None or not np.issubdtype(array.dtype, np.floating):
            return arg
        if name == composite.core and composite.kind in MAC_KINDS and index == 1:
            return self._weight(name, array, composite)
        if name == composite.bias:
            return self._bias(name, array, composite)
        if name == composite.core:
            quantized, params = quantize_constant(array)
            var = self._emit(
                f"{name}_const{index}", _qdq(relax.op.dequantize, relax.const(quantized), params), like=name
            )
            self.switches.append(Switch(var.name, (composite.root,), float_value=array))
            return var
        return arg

    def _dequantized_input(
        self, tensor: str, consumer: str, index: int, composite: CompositePlan
    ) -> relax.Var:
        key = (tensor, composite.root)
        if key not in self.dq_for:
            params = self.params[tensor]
            quantized = self._int8_of(tensor, consumer)
            self.dq_for[key] = self._emit(
                f"{consumer}_in{index}", _qdq(relax.op.dequantize, quantized, params), like=consumer
            )
            producer = (tensor,) if tensor in self.root_of else ()
            self.switches.append(
                Switch(self.dq_for[key].name, (composite.root, *producer), float_source=tensor)
            )
        return self.dq_for[key]

    def _int8_of(self, tensor: str, consumer: str) -> relax.Var:
        """The int8 form of a float tensor (a CPU op's output or a model input), made once."""
        if tensor not in self.int8:
            params = self.params[tensor]
            source = self.new_vars[tensor]
            like = tensor if tensor in self.provenance else consumer
            self.int8[tensor] = self._emit(f"{tensor}_q", _qdq(relax.op.quantize, source, params), like=like)
            self.tensors.append(QuantizedTensor(tensor, self.int8[tensor].name, params, "input of the VPU"))
        return self.int8[tensor]

    def _weight(self, core: str, weight: np.ndarray, composite: CompositePlan) -> relax.Var:
        call = self.view.values[core]
        if core in self.rounded:
            quantized, params = self.rounded[core]
        else:
            quantized, params = quantize_weight(weight, weight_channel_axis(call, composite.kind))
        self.weight_params[core] = params
        self.weight_errors[core] = params.dequantize(quantized) - weight
        var = self._emit(
            f"{core}_weight", _qdq(relax.op.dequantize, relax.const(quantized), params), like=core
        )
        self.switches.append(Switch(var.name, (composite.root,), float_value=weight))
        return var

    def _bias(self, name: str, bias: np.ndarray, composite: CompositePlan) -> relax.Var:
        core_call = self.view.values[composite.core]
        out_shape = compat.tensor_type(core_call)[0]
        axis = output_channel_axis(core_call, composite.kind)
        channels = out_shape[axis]
        full = bias.reshape((1,) * (len(out_shape) - bias.ndim) + bias.shape)
        target = tuple(channels if i == axis else d for i, d in enumerate(full.shape))
        full = np.array(np.broadcast_to(full, target), dtype=np.float32)
        mean = self.input_means.get(composite.inputs[0])
        if mean is not None:  # bias correction
            shift = expected_output_error(self.weight_errors[composite.core], mean, core_call, composite.kind)
            shape = [1] * full.ndim
            shape[axis] = channels
            full = (full - shift.reshape(shape)).astype(np.float32)
        scale = bias_scale(self.params[composite.inputs[0]], self.weight_params[composite.core])
        quantized, params = quantize_bias(full, scale, axis)
        var = self._emit(f"{name}_bias", _qdq(relax.op.dequantize, relax.const(quantized), params), like=name)
        self.switches.append(Switch(var.name, (composite.root,), float_value=bias))
        return var
