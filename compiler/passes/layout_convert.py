"""The layout pass's conversion (passes/layout.py chooses; this converts): conv2d NCHW/OIHW ->
NHWC/OHWI, and every op with a known channels-last form follows; everything else keeps the
layout it was written in, with transposes only at its edges.

Each tensor carries a permutation `p` with physical = permute_dims(logical, p) (None: as
written). An op reads its inputs' physical tensors and either

    follows    computes the same values on the permuted tensors, its attributes moved along
               (relu(x): p;  mean(x, axis=a): axis p.index(a);  max_pool2d NCHW -> NHWC;
               quantize(x, axis=a): axis p.index(a);  x + const: the const permuted too;
               squeeze(x, axis=a): axes p.index(a), the kept axes in their physical order)
    absorbs    permute_dims(x, q) is no op at all: its output is x's physical tensor with
               the permutation composed (an exporter's NHWC <-> NCHW transposes vanish)
    converts   conv2d: input to NHWC (one transpose when it is not), weight OIHW -> OHWI
    keeps      every other op (reshape, matmul, conv2d_transpose, conv1d, call_tir, ...):
               its inputs are transposed back to their written layout first

A transposed copy is made once per tensor and shared by its readers; graph outputs leave in
their written layout. Only ops whose NHWC form TVM builds for llvm are converted (an op
without a channels-last form stays as it is: ConvTranspose, 1-D convs), so the conversion
cannot break a build. TVM's ConvertLayout is not used: it has no rule for
quantize/dequantize (a QDQ model's Q/DQ would keep every transpose), converts ops it cannot
build, and fails on some 3-D layouts ("Invalid SLayout").
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit, fresh_name

NHWC = (0, 2, 3, 1)  # physical NHWC of a logical NCHW tensor
OIHW_TO_OHWI = (0, 2, 3, 1)
Perm = tuple[int, ...] | None

UNARY = {
    "relax.nn.relu", "relax.clip", "relax.nn.leakyrelu", "relax.sigmoid", "relax.tanh",
    "relax.nn.silu", "relax.nn.gelu", "relax.nn.gelu_tanh", "relax.exp", "relax.negative",
    "relax.sqrt", "relax.rsqrt", "relax.abs", "relax.erf", "relax.astype", "relax.round",
    "relax.floor", "relax.ceil", "relax.log", "relax.square", "relax.nn.prelu",
}  # fmt: skip
BINARY = {
    "relax.add", "relax.subtract", "relax.multiply", "relax.divide", "relax.maximum",
    "relax.minimum", "relax.power",
}  # fmt: skip
REDUCE = {"relax.mean", "relax.sum", "relax.max", "relax.min"}
QDQ = {"relax.quantize", "relax.dequantize"}


def inverse(perm: tuple[int, ...]) -> tuple[int, ...]:
    out = [0] * len(perm)
    for index, axis in enumerate(perm):
        out[axis] = index
    return tuple(out)


def _norm(perm) -> Perm:
    perm = tuple(int(a) for a in perm)
    return None if perm == tuple(range(len(perm))) else perm


def _const(array: np.ndarray) -> relax.Expr:
    """A constant of the array's own dtype (relax.const alone makes float64 float32)."""
    return relax.const(np.ascontiguousarray(array), str(array.dtype))


def _op(expr) -> str:
    return expr.op.name if isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) else ""


def _ndim(expr) -> int | None:
    ty = getattr(expr, "ty", None)
    return int(ty.ndim) if isinstance(ty, relax.TensorType) and ty.ndim >= 0 else None


def convert_to_nhwc(mod: tvm.IRModule, pass_name: str) -> tvm.IRModule:
    """Convert main (see the module docstring); provenance kept, inserted transposes marked."""
    audit = Audit.of(mod)
    func = mod["main"]
    converter = _Converter(mod, audit, pass_name, {p.name for p in func.params} | set(audit.provenance))
    converter.shared_params = _shared_params(func)
    new_func = relax.analysis.remove_all_unused(converter.visit_expr(func))
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), new_func)
    return audit.attach(new_mod)


def _shared_params(func: relax.Function) -> set[relax.Var]:
    """The parameters more than one binding (or the function's result) reads."""
    readers: dict[relax.Var, int] = {}
    values = [b.value for block in func.body.blocks for b in block.bindings] + [func.body.body]
    for value in values:
        for var in relax.analysis.free_vars(value):
            readers[var] = readers.get(var, 0) + 1
    return {p for p in func.params if readers.get(p, 0) > 1}


@mutator
class _Converter(PyExprMutator):
    def __init__(self, mod, audit: Audit, pass_name: str, names: set[str]) -> None:
        super().__init__(mod)
        self.audit, self.pass_name, self.names = audit, pass_name, names
        self.perm: dict[relax.Var, Perm | list[Perm]] = {}  # a tuple's: one per field
        self.copies: dict[tuple[relax.Var, Perm], relax.Var] = {}
        self.shared_params: set[relax.Var] = set()  # convert_to_nhwc sets it (_shared_params)

    # -- bookkeeping -----------------------------------------------------------------------

    def perm_of(self, expr) -> Perm:
        found = self.perm.get(expr) if isinstance(expr, relax.Var) else None
        return found if not isinstance(found, list) else None

    def physical(self, expr, want: Perm) -> relax.Expr:
        """`expr` (a new var or constant) laid out as `want` (relative to its logical form)."""
        have = self.perm_of(expr)
        if have == want:
            return expr
        array = compat.constant_array(expr)
        if array is not None:
            logical = array if have is None else np.transpose(array, inverse(have))
            return _const(logical if want is None else np.transpose(logical, want))
        key = (expr, want)
        if key not in self.copies:
            # physical_have -> logical -> physical_want in one permute
            axes = list(range(len(want or have))) if have is None else list(inverse(have))
            axes = [axes[a] for a in want] if want is not None else axes
            name = fresh_name(self.names, f"{expr.name}_{'nhwc' if want == NHWC else 'as_written'}")
            copy = self.builder_.emit(relax.op.permute_dims(expr, axes), name_hint=name)
            self.audit.insert(name, self.pass_name)
            self.perm[copy] = want
            self.copies[key] = copy
        return self.copies[key]

    def written(self, expr) -> relax.Expr:
        if isinstance(expr, relax.Tuple):
            return relax.Tuple([self.written(f) for f in expr.fields])
        return self.physical(expr, None) if isinstance(expr, relax.Var) else expr

    # -- bindings --------------------------------------------------------------------------

    def visit_var_binding_(self, binding) -> None:
        old, value = binding.var, self._remapped(binding.value)
        result = _rule(value)(self, value) if isinstance(value, relax.Call) else None
        if isinstance(value, relax.TupleGetItem):
            result = self._item(value)
        if result is None:
            result = self._kept(value), None
        expr, perm = result
        if not isinstance(old, relax.DataflowVar) and isinstance(perm, list) and any(perm):
            inner = self.builder_.emit(expr, name_hint=fresh_name(self.names, f"{old.name}_nhwc"))
            self.perm[inner] = perm
            fields = [self.builder_.emit(relax.TupleGetItem(inner, i)) for i in range(len(perm))]
            for field, field_perm in zip(fields, perm, strict=True):
                self.perm[field] = field_perm
            expr, perm = relax.Tuple([self.written(f) for f in fields]), None
        if not isinstance(old, relax.DataflowVar) and isinstance(perm, tuple):  # a graph output
            inner = self.builder_.emit(expr, name_hint=fresh_name(self.names, f"{old.name}_nhwc"))
            self.audit.provenance[inner.name] = list(self.audit.provenance.get(old.name, []))
            self.perm[inner] = perm
            expr, perm = relax.op.permute_dims(inner, list(inverse(perm))), None
            self.audit.insert(old.name, self.pass_name)
        new = self._rebind(old, expr, perm)
        self.perm[new] = perm

    def _item(self, value: relax.TupleGetItem):
        """A field of a tuple whose fields have their own layouts (batch_norm's)."""
        perms = self.perm.get(value.tuple_value) if isinstance(value.tuple_value, relax.Var) else None
        return (value, perms[value.index]) if isinstance(perms, list) else None

    def _remapped(self, value: relax.Expr) -> relax.Expr:
        """`value` reading the new vars, not yet normalised (shapes may have changed)."""
        if isinstance(value, relax.Call):
            return relax.Call(value.op, [self._remapped(a) for a in value.args], value.attrs, value.ty_args)
        if isinstance(value, relax.Tuple):
            return relax.Tuple([self._remapped(f) for f in value.fields])
        if isinstance(value, relax.TupleGetItem):
            return relax.TupleGetItem(self._remapped(value.tuple_value), value.index)
        return self.visit_expr(value) if isinstance(value, relax.Var) else value

    def _rebind(self, old: relax.Var, expr: relax.Expr, perm=None) -> relax.Var:
        expr = self.builder_.normalize(expr)
        # A relabelling (permute_dims absorbed) returns its input var under another layout:
        # aliasing the two would give the input the output's layout (x @ x^T read x twice
        # transposed: found by tests/fuzz, regression case cpu-0cf063e9af), so it gets a
        # binding of its own. A graph input has no layout yet (as written): when another
        # binding reads it too, its relabelling is one as well (x @ permute(x) on the graph
        # input, cpu-fd88f7e7a6); read once (an NHWC export's input transpose), it is aliased
        # and takes the layout, so an all-VPU graph keeps no host binding.
        if isinstance(expr, relax.Var) and expr not in self.perm and expr in self.shared_params:
            relabelled = perm is not None
        else:
            relabelled = isinstance(expr, relax.Var) and expr in self.perm and self.perm[expr] != perm
        if isinstance(expr, relax.Var) and isinstance(old, relax.DataflowVar) and not relabelled:
            self.set_var_remap(old, expr)
            return expr
        cls = relax.DataflowVar if isinstance(old, relax.DataflowVar) else relax.Var
        var = cls(old.name, expr.ty)
        self.builder_.emit_normalized(relax.VarBinding(var, expr))
        self.set_var_remap(old, var)
        return var

    def _kept(self, value: relax.Expr) -> relax.Expr:
        """The op as written: every input back in its written layout."""
        if isinstance(value, relax.Call):
            args = [self.written(a) for a in value.args]
            return relax.Call(value.op, args, value.attrs, value.ty_args)
        if isinstance(value, relax.Tuple):
            return self.written(value)
        if isinstance(value, relax.TupleGetItem):
            return value
        return self.written(value) if isinstance(value, relax.Var) else value


# -- rules: call -> (expr, perm of the result) or None (keep as written) --------------------


def _rule(call: relax.Call) -> Callable:
    op = _op(call)
    if op in UNARY:
        return _unary
    if op in BINARY:
        return _binary
    if op in REDUCE:
        return _reduce
    if op in QDQ:
        return _qdq
    return _RULES.get(op, lambda _c, _v: None)


def _call(call: relax.Call, args, **attrs) -> relax.Call:
    new_attrs = call.attrs
    if attrs:
        fields = {f: getattr(call.attrs, f) for f in _attr_fields(call.attrs)}
        fields.update(attrs)
        new_attrs = tvm.ir.make_node(call.attrs.__class__.__tvm_ffi_type_info__.type_key, **fields)
    return relax.Call(call.op, args, new_attrs, call.ty_args)


def _attr_fields(attrs) -> list[str]:
    names, info = [], type(attrs).__tvm_ffi_type_info__
    while info is not None:
        names += [f.name for f in info.fields]
        info = getattr(info, "parent_type_info", None)
    return names


def _unary(conv: _Converter, call: relax.Call):
    data, perm = call.args[0], conv.perm_of(call.args[0])
    if perm is None:
        return None
    rest = [conv.written(a) if isinstance(a, relax.Var) else a for a in call.args[1:]]
    if any(isinstance(a, relax.Var) for a in call.args[1:]):
        return None  # a run-time second operand (prelu's slope): keep
    return relax.Call(call.op, [data, *rest], call.attrs, call.ty_args), perm


def _qdq(conv: _Converter, call: relax.Call):
    data, perm = call.args[0], conv.perm_of(call.args[0])
    if perm is None:
        return None
    axis = int(call.attrs.axis) % len(perm)
    return _call(call, [data, *call.args[1:]], axis=perm.index(axis)), perm


def _binary(conv: _Converter, call: relax.Call):
    perms = [conv.perm_of(a) for a in call.args]
    target = next((p for p in perms if p is not None), None)
    if target is None:
        return None
    args = []
    for arg in call.args:
        ndim, array = _ndim(arg), compat.constant_array(arg)
        if array is not None and array.size == 1:
            args.append(arg)
        elif array is not None and array.ndim <= len(target):
            full = array.reshape((1,) * (len(target) - array.ndim) + array.shape)
            args.append(_const(np.transpose(full, target)))
        elif isinstance(arg, relax.Var) and ndim == len(target):
            args.append(conv.physical(arg, target))
        else:
            return None  # a run-time operand of another rank broadcasts: keep as written
    return relax.Call(call.op, args, call.attrs, call.ty_args), target


def _reduce(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None or call.attrs.axis is None:
        return None
    axes = sorted(perm.index(int(a) % len(perm)) for a in call.attrs.axis)
    new = _call(call, [call.args[0]], axis=axes)
    if call.attrs.keepdims:
        return new, perm
    kept = [logical for logical in perm if perm.index(logical) not in axes]
    return new, _rank_perm(kept)


def _squeeze(conv: _Converter, call: relax.Call):
    """squeeze(x, axis=a) follows: the physical axes p.index(a) go, the rest keep their
    physical order (1x1x1xC NHWC squeezed to 1xC is as written: no transpose back)."""
    perm = conv.perm_of(call.args[0])
    if perm is None or call.attrs.axis is None:
        return None
    axes = sorted(perm.index(int(a) % len(perm)) for a in call.attrs.axis)
    kept = [logical for logical in perm if perm.index(logical) not in axes]
    return _call(call, [call.args[0]], axis=axes), _rank_perm(kept)


def _rank_perm(kept: list[int]) -> Perm:
    """Physical order of the kept logical axes, renumbered 0..k-1."""
    order = sorted(kept)
    return _norm([order.index(axis) for axis in kept])


def _softmax(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    return _call(call, [call.args[0]], axis=perm.index(int(call.attrs.axis) % len(perm))), perm


def _permute(conv: _Converter, call: relax.Call):
    """permute_dims(x, q): no op; the result is x's physical tensor, relabelled."""
    data = call.args[0]
    ndim = _ndim(data)
    if ndim is None or compat.constant_array(data) is not None:
        return None
    have = conv.perm_of(data) or tuple(range(ndim))
    axes = list(range(ndim))[::-1] if call.attrs.axes is None else [int(a) for a in call.attrs.axes]
    # logical_out = logical_in.permute(axes) = physical_in.permute(inverse(have)[axes])
    composed = [inverse(have)[a] for a in axes]
    return data, _norm(inverse(tuple(composed)))


def _concat(conv: _Converter, call: relax.Call):
    fields = list(call.args[0].fields) if isinstance(call.args[0], relax.Tuple) else None
    if fields is None:
        return None
    target = next((conv.perm_of(f) for f in fields if conv.perm_of(f) is not None), None)
    if target is None or any(_ndim(f) != len(target) for f in fields):
        return None
    moved = [conv.physical(f, target) for f in fields]
    axis = target.index(int(call.attrs.axis) % len(target))
    return _call(call, [relax.Tuple(moved)], axis=axis), target


def _pool(conv: _Converter, call: relax.Call):
    if conv.perm_of(call.args[0]) != NHWC or str(call.attrs.layout) != "NCHW":
        return None
    out_layout = str(call.attrs.out_layout)
    if out_layout != "NCHW":
        return None
    return _call(call, [call.args[0]], layout="NHWC", out_layout="NHWC"), NHWC


def _resize(conv: _Converter, call: relax.Call):
    if conv.perm_of(call.args[0]) != NHWC or str(call.attrs.layout) != "NCHW":
        return None
    return _call(call, [call.args[0], *call.args[1:]], layout="NHWC"), NHWC


def _pad(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    width = [int(w) for w in call.attrs.pad_width]
    pairs = [width[2 * i : 2 * i + 2] for i in range(len(perm))]
    moved = [v for logical in perm for v in pairs[logical]]
    return _call(call, [call.args[0]], pad_width=moved), perm


def _conv2d(conv: _Converter, call: relax.Call):
    attrs = call.attrs
    if str(attrs.data_layout) != "NCHW" or str(attrs.kernel_layout) != "OIHW":
        return None
    if str(attrs.out_layout) not in ("NCHW", ""):
        return None
    data = conv.physical(call.args[0], NHWC)
    weight = call.args[1]
    array = compat.constant_array(weight)
    if array is not None:
        weight = _const(np.transpose(array, OIHW_TO_OHWI))
    else:  # a dequantize of a constant (QDQ models): the QDQ cleanup folds this transpose
        weight = conv.physical(conv.written(weight), OIHW_TO_OHWI)
    new = relax.op.nn.conv2d(
        data, weight, strides=attrs.strides, padding=attrs.padding, dilation=attrs.dilation,
        groups=int(attrs.groups), data_layout="NHWC", kernel_layout="OHWI", out_layout="NHWC",
        out_dtype=attrs.out_dtype if str(attrs.out_dtype) else None,
    )  # fmt: skip
    return new, NHWC


def _batch_norm(conv: _Converter, call: relax.Call):
    perm = conv.perm_of(call.args[0])
    if perm is None:
        return None
    axis = perm.index(int(call.attrs.axis) % len(perm))
    return _call(call, list(call.args), axis=axis), [perm, None, None]


_RULES: dict[str, Callable] = {
    "relax.nn.batch_norm": _batch_norm,
    "relax.nn.softmax": _softmax,
    "relax.nn.log_softmax": _softmax,
    "relax.permute_dims": _permute,
    "relax.concat": _concat,
    "relax.nn.max_pool2d": _pool,
    "relax.nn.avg_pool2d": _pool,
    "relax.nn.adaptive_avg_pool2d": _pool,
    "relax.image.resize2d": _resize,
    "relax.nn.pad": _pad,
    "relax.nn.conv2d": _conv2d,
    "relax.squeeze": _squeeze,
}
