"""The VPU pattern table: rows of (name, pattern, annotations), built as data.

Every VPU op is matched in the QDQ form the quantiser produces and in the float form a
float model has before quantisation (so a float model is partitioned as it will be once
quantised):

    [dq] -> conv2d(x, [dq] W) -> [+ bias] -> [relu | clip] -> [q]      vpu.conv2d...
    [dq] -> matmul(x, [dq] W) -> [+ bias] -> [relu | clip] -> [q]      vpu.dense...
    [dq] -> op(x, ...) -> [relu | clip] -> [q]                          vpu.add_relu, ...
    [dq] -> op(x) -> [q]                                                vpu.max_pool2d, ...

Names carry the prefix `vpu.` so MergeCompositeFunctions annotates `Codegen="vpu"`. The
table is ordered longest first: FuseOpsByPattern gives earlier rows priority, so a conv
takes its bias, activation and requantisation with it whenever they are there.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import reduce
from itertools import product

import tvm
from tvm.relax.dpl import (
    CallPattern,
    DFPattern,
    ExprPattern,
    OrPattern,
    TuplePattern,
    is_const,
    is_op,
    is_tuple,
    wildcard,
)


@dataclass(frozen=True)
class PatternRow:
    """One composite: `annotations` name the sub-patterns the check reads (core, act, ...)."""

    name: str
    pattern: DFPattern
    annotations: dict[str, DFPattern] = field(default_factory=dict)


def _data() -> DFPattern:
    """An activation, possibly dequantized."""
    return is_op("relax.dequantize")(wildcard(), wildcard(), wildcard()) | wildcard()


def _weight() -> DFPattern:
    """A constant, possibly dequantized."""
    return is_op("relax.dequantize")(is_const(), is_const(), is_const()) | is_const()


def _requantized(inner: DFPattern) -> DFPattern:
    return is_op("relax.quantize")(inner, is_const(), is_const())


def _activation(inner: DFPattern) -> DFPattern:
    return is_op("relax.nn.relu")(inner) | is_op("relax.clip")(inner, wildcard(), wildcard())


# Core ops: name -> builder of the core pattern. Order matters within the table.
MAC_CORES: dict[str, Callable[[], DFPattern]] = {
    "conv2d": lambda: is_op("relax.nn.conv2d")(_data(), _weight()),
    "dense": lambda: is_op("relax.matmul")(_data(), _weight()),
}
ACTIVATED_CORES: dict[str, Callable[[], DFPattern]] = {
    "matmul": lambda: is_op("relax.matmul")(_data(), _data()),
    "add": lambda: is_op("relax.add")(_data(), _data()),
    "mul": lambda: is_op("relax.multiply")(_data(), _data() | _weight()),
}
PLAIN_CORES: dict[str, Callable[[], DFPattern]] = {
    "max_pool2d": lambda: is_op("relax.nn.max_pool2d")(_data()),
    "avg_pool2d": lambda: is_op("relax.nn.avg_pool2d")(_data()),
    "global_avg_pool": lambda: is_op("relax.mean")(_data()) | is_op("relax.nn.adaptive_avg_pool2d")(_data()),
    "concat": lambda: concat_core(()),
    # Views: a new shape for the same row-major bytes (docs: item "views never cut a subgraph").
    "reshape": lambda: (
        is_op("relax.reshape")(_data(), wildcard())
        | is_op("relax.flatten")(_data())
        | is_op("relax.squeeze")(_data())
        | is_op("relax.expand_dims")(_data())
    ),
    "relu": lambda: is_op("relax.nn.relu")(_data()),
    "clip": lambda: is_op("relax.clip")(_data(), wildcard(), wildcard()),
    "sigmoid": lambda: is_op("relax.sigmoid")(_data()),
    "tanh": lambda: is_op("relax.tanh")(_data()),
    "leaky_relu": lambda: is_op("relax.nn.leakyrelu")(_data()),
    "gelu": lambda: is_op("relax.nn.gelu")(_data()) | is_op("relax.nn.gelu_tanh")(_data()),
    "silu": lambda: is_op("relax.nn.silu")(_data()),
    "softmax": lambda: is_op("relax.nn.softmax")(_data()),
}


def concat_core(arities: Iterable[int]) -> DFPattern:
    """A concat of a tuple of `k` inputs, each possibly dequantized, for each `k` in
    `arities`: the composite takes its inputs' dequantizes as any op does (the code
    generator reads the quantisation of each input from them). A tuple built elsewhere
    matches too, without them (the code generator refuses it with that reason)."""
    tuples = [is_tuple([_data() for _ in range(k)]) for k in sorted(set(arities), reverse=True)]
    return is_op("relax.concat")(reduce(operator.or_, [*tuples, wildcard()]))


def pattern_table(concat_arities: Iterable[int] = ()) -> list[PatternRow]:
    """Every composite the VPU can take, longest first; a concat of each number of inputs
    in `concat_arities` (those of the module: DFPatterns match tuples of one length)."""
    rows = []
    for kind, core in MAC_CORES.items():
        for quant, act, bias in product((True, False), repeat=3):
            rows.append(_row(kind, core(), bias=bias, act=act, quant=quant))
    for kind, core in ACTIVATED_CORES.items():
        for quant, act in product((True, False), repeat=2):
            rows.append(_row(kind, core(), bias=False, act=act, quant=quant))
    for kind, core in PLAIN_CORES.items():
        for quant in (True, False):
            pattern = concat_core(concat_arities) if kind == "concat" else core()
            rows.append(_row(kind, pattern, bias=False, act=False, quant=quant))
    return sorted(rows, key=lambda row: -_size(row))


def _row(kind: str, core: DFPattern, bias: bool, act: bool, quant: bool) -> PatternRow:
    annotations = {"core": core}
    pattern, name = core, kind
    if bias:
        pattern = is_op("relax.add")(pattern, _weight())
        annotations["bias"], name = pattern, f"{name}_bias"
    if act:
        pattern = _activation(pattern)
        annotations["act"], name = pattern, f"{name}_act"
    if quant:
        pattern = _requantized(pattern)
        name = f"{name}_q"
    annotations["root"] = pattern
    return PatternRow(f"vpu.{name}", pattern, annotations)


def _size(row: PatternRow) -> int:
    """Ops a row covers beyond its core (bias, activation, requantise) - for ordering."""
    return sum(key in row.annotations for key in ("bias", "act")) + row.name.endswith("_q")


def may_match(row: PatternRow, ops: set[str]) -> bool:
    """Whether a module whose calls use the op names `ops` may hold a match of `row`: it has
    an op of each set needed_ops names. FuseOpsByPattern tries every row at every binding
    (about 15 us each: ocr_cls's 545 bindings take 8 ms per row), so annotate leaves out the
    rows that cannot match; the others match what they matched, in the table's order."""
    return all(needed & ops for needed in needed_ops(row.pattern))


def needed_ops(pattern: DFPattern) -> list[frozenset[str]]:
    """Sets of op names of which a match of `pattern` holds at least one op each: a call's
    own op and its arguments' needs; of an alternative, the union of one need of each side
    (either side matches) and the needs both sides have; nothing of a wildcard, a constant
    or a pattern of another kind."""
    if isinstance(pattern, CallPattern):
        op = pattern.op
        own = isinstance(op, ExprPattern) and isinstance(op.expr, tvm.ir.Op)
        return [frozenset({op.expr.name})] * own + [n for arg in pattern.args for n in needed_ops(arg)]
    if isinstance(pattern, OrPattern):
        left, right = needed_ops(pattern.left), needed_ops(pattern.right)
        both = [needed for needed in left if needed in right]  # (the same inner pattern)
        return [left[0] | right[0], *both] if left and right else []
    if isinstance(pattern, TuplePattern):
        return [n for field in pattern.fields for n in needed_ops(field)]
    return []
