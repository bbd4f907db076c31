"""Graph pass: data layout. NCHW -> NHWC for the VPU; for the CPU, the layout that measures
faster (the rule below), with the transposes that remain counted.

    conv2d(x, W) NCHW/OIHW  =>  conv2d NHWC/OHWI, and every op that can follow in NHWC
                                (elementwise, pooling, mean, ...) follows; a transpose is
                                left only where a layout-sensitive op (reshape, matmul) or
                                the graph's boundary needs NCHW                       layout

passes/layout_convert.py does the conversion (our own, not TVM's ConvertLayout: see there
why): an op with a known channels-last form follows its input's layout, quantize and
dequantize included (a per-channel axis moves along), an exporter's own NHWC <-> NCHW
transposes are absorbed, and every other op keeps its written layout with transposes only
at its edges. Weight transposes of constants happen in numpy; the remaining activation
transposes meet their inverses in transpose_cleanup.

Which layout:
  vpu   NHWC always: the VPU computes convolutions channels-last with OHWI weights.
  cpu   PassOptions.cpu_layout "auto": NHWC only where it leaves fewer transposes than NCHW
        does (after fold + cleanup, tried on a copy). TVM's untuned llvm conv2d measured the
        same speed in both layouts on the zoo (bench/fusion_vs_ort.py times both and
        docs/passes.md keeps the figures), so the transposes decide; a tie keeps NCHW.
        "NCHW" / "NHWC" force one.
The choice and its reason are kept in the module's `vpuc.layout` attribute (the pipeline
adds the transposes left at the end).
"""

from __future__ import annotations

import tvm
from tvm import relax

from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.fold_constants import fold_constants
from vpuc.compiler.passes.layout_convert import convert_to_nhwc
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import attrs_of
from vpuc.compiler.passes.transpose_cleanup import transpose_cleanup

PASS_NAME = "layout"


def count_transposes(mod: tvm.IRModule) -> int:
    """permute_dims of run-time tensors in main (a constant's would fold away, and so does
    one of a dequantized constant, a QDQ model's weight: quantize/qdq_constants.py)."""
    bound = relax.analysis.get_var2val(mod["main"])
    count = 0
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if isinstance(value, relax.Call) and getattr(value.op, "name", "") == "relax.permute_dims":
                source = bound.get(value.args[0]) if isinstance(value.args[0], relax.Var) else None
                weight = getattr(getattr(source, "op", None), "name", "") == "relax.dequantize" and (
                    isinstance(source.args[0], tvm.ir.expr.Constant)
                )
                count += int(isinstance(value.args[0], relax.Var) and not weight)
    return count


def _nchw_convs(mod: tvm.IRModule) -> list[relax.Var]:
    return [
        b.var
        for block in mod["main"].body.blocks
        for b in block.bindings
        if isinstance(b.value, relax.Call)
        and getattr(b.value.op, "name", "") == "relax.nn.conv2d"
        and str(attrs_of(b.value)["data_layout"]) == "NCHW"
    ]


def _converted(mod: tvm.IRModule) -> tvm.IRModule:
    """conv2d -> NHWC/OHWI and what follows it (passes/layout_convert.py)."""
    return convert_to_nhwc(mod, PASS_NAME)


def _transposes_after_cleanup(mod: tvm.IRModule, options: PassOptions) -> int:
    return count_transposes(transpose_cleanup(fold_constants(mod, options), options))


def _choose(mod: tvm.IRModule, options: PassOptions) -> tuple[str, str, tvm.IRModule | None]:
    """(layout, reason, converted module or None)."""
    if options.target_kind == "vpu":
        return "NHWC", "the VPU computes convolutions in NHWC with OHWI weights", _converted(mod)
    if options.cpu_layout != "auto":
        chosen = options.cpu_layout
        return chosen, f"forced by cpu_layout={chosen}", _converted(mod) if chosen == "NHWC" else None
    converted = _converted(mod)
    as_is, as_nhwc = (_transposes_after_cleanup(m, options) for m in (mod, converted))
    if as_nhwc < as_is:
        return "NHWC", f"NHWC leaves {as_nhwc} transposes, NCHW {as_is} (same conv speed on llvm)", converted
    return "NCHW", f"NHWC would leave {as_nhwc} transposes, NCHW {as_is} (same conv speed on llvm)", None


def layout(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """conv2d NCHW/OIHW (and what follows it) => NHWC/OHWI, where the target wants it."""
    convs = _nchw_convs(mod)
    if not convs:
        return mod
    audit = Audit.of(mod)
    choice, reason, converted = _choose(mod, options)
    audit.layout = {
        "choice": choice,
        "reason": reason,
        "target_kind": options.target_kind,
        "convs": len(convs),
    }
    if converted is None:
        audit.not_fused(PASS_NAME, [v.name for v in convs], f"kept NCHW: {reason}")
        return audit.attach(mod)
    audit.fused(PASS_NAME, [v.name for v in convs], f"NCHW -> NHWC (OHWI weights): {reason}")
    moved = Audit.of(converted)
    audit.provenance = moved.provenance
    return audit.attach(converted)
