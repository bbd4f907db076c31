"""One LLVM build for calibration and the accuracy report (measurement/one_build.py).

The quantiser calibrates on the plan's switchable QDQ module with every switch off and its
quantize/dequantize constants lifted into parameters, then runs the calibrated QDQ module on
that same executable. The path before it (prepare.ONE_BUILD = False) built the float module
for calibration and the switchable module with its constants for the accuracy report: its
results are the reference here, and must come out bit for bit (ranges and parameters, the
biases bias correction shifted, the QDQ module, the accuracy report and the sensitivity).
"""

from __future__ import annotations

import numpy as np
import pytest
import tvm
from quantize_testing import assert_same_quantisation
from tvm import relax

import vpuc.compiler.quantize.prepare as prepare
from vpuc.compiler import compat
from vpuc.compiler.partition import partition_for_vpu
from vpuc.compiler.quantize import QuantOptions, quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.compiler.quantize.calibration.calibrate import choose_params
from vpuc.compiler.quantize.measurement.one_build import OneBuild, lift_qdq_constants
from vpuc.compiler.quantize.plan import QuantPlan, plan_quantization
from vpuc.compiler.quantize.ptq import onnx_provenance
from vpuc.compiler.quantize.transforms.realize import realize
from vpuc.targets import load_target

MODELS = ("tinyconvnet", "mobilenet_mini", "resnet_mini")


def _quantize(zoo_optimised, name: str, one_build: bool, monkeypatch, **kwargs) -> tuple:
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    builds = []
    default_build = compat.build_host

    def counting_build(mod, llvm_target, **kwargs):
        builds.append(mod)
        return default_build(mod, llvm_target, **kwargs)

    monkeypatch.setattr(compat, "build_host", counting_build)
    monkeypatch.setattr(prepare, "ONE_BUILD", one_build)
    observe._BUILT.clear()  # else the other path's executables answer
    result = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration, held_out=split.held_out,
        **kwargs,
    )  # fmt: skip
    return result, len(builds)


CASES = [(name, {}) for name in MODELS] + [
    # the per-layer method choice reads the reference too, equalisation rewrites before it;
    # a floor of 50 dB keeps 3 layers in float: the final plan is measured again
    ("tinyconvnet", {"method": "auto", "options": QuantOptions(equalize=True, min_sqnr_db=50.0)}),
]


@pytest.mark.parametrize(("name", "kwargs"), CASES, ids=[*MODELS, "tinyconvnet-auto-equalize-floor"])
def test_one_build_gives_the_two_build_results(zoo_optimised, monkeypatch, name, kwargs):
    two, two_builds = _quantize(zoo_optimised, name, False, monkeypatch, **kwargs)
    one, one_builds = _quantize(zoo_optimised, name, True, monkeypatch, **kwargs)
    assert one_builds == two_builds - 1
    assert two_builds == 2 or kwargs
    assert_same_quantisation(one, two)  # bias-corrected int32 biases included
    assert len(one.accuracy["floor"]["kept_float"]) == (3 if kwargs else 0)


def test_lifted_constants_are_run_time_inputs():
    """A lifted quantize/dequantize computes ONNX's formulas (numpy here) with the values
    passed at run time, not the constants it was built with."""
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            q = bb.emit(relax.op.quantize(x, relax.const(np.float32(0.5)), relax.const(np.int8(3)), axis=-1))
            dq = bb.emit(
                relax.op.dequantize(q, relax.const(np.float32(0.25)), relax.const(np.int8(-2)), axis=-1)
            )
            out = bb.emit_output(dq)
        bb.emit_func_output(out)
    lifted, values = lift_qdq_constants(bb.get())
    assert [v.item() for v in values] == [0.5, 3, 0.25, -2]
    assert [p.name for p in lifted["main"].params] == ["x", *(f"vpuc_qdq{i}" for i in range(4))]
    vm = compat.virtual_machine(compat.build_host(lifted, "llvm"))
    data = np.array([[-40.0, -1.3, 0.2], [0.74, 9.0, 70.0]], np.float32)
    for scale, zero, dq_scale, dq_zero in ((0.5, 3, 0.25, -2), (0.125, -7, 2.0, 5)):
        inputs = [data, np.float32(scale), np.int8(zero), np.float32(dq_scale), np.int8(dq_zero)]
        got = vm["main"](*[compat.to_tvm(np.asarray(v)) for v in inputs]).numpy()
        quantized = np.clip(np.round(data / np.float32(scale)) + zero, -128, 127)
        expected = ((quantized - dq_zero) * np.float32(dq_scale)).astype(np.float32)
        np.testing.assert_array_equal(got, expected)
    assert isinstance(lifted, tvm.IRModule)


def test_another_plan_is_not_run_on_the_build(zoo_optimised):
    """The floor's final plan may hold fewer composites: its realisation is not the built
    module, so `bind` declines it (the caller builds it) and takes the plan's own."""
    mod, provenance, imported = zoo_optimised("tinyconvnet", "vpu")
    provenance = onnx_provenance(provenance, imported.onnx_model)
    placement = partition_for_vpu(mod, load_target("vpu"), imported.onnx_model, provenance).placement
    plan = plan_quantization(mod["main"], placement)
    build = OneBuild(mod, plan, [], "llvm")

    def realized(plan):
        ranges = {name: (-2.0, 3.0) for name in plan.tensors_to_calibrate()}
        return realize(mod, plan, choose_params(plan, {}, "minmax", 0.0, ranges), provenance)

    assert build.bind(realized(plan)) is not None
    assert build.bind(realized(QuantPlan(plan.composites[1:]))) is None
