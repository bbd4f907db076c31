"""The machinery the fusion passes share: a view of the dataflow graph, rules as data, and
one rewriter that swaps bindings for their fused form while keeping names.

A fusion pass is a table of `Rule`s: a permissive `tvm.relax.dpl` pattern for the shape of
the subgraph, the sub-patterns that are its inputs, a `check` returning why this instance
may not fuse (or None), and a `build` returning the fused expression. `run_rules` walks the
bindings from last to first (so the largest pattern wins), matches, checks and records
every instance in the audit: fused, or not fused with its reason. Checks common to all
rules run first:

    an intermediate read outside the pattern  "intermediate '<node>' has another consumer ('<node>')"
    a tensor without a static shape           "dynamic shape ('<node>')"
    a match only through dequantize(quantize(x)) pairs   "Q/DQ nodes cut the pattern"

A near miss is reported once per instance (not again for the shorter forms inside it).

A rule whose pattern needs an op the function does not hold is not tried at all (the
prefilter: `needs_of` reads the ops every match of a dpl pattern contains; a pattern
written as a function declares them in `Rule.needs`). Most rules of most models fall there:
a QDQ CNN has no batch_norm, mean or sigmoid for bn_fold, layer_norm or silu to look for.

passes/rebind.py then emits each replacement in place of its root binding.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import numpy as np
import tvm
from tvm import relax
from tvm.relax import dpl
from tvm.relax.dpl import DFPattern

from vpuc.compiler import compat
from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.rebind import Replacement, replace_bindings

OUTPUT = "<output>"  # the consumer that stands for the function's return value


class DataflowView:
    """Use-def facts about one Relax function, for matching."""

    def __init__(self, func: relax.Function, audit: Audit, mod: tvm.IRModule | None = None) -> None:
        self.func = func
        self.audit = audit
        self.mod = mod
        self.bindings = [b for block in func.body.blocks for b in block.bindings]
        self.var2val = {b.var: b.value for b in self.bindings}
        self.position = {b.var: i for i, b in enumerate(self.bindings)}  # program order
        self.val2var = {value: var for var, value in self.var2val.items()}
        self.consumers: dict[relax.Var, list] = {}
        for binding in self.bindings:
            for used in dict.fromkeys(relax.analysis.free_vars(binding.value)):
                self.consumers.setdefault(used, []).append(binding.var)
        for used in relax.analysis.free_vars(func.body.body):
            self.consumers.setdefault(used, []).append(OUTPUT)
        self.has_qdq = any(
            _op_name(v) in ("relax.quantize", "relax.dequantize") for v in self.var2val.values()
        )

    def var(self, expr):
        """The var bound to `expr` (dpl hands back bound values), or `expr` itself."""
        return self.val2var.get(expr, expr)

    def value(self, expr):
        """The value bound to a var, or `expr` itself."""
        return self.var2val.get(expr, expr) if isinstance(expr, relax.Var) else expr

    def const(self, expr) -> np.ndarray | None:
        return compat.constant_array(self.value(expr))

    def dequantized_const(self, expr) -> np.ndarray | None:
        """A constant, or the float value of dequantize(constant) with constant parameters
        (a QDQ model's quantised BatchNorm statistics)."""
        found = self.const(expr)
        value = self.value(expr)
        if found is not None or _op_name(value) != "relax.dequantize":
            return found
        data, scale, zero = (compat.constant_array(a) for a in value.args)
        if data is None or scale is None or zero is None:
            return None
        if scale.size > 1:
            shape = [1] * data.ndim
            shape[int(value.attrs.axis) % data.ndim] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return ((data.astype(np.float32) - zero.astype(np.float32)) * scale).astype(np.float32)

    def scalar(self, expr) -> float | None:
        """A constant that holds one value (any shape of size 1), as a float."""
        value = self.const(expr)
        return float(value.reshape(-1)[0]) if value is not None and value.size == 1 else None

    def shape(self, expr) -> tuple[int, ...] | None:
        found = compat.tensor_type(self.var(expr))
        return found[0] if found else None

    def label(self, var) -> str:
        """The ONNX node(s) of a binding, for reasons."""
        if var == OUTPUT or _is_output_packing(var, self.var2val.get(var)):
            return "graph output"
        return ", ".join(self.audit.nodes([var.name]))

    def qdq_transparent(self) -> dict:
        """var2val where `dequantize(quantize(x))` reads as x's value (for near misses);
        built once per view (every rule asks for it at every binding of a QDQ model)."""
        if getattr(self, "_qdq_transparent", None) is None:
            self._qdq_transparent = self._build_qdq_transparent()
        return self._qdq_transparent

    def _build_qdq_transparent(self) -> dict:
        view = dict(self.var2val)
        for var, value in self.var2val.items():
            if _op_name(value) != "relax.dequantize":
                continue
            quantized = self.var2val.get(value.args[0])
            if _op_name(quantized) == "relax.quantize" and quantized.args[0] in self.var2val:
                view[var] = self.var2val[quantized.args[0]]
        return view


def _is_output_packing(var, value) -> bool:
    """`gv = (a, b)` or `gv = a`: the block's output binding, not a computation."""
    return not isinstance(var, relax.DataflowVar) and isinstance(value, relax.Tuple | relax.Var)


def _op_name(expr) -> str:
    op = getattr(expr, "op", None)
    return getattr(op, "name", "") if isinstance(expr, relax.Call) else ""


@dataclass
class Match:
    """One instance of a rule's pattern: the root binding, the fused bindings, the inputs."""

    view: DataflowView
    root: relax.Var
    found: dict  # sub-pattern -> matched expr (bound values mapped back to their vars)
    fused: list[relax.Var] = field(default_factory=list)
    description: str = ""  # what the fused op is, once built

    def __getitem__(self, pattern: DFPattern):
        return self.found[pattern]

    def get(self, pattern: DFPattern):
        return self.found.get(pattern)

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.fused]


@dataclass(frozen=True)
class Rule:
    """A rewrite as data: pattern, inputs (where the fused op reads), check, build.

    `applies(match)` says whether a match is an instance at all (a matmul by a run-time
    tensor is no dense layer: no near miss either); `check(match)` returns the reason an
    instance may not fuse, or None; `build(match)` returns (fused expression, the call
    that is the fused op or None when every new binding is, its description).
    """

    name: str
    pattern: DFPattern | Callable  # a dpl pattern, or fn(value, view) -> {key: expr} | None
    inputs: tuple
    check: Callable[[Match], str | None]
    build: Callable[[Match], tuple[relax.Expr, relax.Expr | None, str]]
    anchor: DFPattern | None = None  # near misses are reported once per anchor
    applies: Callable[[Match], bool] | None = None
    shared_ok: bool = False  # intermediates may have other readers (they stay for them)
    needs: frozenset[str] = frozenset()  # ops every match holds, beside those of a dpl pattern


def run_rules(
    mod: tvm.IRModule, rules: Iterable[Rule], pass_name: str, func_name: str = "main"
) -> tvm.IRModule:
    """Match every rule on `func_name`, record the audit, rewrite what passed its checks."""
    if func_name not in [gv.name_hint for gv in mod.get_global_vars()]:
        return mod
    audit = Audit.of(mod)
    func = relax.analysis.remove_all_unused(mod[func_name])
    view = DataflowView(func, audit, mod)
    present = ops_in(view)
    outcomes = _match_all(view, [rule for rule in rules if needs_of(rule) <= present])
    replacements = [_accept(rule, match) for _, rule, match, reason in outcomes if reason is None]
    for _, rule, match, reason in sorted(outcomes, key=lambda r: r[0]):  # program order
        if reason is None:
            audit.fused(rule.name, match.names, match.description)
        else:
            audit.not_fused(rule.name, match.names, reason)
    return replace_bindings(mod, func_name, replacements, audit, pass_name, func)


def _match_all(view: DataflowView, rules: list[Rule]) -> list[tuple[int, Rule, Match, str | None]]:
    """(position, rule, match, None or the near-miss reason), last binding first."""
    claimed, reported, outcomes = set(), set(), []
    missed: dict[str, set] = {}  # rule name -> bindings of its near misses so far
    for position, binding in reversed(list(enumerate(view.bindings))):
        if binding.var in claimed or isinstance(binding.value, relax.Var):
            continue  # claimed by a larger match, or an alias (gv = x): match at x itself
        for rule in rules:
            outcome = _try_rule(rule, binding, view, claimed)
            if outcome is None:
                continue
            match, reason = outcome
            if reason is None:
                outcomes.append((position, rule, match, None))
                claimed.update(match.fused)
                break
            key = (rule.name, reason, match.get(rule.anchor) if rule.anchor else match.root)
            if key not in reported and match.root not in missed.get(rule.name, ()):
                reported.add(key)  # one near miss per instance, not one per shorter form
                outcomes.append((position, rule, match, reason))
            missed.setdefault(rule.name, set()).update(match.fused)
    return outcomes


def _try_rule(rule: Rule, binding, view: DataflowView, claimed: set):
    """(match, reason or None) when the rule's pattern matches at this binding, else None."""
    found = _extract(rule.pattern, binding.value, view, view.var2val)
    qdq_cut = False
    if found is None and view.has_qdq:
        found = _extract(rule.pattern, binding.value, view, view.qdq_transparent())
        qdq_cut = found is not None
    if found is None:
        return None
    match = Match(view, binding.var, {p: _as_var(view, e) for p, e in found.items()})
    match.fused = _fused_bindings(
        view, binding.var, [match.found[p] for p in rule.inputs if p in match.found]
    )
    if claimed.intersection(match.fused) or (rule.applies and not rule.applies(match)):
        return None
    if qdq_cut:
        return match, "Q/DQ nodes cut the pattern"
    return match, _common_reason(match, rule.shared_ok) or rule.check(match)


def _as_var(view: DataflowView, expr):
    return view.var(expr) if isinstance(expr, tvm.ir.Node) else expr


def _extract(pattern, value, view: DataflowView, var2val: dict):
    if isinstance(pattern, DFPattern):
        roots = _root_ops(pattern)
        if roots is not None and _op_name(value) not in roots:
            return None  # cheap: dpl's matcher costs ~0.1 ms a call, most bindings are other ops
        return pattern.extract_matched_expr(value, var2val)
    return pattern(value, view, var2val)


_ROOTS: dict[int, tuple[DFPattern, frozenset[str] | None]] = {}


def _root_ops(pattern: DFPattern) -> frozenset[str] | None:
    """The op names a pattern's root call can have, or None when any expression may match.
    Memoised by identity; the entry keeps the pattern alive, so an id is never reused."""
    found = _ROOTS.get(id(pattern))
    if found is None or found[0] is not pattern:
        found = _ROOTS[id(pattern)] = (pattern, _roots_of(pattern))
    return found[1]


def _roots_of(pattern: DFPattern) -> frozenset[str] | None:
    if isinstance(pattern, dpl.OrPattern):
        left, right = _roots_of(pattern.left), _roots_of(pattern.right)
        return None if left is None or right is None else left | right
    if isinstance(pattern, dpl.CallPattern) and isinstance(pattern.op, dpl.ExprPattern):
        op = pattern.op.expr
        return frozenset([op.name]) if isinstance(op, tvm.ir.Op) else None
    return None


def ops_in(view: DataflowView) -> frozenset[str]:
    """The op names of the function's bindings. Relax is in A-normal form (the BlockBuilder
    binds every nested call to a var of its own), so a call's arguments are vars, constants
    or tuples of them, and every call a pattern can match is some binding's value."""
    return frozenset(_op_name(value) for value in view.var2val.values())


def needs_of(rule: Rule) -> frozenset[str]:
    """The ops every match of the rule holds: its declared `needs`, and the ops a dpl pattern
    requires on every path (an alternative requires what both sides do). Memoised by identity
    as _root_ops."""
    found = _NEEDS.get(id(rule))
    if found is None or found[0] is not rule:
        pattern_needs = _pattern_needs(rule.pattern) if isinstance(rule.pattern, DFPattern) else frozenset()
        found = _NEEDS[id(rule)] = (rule, pattern_needs | rule.needs)
    return found[1]


_NEEDS: dict[int, tuple[Rule, frozenset[str]]] = {}


def _pattern_needs(pattern) -> frozenset[str]:
    if isinstance(pattern, dpl.ExprPattern):
        return frozenset([pattern.expr.name]) if isinstance(pattern.expr, tvm.ir.Op) else frozenset()
    if isinstance(pattern, dpl.OrPattern):
        return _pattern_needs(pattern.left) & _pattern_needs(pattern.right)
    if isinstance(pattern, dpl.AndPattern):
        return _pattern_needs(pattern.left) | _pattern_needs(pattern.right)
    if isinstance(pattern, dpl.CallPattern):
        parts = [pattern.op, *(pattern.args or [])]
    elif isinstance(pattern, dpl.TuplePattern | dpl.UnorderedTuplePattern):
        parts = list(pattern.fields)
    elif isinstance(pattern, dpl.TupleGetItemPattern):
        parts = [pattern.tuple]
    elif isinstance(pattern, dpl.AttrPattern | dpl.DataTypePattern | dpl.ShapePattern | dpl.TypePattern):
        parts = [pattern.pattern]
    else:
        return frozenset()  # a wildcard, constant, var, negation...: no op required
    return frozenset().union(*(_pattern_needs(part) for part in parts))


def _fused_bindings(view: DataflowView, root, inputs: list) -> list:
    """Bindings between the root and the pattern's inputs, in program order."""
    stop = {x for x in inputs if isinstance(x, relax.Var)}
    seen, stack = set(), [root]
    while stack:
        var = stack.pop()
        if var in seen or var in stop or var not in view.var2val:
            continue
        seen.add(var)
        stack.extend(relax.analysis.free_vars(view.var2val[var]))
    return sorted(seen, key=view.position.__getitem__)


def _common_reason(match: Match, shared_ok: bool) -> str | None:
    view, inside = match.view, set(match.fused)
    for var in match.fused:
        if shared_ok or var.same_as(match.root):
            continue
        for consumer in view.consumers.get(var, []):
            if consumer not in inside:
                return f"intermediate '{view.label(var)}' has another consumer ('{view.label(consumer)}')"
    for var in match.fused:
        if compat.tensor_type(var) is None and isinstance(var.ty, relax.TensorType):
            return f"dynamic shape ('{view.label(var)}')"
    return None


def _accept(rule: Rule, match: Match) -> Replacement:
    expr, primary, match.description = rule.build(match)
    return Replacement(
        match.root, expr, primary if primary is not None else expr, match.names, primary is None
    )


# -- small builders the passes share ----------------------------------------------------------


def const(value: np.ndarray | float, dtype: str = "float32") -> relax.Expr:
    return relax.const(np.asarray(value, dtype=dtype), dtype)


def attrs_of(call: relax.Call) -> dict:
    """Op attributes as a dict (0.27 attrs have no .keys(): read the reflected fields)."""
    attrs = call.attrs
    if attrs is None:
        return {}
    names, info = [], type(attrs).__tvm_ffi_type_info__
    while info is not None:
        names.extend(f.name for f in info.fields)
        info = getattr(info, "parent_type_info", None)
    return {name: getattr(attrs, name) for name in names if hasattr(attrs, name)}
