"""The quantiser's in-process modules run on fused, scheduled kernels (calibration/kernels.py):
the host build's LegalizeOps + FuseOps + FuseTIR and its default schedules, where relax.build
alone made one scalar kernel per op. The reference is the op-by-op build (the path before it,
`kernels.scheduled_kernels` left out): the calibrated scales and zero points, the QDQ module
(its int8 weights and bias-corrected biases), the accuracy report and the sensitivity must
come out bit for bit.
"""

from __future__ import annotations

import pytest
import tvm
from quantize_testing import assert_same_quantisation

from vpuc.compiler.quantize import QuantOptions, quantize, synthetic_split
from vpuc.compiler.quantize.calibration import kernels, observe
from vpuc.targets import load_target

CASES = [
    ("tinyconvnet", "vpu", {}),
    ("mobilenet_mini", "vpu", {}),
    ("resnet_mini", "vpu", {}),
    ("opzoonet", "vpu-plus", {}),
    # SmoothQuant rewrites it: a float build and the switchable module's build, both checked
    ("transformer_encoder", "vpu-plus", {}),
    # the method choice reads the reference too; a 50 dB floor keeps layers in float and
    # the final plan is measured again
    ("tinyconvnet", "vpu", {"method": "auto", "options": QuantOptions(equalize=True, min_sqnr_db=50.0)}),
]


def _quantize(zoo_optimised, name: str, target: str, **kwargs):
    mod, provenance, imported = zoo_optimised(name, target)
    split = synthetic_split(imported.inputs, 32, seed=0)
    observe._BUILT.clear()  # else the other build's executables answer
    return quantize(
        mod, load_target(target), imported.onnx_model, provenance, split.calibration, held_out=split.held_out,
        **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("name", "target", "kwargs"),
    CASES,
    ids=[f"{n}-{t}" for n, t, _ in CASES[:-1]] + ["tinyconvnet-auto-floor"],
)
def test_fused_kernels_give_the_op_by_op_bits(zoo_optimised, monkeypatch, name, target, kwargs):
    fused = _quantize(zoo_optimised, name, target, **kwargs)
    monkeypatch.setattr(kernels, "scheduled_kernels", lambda mod, llvm_target: mod)
    op_by_op = _quantize(zoo_optimised, name, target, **kwargs)
    assert_same_quantisation(fused, op_by_op)


def test_the_kernels_are_fused_and_scheduled(zoo_optimised):
    """Else the comparison above compares a build with itself: fewer kernels than ops, and
    the convs' output loops vectorised."""
    mod = zoo_optimised("resnet_mini", "vpu")[0]
    op_by_op = relax_kernels(tvm.relax.transform.LegalizeOps()(mod))
    fused = relax_kernels(kernels.scheduled_kernels(mod, "llvm"))
    assert len(fused) < len(op_by_op)
    convs = [f for name, f in fused.items() if "conv2d" in name]
    assert convs and all("T.vectorized" in f.script() for f in convs)


def relax_kernels(mod: tvm.IRModule) -> dict:
    return {gv.name_hint: f for gv, f in mod.functions.items() if isinstance(f, tvm.tirx.PrimFunc)}
