"""The graph-optimisation pipeline: one flat, named list of passes, with the reason for each
position, between the frontend and the host build (compiler/driver.py).

    frontend -> [named import] -> PIPELINE (below) -> host build / later stages

`optimize(mod, target, options)` runs the list and returns the optimised module, the
fusion audit ({"fused": [...], "not_fused": [...]}, ONNX node names), the provenance of
every binding ({var name: [ONNX nodes]}, what the partitioner takes), the layout decision
and each pass's wall time. `optimize_imported` first gives every binding of the frontend's
module its ONNX node (passes/provenance.py), so the audit speaks ONNX names; `optimize` on
a module without provenance speaks Relax var names ("(unnamed)").
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm

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
    run: Callable[[tvm.IRModule, PassOptions], tvm.IRModule]
    why: str  # the reason for its position


PIPELINE: tuple[Step, ...] = (
    Step("fold_constants", fold_constants,
         "first: the importer leaves bias reshapes, weight transposes (Gemm) and constant "
         "arithmetic (Clip's NaN guard); every pattern below wants those as constants"),
    Step("clip", clip,
         "after folding, which makes Clip's bounds constants; before bn_fold and the "
         "fusions so that the activation after a conv or dense is one op"),
    Step("bn_fold", bn_fold,
         "before dense_bias: it takes conv/matmul + bias + BatchNorm as one chain, and "
         "dense_bias then sees the single folded bias"),
    Step("dense_bias", dense_bias,
         "after bn_fold; before gelu and attention, which read the dense output but never "
         "include the dense"),
    Step("layer_norm", layer_norm,
         "before attention and layout: matches the exporter's last-axis means as written"),
    Step("gelu", gelu, "independent of the others; after dense_bias, whose output is its x"),
    Step("silu", silu, "after gelu: both end in a multiply; gelu's is the longer pattern"),
    Step("attention", attention,
         "after dense_bias (its Q/K/V come from dense layers); before transpose_cleanup, "
         "which cancels its BSNH transposes against the exporter's head split"),
    Step("transpose_cleanup", transpose_cleanup,
         "after attention (its glue transposes), before layout: the exporter's own "
         "transposes and broadcasts are gone before the layout is chosen and converted"),
    Step("layout", layout,
         "after the fusions (their patterns are written for the exporter's layout); before "
         "the fold and cleanup that remove the transposes it inserts"),
    Step("fold_layout_constants", fold_constants,
         "right after layout: ConvertLayout's OIHW -> OHWI weight transposes fold in numpy"),
    Step("layout_cleanup", transpose_cleanup,
         "after layout: cancels ConvertLayout's transposes against each other and the "
         "exporter's (transpose_cleanup again, to a fixpoint)"),
    Step("cse", cse, "near the end: merges duplicates the exporter or the rewrites left"),
    Step("dce", dce, "last: drops whatever nothing reads any more"),
)  # fmt: skip

PASS_NAMES = tuple(step.name for step in PIPELINE)


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

    def to_json(self) -> dict[str, Any]:
        return {
            **self.audit,
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
) -> OptimizeResult:
    """Run PIPELINE on `mod`; `dump_after` names a pass whose output is kept as text."""
    target = resolve_target(target)
    options = options or pass_options(target)
    if dump_after is not None and dump_after not in PASS_NAMES:
        raise CompileError(f"--dump-after: unknown pass '{dump_after}' (passes: {', '.join(PASS_NAMES)})")
    ops_before, timings, dump = count_relax_ops(mod), {}, None
    for step in PIPELINE:
        start = time.perf_counter()
        mod = step.run(mod, options)
        timings[step.name] = time.perf_counter() - start
        if step.name == dump_after:
            dump = strip_audit(mod).script(show_meta=False)
    audit = Audit.of(mod)
    layout_info = {**audit.layout, "transposes_left": count_transposes(mod)}
    layout_info.setdefault("choice", "none (no convolutions)")
    result = OptimizeResult(strip_audit(mod), audit.to_json(), layout_info, audit.provenance, timings)
    result.ops_before, result.ops_after, result.dump = ops_before, count_relax_ops(result.mod), dump
    return result


def optimize_imported(
    imported: ImportedModel,
    target: str | Path | Target = "cpu",
    options: PassOptions | None = None,
    dump_after: str | None = None,
) -> OptimizeResult:
    """optimize() on the frontend's module, every binding attributed to its ONNX node."""
    start = time.perf_counter()
    named = import_with_provenance(imported)
    elapsed = time.perf_counter() - start
    result = optimize(named, target, options, dump_after)
    result.timings = {"provenance": elapsed, **result.timings}
    return result
