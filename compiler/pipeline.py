"""The graph-optimisation pipeline: one flat, named list of passes, with the reason for each
position, between the frontend and the host build (compiler/driver.py).

    frontend -> [named import] -> PIPELINE (below) -> host build / later stages

`optimize(mod, target, options, selection=PassSelection(opt_level, disabled, limit))` runs
the selected passes of the list (-O0 none ... -O3 all, the default; OPT_LEVELS) and returns
the optimised module, the fusion audit ({"fused": [...], "not_fused": [...]}, ONNX node
names), the provenance of every binding ({var name: [ONNX nodes]}, what the partitioner
takes), the layout decision and each pass's wall time. `optimize_imported` first gives
every binding of the frontend's module its ONNX node (passes/provenance.py), so the audit
speaks ONNX names; `optimize` on a module without provenance speaks Relax var names
("(unnamed)"). `optimize_imported` is memoised within a process (_OPTIMIZED, below): the
same imported model with the same options and passes runs no pass the second time.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import tvm

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError
from vpuc.compiler.frontend import ImportedModel
from vpuc.compiler.passes import (
    Audit,
    PassOptions,
    attention,
    bn_fold,
    clip,
    cse,
    dce,
    dense_bias,
    fold_constants,
    gelu,
    layer_norm,
    layout,
    silu,
    strip_audit,
    transpose_cleanup,
)
from vpuc.compiler.passes.layout import count_transposes
from vpuc.compiler.passes.opcount import count_relax_ops
from vpuc.compiler.passes.provenance import import_with_provenance
from vpuc.targets import Target, resolve_target


@dataclass(frozen=True)
class Step:
    name: str
    level: int  # the lowest -O level that runs it (OPT_LEVELS)
    run: Callable[[tvm.IRModule, PassOptions], tvm.IRModule]
    why: str  # the reason for its position


# -O levels, as onnxruntime's graph optimisation levels and tvmc's -O: each adds a group.
OPT_LEVELS = {
    0: "no graph passes",
    1: "cleanups: constant folding, common subexpressions, dead code",
    2: "+ fusions (clip, batch norm, dense bias, layer norm, GELU, SiLU, attention, transposes)",
    3: "+ layout rewrite to NHWC and its cleanups (the default)",
}
DEFAULT_OPT_LEVEL = 3


PIPELINE: tuple[Step, ...] = (
    Step("fold_constants", 1, fold_constants,
         "first: the importer leaves bias reshapes, weight transposes (Gemm) and constant "
         "arithmetic (Clip's NaN guard); every pattern below wants those as constants"),
    Step("clip", 2, clip,
         "after folding, which makes Clip's bounds constants; before bn_fold and the "
         "fusions so that the activation after a conv or dense is one op"),
    Step("bn_fold", 2, bn_fold,
         "before dense_bias: it takes conv/matmul + bias + BatchNorm as one chain, and "
         "dense_bias then sees the single folded bias"),
    Step("dense_bias", 2, dense_bias,
         "after bn_fold; before gelu and attention, which read the dense output but never "
         "include the dense"),
    Step("layer_norm", 2, layer_norm,
         "before attention and layout: matches the exporter's last-axis means as written"),
    Step("gelu", 2, gelu, "independent of the others; after dense_bias, whose output is its x"),
    Step("silu", 2, silu, "after gelu: both end in a multiply; gelu's is the longer pattern"),
    Step("attention", 2, attention,
         "after dense_bias (its Q/K/V come from dense layers); before transpose_cleanup, "
         "which cancels its BSNH transposes against the exporter's head split"),
    Step("transpose_cleanup", 2, transpose_cleanup,
         "after attention (its glue transposes), before layout: the exporter's own "
         "transposes and broadcasts are gone before the layout is chosen and converted"),
    Step("layout", 3, layout,
         "after the fusions (their patterns are written for the exporter's layout); before "
         "the fold and cleanup that remove the transposes it inserts"),
    Step("fold_layout_constants", 3, fold_constants,
         "right after layout: ConvertLayout's OIHW -> OHWI weight transposes fold in numpy"),
    Step("layout_cleanup", 3, transpose_cleanup,
         "after layout: cancels ConvertLayout's transposes against each other and the "
         "exporter's (transpose_cleanup again, to a fixpoint)"),
    Step("cse", 1, cse, "near the end: merges duplicates the exporter or the rewrites left"),
    Step("dce", 1, dce, "last: drops whatever nothing reads any more"),
)  # fmt: skip

PASS_NAMES = tuple(step.name for step in PIPELINE)


@dataclass(frozen=True)
class PassSelection:
    """Which passes of PIPELINE run: those of `opt_level`, minus `disabled`, and of those only
    the first `limit` (LLVM's -opt-bisect-limit: the fuzzer bisects a wrong answer with it)."""

    opt_level: int = DEFAULT_OPT_LEVEL
    disabled: tuple[str, ...] = ()
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.opt_level not in OPT_LEVELS:
            raise CompileError(f"-O{self.opt_level}: unknown level (levels: -O0 .. -O{max(OPT_LEVELS)})")
        for name in self.disabled:
            if name not in PASS_NAMES:
                raise CompileError(f"--disable-pass: unknown pass '{name}' (passes: {', '.join(PASS_NAMES)})")
        if self.limit is not None and self.limit < 0:
            raise CompileError(f"--opt-bisect-limit: must be at least 0, got {self.limit}")

    def steps(self) -> tuple[Step, ...]:
        chosen = tuple(s for s in PIPELINE if s.level <= self.opt_level and s.name not in self.disabled)
        return chosen if self.limit is None else chosen[: self.limit]

    def why_not(self, name: str) -> str | None:
        """Why the pass `name` does not run under this selection (None if it does)."""
        step = next(s for s in PIPELINE if s.name == name)
        if step.level > self.opt_level:
            return f"pass '{name}' runs from -O{step.level} on, not at -O{self.opt_level}"
        if name in self.disabled:
            return f"pass '{name}' is disabled (--disable-pass)"
        if step not in self.steps():
            return f"pass '{name}' is beyond --opt-bisect-limit {self.limit}"
        return None

    def to_json(self) -> dict[str, Any]:
        return {
            "opt_level": self.opt_level,
            "disabled": list(self.disabled),
            "bisect_limit": self.limit,
            "ran": [s.name for s in self.steps()],
        }


@dataclass
class OptimizeResult:
    """The optimised module (vpuc attributes stripped) and what the pipeline did."""

    mod: tvm.IRModule
    audit: dict[str, list[dict]]
    layout: dict[str, Any]
    provenance: dict[str, list[str]] = field(default_factory=dict)  # var name -> ONNX nodes
    timings: dict[str, float] = field(default_factory=dict)  # pass name -> seconds
    ops_before: dict[str, int] = field(default_factory=dict)
    ops_after: dict[str, int] = field(default_factory=dict)
    dump: str | None = None  # the module after `dump_after`
    selection: PassSelection = field(default_factory=PassSelection)

    def to_json(self) -> dict[str, Any]:
        return {
            **self.audit,
            "passes": self.selection.to_json(),
            "layout": self.layout,
            "ops": {"before": self.ops_before, "after": self.ops_after},
            "timings_s": {name: round(t, 5) for name, t in self.timings.items()},
        }


def pass_options(target: Target, **knobs) -> PassOptions:
    return PassOptions(target_kind=target.kind, **knobs)


def optimize(
    mod: tvm.IRModule,
    target: str | Path | Target = "cpu",
    options: PassOptions | None = None,
    dump_after: str | None = None,
    selection: PassSelection | None = None,
) -> OptimizeResult:
    """Run the selected passes of PIPELINE (all by default) on `mod`; `dump_after` names a
    pass whose output is kept as text."""
    target = resolve_target(target)
    options = options or pass_options(target)
    selection = selection or PassSelection()
    check_dump_after(dump_after, selection)
    ops_before, timings, dump = count_relax_ops(mod), {}, None
    for step in selection.steps():
        start = time.perf_counter()
        mod = step.run(mod, options)
        timings[step.name] = time.perf_counter() - start
        if step.name == dump_after:
            dump = strip_audit(mod).script(show_meta=False)
    audit = Audit.of(mod)
    layout_info = {**audit.layout, "transposes_left": count_transposes(mod)}
    not_run = selection.why_not("layout")
    layout_info.setdefault("choice", f"none ({not_run})" if not_run else "none (no convolutions)")
    result = OptimizeResult(strip_audit(mod), audit.to_json(), layout_info, audit.provenance, timings)
    result.ops_before, result.ops_after, result.dump = ops_before, count_relax_ops(result.mod), dump
    result.selection = selection
    return result


def check_dump_after(dump_after: str | None, selection: PassSelection) -> None:
    """--dump-after must name a pass that runs."""
    if dump_after is None:
        return
    if dump_after not in PASS_NAMES:
        raise CompileError(f"--dump-after: unknown pass '{dump_after}' (passes: {', '.join(PASS_NAMES)})")
    reason = selection.why_not(dump_after)
    if reason:
        raise CompileError(f"--dump-after {dump_after}: {reason}")


def optimize_imported(
    imported: ImportedModel,
    target: str | Path | Target = "cpu",
    options: PassOptions | None = None,
    dump_after: str | None = None,
    selection: PassSelection | None = None,
) -> OptimizeResult:
    """optimize() on the frontend's module, every binding attributed to its ONNX node;
    memoised within the process (below)."""
    options = options or pass_options(resolve_target(target))
    selection = selection or PassSelection()
    key = _memo_key(imported, options, dump_after, selection)
    found = _OPTIMIZED.get(key) if key is not None else None
    if found is not None and compat.structural_equal(found[0], imported.mod):
        return _copy(found[1], timings=dict.fromkeys(found[1].timings, 0.0))
    start = time.perf_counter()
    named = import_with_provenance(imported)
    elapsed = time.perf_counter() - start
    result = optimize(named, target, options, dump_after, selection)
    result.timings = {"provenance": elapsed, **result.timings}
    if key is not None:
        if len(_OPTIMIZED) >= _MAX_OPTIMIZED:
            _OPTIMIZED.clear()
        _OPTIMIZED[key] = (imported.mod.clone(), _copy(result, result.timings))
    return result


# The pipeline's result within one process: a repeated compile of a model with the same pass
# options and selection (the regression runner, the sweep) runs no pass, and reports 0 s for
# each. The key is the Relax import's (the prepared ONNX bytes and input specs, which fix the
# module and every name in it), the module's structural hash (and, on a hit, its structural
# equality: a caller may have changed the module since), the options, the steps that run
# (a patched PIPELINE is other steps) and dump_after. Each caller gets its own copy.
_OPTIMIZED: dict[tuple, tuple[tvm.IRModule, OptimizeResult]] = {}
_MAX_OPTIMIZED = 8  # each holds an optimised module, its weights included


def _memo_key(imported: ImportedModel, options, dump_after, selection: PassSelection) -> tuple | None:
    if imported.relax_key is None:
        return None
    steps = selection.steps()
    return (imported.relax_key, compat.structural_hash(imported.mod), options, dump_after, steps, selection)


def _copy(result: OptimizeResult, timings: dict[str, float]) -> OptimizeResult:
    return replace(
        result,
        mod=result.mod.clone(),
        audit=copy.deepcopy(result.audit),
        layout=copy.deepcopy(result.layout),
        provenance=copy.deepcopy(result.provenance),
        timings=timings,
        ops_before=dict(result.ops_before),
        ops_after=dict(result.ops_after),
    )
