"""BYOC annotation: FuseOpsByPattern with the VPU pattern table, each match checked against
the target's op list and constraints (whether a layer fits SRAM is asked of the code
generator's layer planner, compiler/lower/codegen/oracle.py), then MergeCompositeFunctions.

    main (Relax)  ->  main calling functions with Codegen="vpu", each holding composite
                      functions "vpu.<op>" whose attribute "vars" lists the original
                      binding names they took over

A check that refuses a match records why (the constraint's docstring with the target's
limits and what it found), keyed by the binding name of the op it refused, so the report
can give every CPU op its reason. `blocked` names bindings that must stay on the CPU
whatever the checks say (the profitability rule's verdicts), with the reason to report.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax
from tvm.relax.transform import FusionPattern, PatternCheckContext

from vpuc.compiler.errors import InternalError, first_line
from vpuc.compiler.lower.codegen.kernel_split import split_reason
from vpuc.compiler.lower.codegen.oracle import fit
from vpuc.compiler.partition.graph import infer_layouts
from vpuc.compiler.partition.opview import op_name, op_view
from vpuc.compiler.partition.patterns import PatternRow, may_match, pattern_table
from vpuc.targets import Target
from vpuc.targets.constraints import KEYED, check_op
from vpuc.targets.ops import OP_KINDS

VARS_ATTR = "vars"


@dataclass
class Annotation:
    """What the checks decided, by binding name."""

    refusals: dict[str, list[str]] = field(default_factory=dict)  # var -> reasons
    notes: dict[str, str] = field(default_factory=dict)  # var -> how the VPU covers it (decomposed: ...)
    _taken: dict[int, list[str]] = field(default_factory=dict)  # root expr hash -> vars

    def refuse(self, var: str, reason: str) -> None:
        reasons = self.refusals.setdefault(var, [])
        if reason not in reasons:
            reasons.append(reason)


def annotate(
    mod: tvm.IRModule, target: Target, blocked: dict[str, str] | None = None
) -> tuple[tvm.IRModule, Annotation]:
    """Partition `mod` for `target`; returns the module with VPU functions and the record."""
    annotation = Annotation()
    blocked = blocked or {}
    layouts = infer_layouts(mod["main"])
    # a Python dict: each pattern check copies it, and a TVM Map copies key by key through
    # the FFI (282,000 lookups, 3 s of YOLOv8n-320's annotate under cProfile)
    bound = dict(relax.analysis.get_var2val(mod["main"]).items())
    ops = _ops_of(mod)
    rows = [row for row in pattern_table(_concat_arities(mod["main"])) if may_match(row, ops)]
    wide = _has_wide(bound)  # 16-bit Q/DQ anywhere: only then does a check look for them
    patterns = [_fusion_pattern(row, target, annotation, blocked, layouts, bound, wide) for row in rows]
    try:
        mod = relax.transform.FuseOpsByPattern(patterns, bind_constants=True, annotate_codegen=False)(mod)
        mod = relax.transform.MergeCompositeFunctions()(mod)
    except tvm.error.InternalError as exc:  # from TVM's graph partitioner
        raise InternalError(
            "VPU partitioning failed inside TVM "
            f"(FuseOpsByPattern/MergeCompositeFunctions: {first_line(exc)}; workaround: --target cpu)"
        ) from None
    return mod, annotation


def _ops_of(mod: tvm.IRModule) -> set[str]:
    """The names of the ops the module's Relax functions call."""
    found: set[str] = set()
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, lambda e: isinstance(e, tvm.ir.Op) and found.add(e.name))
    return found


def _concat_arities(func: relax.Function) -> set[int]:
    """How many inputs each concat of `func` joins (of a tuple written in the call)."""
    return {
        len(b.value.args[0].fields)
        for block in func.body.blocks
        for b in block.bindings
        if op_name(b.value) == "relax.concat" and isinstance(b.value.args[0], relax.Tuple)
    }


def _fusion_pattern(
    row: PatternRow, target: Target, annotation: Annotation, blocked, layouts, bound, wide_module=False
) -> FusionPattern:
    def check(ctx: PatternCheckContext) -> bool:
        names = {var: var.name for var in ctx.matched_bindings.keys()}
        core = ctx.annotated_expr["core"]
        core_name = _bound_name(ctx, core) or "?"
        leak = _leak(ctx)
        if leak is not None:  # a shorter row may take the core alone (conv -> x + 3 read twice: hard-swish)
            annotation.refuse(core_name, _leak_reason(row.name, *leak))
            return False
        # Q/DQ-bound arguments: the module's bindings plus this match's own.
        seen = {**bound, **dict(ctx.matched_bindings.items())}
        wide = _wide_tensor(ctx, seen) if wide_module else None
        if wide is not None:  # before the blocked, cost and planner checks: nothing makes it fit
            why = f"{row.name}: the VPU computes int8 tensors ({wide}; 16-bit runs on the CPU)"
            annotation.refuse(core_name, why)
            return False
        refused = sorted(name for name in names.values() if name in blocked)
        if refused:  # every blocked binding of the match gets its reason (not the first one found)
            for name in refused:
                annotation.refuse(name, blocked[name])
            return False
        # The core's own output has its input's layout (ops with a layout attribute say
        # theirs); its input may be a var an earlier composite just created, unknown here.
        refusals = _violations(ctx, core, core_name, target, layouts.get(core_name), seen, annotation.notes)
        for var, reason in refusals:
            annotation.refuse(var, reason)
        if refusals:
            return False
        annotation._taken[hash(ctx.matched_expr)] = sorted(names.values())
        return True

    def attrs(annotated: dict) -> dict[str, str]:
        return {VARS_ATTR: ",".join(annotation._taken.get(hash(annotated["root"]), []))}

    return FusionPattern(row.name, row.pattern, row.annotations, check, attrs)


def _leak(ctx: PatternCheckContext) -> tuple[str, list[str]] | None:
    """A value computed inside the match that is also read outside it, with its readers
    there (None if there is none): the code generator cannot lower such a layer (it returns
    one value), so the match must not take it."""
    inside = set(ctx.matched_bindings.keys())
    root = _bound_var(ctx, ctx.matched_expr)
    for var in inside:
        outside = [user.name for user in ctx.var_usages.get(var, []) if var != root and user not in inside]
        if outside:
            return var.name, sorted(outside)
    return None


WIDE_DTYPES = ("int16", "uint16")


def _has_wide(bound) -> bool:
    """Whether any quantize/dequantize of the module has a 16-bit side."""
    return any(_wide_dtype(value) is not None for value in bound.values())


def _wide_dtype(value) -> str | None:
    """The 16-bit dtype of a quantize's result or a dequantize's input, else None."""
    name = op_name(value)
    if name not in _QDQ:
        return None
    quantised = value if name == "relax.quantize" else value.args[0]
    ty = getattr(quantised, "ty", None)
    dtype = str(ty.dtype) if isinstance(ty, relax.TensorType) else None
    return dtype if dtype in WIDE_DTYPES else None


def _wide_tensor(ctx: PatternCheckContext, seen) -> str | None:
    """A 16-bit quantised tensor the match reads or writes ("'r1_q' is int16"), or None:
    onnxruntime's quantiser writes int16 activations (A16W8, or one tensor by
    TensorQuantOverrides), which the VPU's 8-bit datapath cannot hold."""
    values = dict(ctx.matched_bindings.items())
    for value in list(values.values()):  # the quantised inputs it reads
        for arg in value.args if isinstance(value, relax.Call) else ():
            if isinstance(arg, relax.Var) and arg not in values and op_name(seen.get(arg)) in _QDQ:
                values[arg] = seen[arg]
    root = _bound_var(ctx, ctx.matched_expr)
    for user in ctx.var_usages.get(root, []) if root is not None else ():  # and what quantises its result
        if op_name(seen.get(user)) == "relax.quantize":
            values[user] = seen[user]
    for var, value in values.items():
        dtype = _wide_dtype(value)
        if dtype is not None:
            return f"'{var.name}' is {dtype}"
    return None


_QDQ = ("relax.quantize", "relax.dequantize")


def _leak_reason(pattern: str, value: str, readers: list[str]) -> str:
    """The reason a match that would leak a value records for its core op: its own, not the
    reason of whichever neighbouring match the report would otherwise show."""
    read = " and ".join(f"'{r}'" for r in readers)
    return f"{pattern}: '{value}' is also read outside it, by {read} (a VPU layer writes one tensor)"


def _violations(
    ctx: PatternCheckContext, core, core_name: str, target: Target, layout: str | None, bound, notes
) -> list[tuple[str, str]]:
    """(binding name, reason) for every check the match fails: the core's, then the fused
    activation's (each against its own kind's limits). A conv past the kernel or padding
    limits that sub-kernels cover passes, with a note saying how (kernel_split.py), as does
    one within them whose outer output rows read only padding (its input staged)."""
    act = ctx.annotated_expr.get("act")
    ops = [(core, core_name, act)]
    if act is not None:
        ops.append((act, _bound_name(ctx, act) or core_name, None))
    refusals = []
    for expr, name, activation in ops:
        view = op_view(expr, name, activation, layout, bound)
        if not target.supports(view.kind):
            refusals.append((name, not_listed_reason(view.kind, target)))
            continue
        limits = target.op_limits(view.kind)
        found = check_op(view, limits, target.hardware)
        reasons = [v.reason for v in found]
        if view.kind == "conv2d":  # (also within the limits: outputs that read only padding)
            reasons = _split(view, name, target, found, notes)
        violations = [(name, reason) for reason in reasons]
        if not violations and limits.get("fits_sram"):
            violations = _planner_refusal(view, name, target)
        refusals += violations
    return refusals


SPLIT_KEYS = ("kernel", "padding")


def _split(view, name: str, target: Target, found, notes) -> list[str]:
    """The reasons left when the kernel and padding checks are answered by sub-kernels."""
    attrs = view.attrs
    note, why_not = split_reason(
        tuple(attrs.get("kernel", (1, 1))), tuple(attrs.get("padding", (0, 0, 0, 0))),
        tuple(attrs.get("strides", (1, 1))), tuple(attrs.get("dilation", (1, 1))),
        view.input_shape(0)[2:], view.output_shape[2:], target,
    )  # fmt: skip
    if note is not None:
        notes[name] = note
        return [v.reason for v in found if v.constraint.key not in SPLIT_KEYS]
    if why_not is None:
        return [v.reason for v in found]
    return [f"{v.reason} ({why_not})" if v.constraint.key in SPLIT_KEYS else v.reason for v in found]


def _planner_refusal(view, name: str, target: Target) -> list[tuple[str, str]]:
    """Whether the code generator's layer planner can tile the layer into SRAM: it is the
    one answerer (compiler/lower/codegen/oracle.py); the reason is the op list's message
    with what the planner found."""
    found = fit(view, target)
    if found.fits:
        return []
    if found.sram_limited:
        return [(name, f"{KEYED['fits_sram'].describe(True, target.hardware)} ({found.reason})")]
    return [(name, f"the VPU code generator cannot lower it: {found.reason}")]


def not_listed_reason(kind: str, target: Target) -> str:
    reason = f"'{kind}' is not on the op list of target '{target.name}'"
    hardware = target.hardware
    if kind in OP_KINDS and OP_KINDS[kind].unit == "lut" and hardware is not None and not hardware.has_lut:
        entries = hardware.lut_entries
        reason += f": it needs a 256-entry lookup table, and this target has none (lut_entries = {entries})"
    return reason


def _bound_var(ctx: PatternCheckContext, expr):
    return ctx.value_to_bound_var.get(expr) if expr in ctx.value_to_bound_var else None


def _bound_name(ctx: PatternCheckContext, expr) -> str | None:
    var = _bound_var(ctx, expr)
    return var.name if var is not None else None
