"""Post-training quantisation of every zoo model: accuracy floors, the quantised op set
against the partitioner's VPU op set, and re-partitioning of the quantised module.

Floors (docs/quantization.md): percentile 99.99 (the default), 32 synthetic calibration
samples, 8 fresh held-out samples, seed 0; measured figures are a few dB above them.
  compile   target vpu, profitability rule on       (what `vpuc compile --target vpu` does)
  stress    target vpu-plus, profitability rule off (every op the VPU can run is int8)
"""

from __future__ import annotations

import pytest

from vpuc.compiler.partition import partition_for_vpu
from vpuc.compiler.quantize import quantize, synthetic_split
from vpuc.compiler.quantize.bindings import DEQUANTIZE, QUANTIZE, BindingView, var_names
from vpuc.examples import zoo
from vpuc.targets import load_target

CONFIGS = {"compile": ("vpu", True), "stress": ("vpu-plus", False)}
# model: (compile floor dB, stress floor dB)
SQNR_FLOORS_DB = {
    "tinyconvnet": (43.0, 32.0),
    "opzoonet": (58.0, 46.0),
    "resnet_mini": (40.0, 37.0),
    "mobilenet_mini": (41.0, 38.0),
    "transformer_encoder": (30.0, 22.0),
}
CLASSIFIERS = ("tinyconvnet", "opzoonet", "resnet_mini", "mobilenet_mini")


@pytest.fixture(scope="module")
def quantized(zoo_optimised):
    cache = {}

    def run(name: str, config: str):
        if (name, config) not in cache:
            target_name, profitability = CONFIGS[config]
            mod, provenance, imported = zoo_optimised(name, target_name)
            split = synthetic_split(imported.inputs, 32, seed=0)
            target = load_target(target_name)
            result = quantize(
                mod, target, imported.onnx_model, provenance, split.calibration,
                held_out=split.held_out, profitability=profitability,
            )  # fmt: skip
            cache[name, config] = (result, mod, provenance, imported, target, profitability)
        return cache[name, config]

    return run


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", zoo.MODELS)
def test_accuracy_floors(quantized, name, config):
    result = quantized(name, config)[0]
    (output,) = result.accuracy["outputs"]
    floor = SQNR_FLOORS_DB[name][list(CONFIGS).index(config)]
    assert output["sqnr_db"] >= floor, result.accuracy
    assert output["cosine"] >= (0.999 if config == "compile" else 0.995)
    assert result.accuracy["samples"] == 8
    # one accuracy row per int8 layer: there are some exactly when the partition (its cost
    # model, with the target's host figures) puts some layer on the VPU
    assert bool(result.accuracy["layers"]) == bool(result.placement.composites)
    assert all(layer["sqnr_db"] > 20.0 for layer in result.accuracy["layers"]), result.accuracy["layers"]
    if name in CLASSIFIERS:
        assert output["top1_agreement"] >= (1.0 if config == "compile" else 0.875)
    else:
        assert output["top1_agreement"] is None


@pytest.mark.parametrize("method", ["minmax", "entropy"])
@pytest.mark.parametrize("name", ["tinyconvnet", "resnet_mini"])
def test_other_methods_meet_the_compile_floors(zoo_optimised, name, method):
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    result = quantize(
        mod,
        load_target("vpu"),
        imported.onnx_model,
        provenance,
        split.calibration,
        method,
        held_out=split.held_out,
    )
    assert result.accuracy["outputs"][0]["sqnr_db"] >= SQNR_FLOORS_DB[name][0]
    assert result.summary["method"] == method


def test_bias_correction_helps_the_depthwise_convs(quantized, zoo_optimised):
    """Bias correction (on by default) is worth several dB on mobilenet_mini."""
    corrected = quantized("mobilenet_mini", "compile")[0]
    mod, provenance, imported = zoo_optimised("mobilenet_mini", "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    plain = quantize(
        mod,
        load_target("vpu"),
        imported.onnx_model,
        provenance,
        split.calibration,
        held_out=split.held_out,
        bias_correction=False,
    )
    assert corrected.accuracy["outputs"][0]["sqnr_db"] > plain.accuracy["outputs"][0]["sqnr_db"] + 3.0


def _vpu_nodes(report) -> set[str]:
    return {op["name"] for op in report["ops"] if op["device"] == "vpu"}


def _int8_in_int8_out(view: BindingView, members: tuple[str, ...]) -> bool:
    """Every tensor entering the composite is int8 (its dequantize is a member) and what
    leaves it is a quantize."""
    inside = set(members)
    entering = {n for m in members for n in var_names(view.values[m]) if n not in inside}
    leaving = [m for m in members if any(r not in inside for r in view.readers[m])]
    return all(view.tensor_type(n)[1] == "int8" for n in entering) and all(
        view.op(m) == QUANTIZE for m in leaving
    )


def _reads_int_weights(view: BindingView, name: str) -> bool:
    """Whether a binding reads a dequantized integer constant (a quantised weight)."""
    for source in var_names(view.values[name]):
        value = view.values.get(source)
        if view.op(source) == DEQUANTIZE and view.constant(value.args[0]) is not None:
            return True
    return False


@pytest.mark.parametrize("config", CONFIGS)
def test_quantized_op_set_is_the_vpu_op_set_on_opzoonet(quantized, config):
    """No op quantised that the partitioner puts on the CPU, none left float that it puts
    on the VPU: the quantiser's ops are the float partition's VPU nodes; re-partitioned, every
    VPU composite is int8 in and int8 out, and no CPU op reads a quantised weight."""
    result, mod, provenance, imported, target, profitability = quantized("opzoonet", config)
    float_report = partition_for_vpu(
        mod, target, imported.onnx_model, result.provenance, profitability=profitability
    ).report
    planned = {
        node
        for op in result.summary["quantized_ops"]
        for b in op["bindings"]
        for node in result.provenance.get(b, [])
    }
    assert planned == _vpu_nodes(float_report)
    assert len(planned) >= (7 if config == "compile" else 20)
    after = partition_for_vpu(
        result.mod, target, imported.onnx_model, result.provenance, profitability=profitability
    )
    view = BindingView.of(result.mod["main"])
    assert all(
        _int8_in_int8_out(view, c.members) and c.name.endswith("_q") for c in after.placement.composites
    )
    on_vpu = set(after.placement.subgraph_of)
    cpu_ops = [n for n in view.values if n not in on_vpu and view.op(n) not in (None, QUANTIZE, DEQUANTIZE)]
    assert cpu_ops and not any(_reads_int_weights(view, n) for n in cpu_ops)


REPARTITIONED = ("tinyconvnet", "opzoonet", "resnet_mini", "mobilenet_mini")


def _same_placement(quantized, name: str, config: str):
    result, mod, provenance, imported, target, profitability = quantized(name, config)
    before = partition_for_vpu(
        mod, target, imported.onnx_model, result.provenance, profitability=profitability
    )
    after = partition_for_vpu(
        result.mod, target, imported.onnx_model, result.provenance, profitability=profitability
    )
    assert {op["name"]: op["device"] for op in after.report["ops"]} == {
        op["name"]: op["device"] for op in before.report["ops"]
    }
    assert after.report["totals"] == before.report["totals"]
    assert all(c.name.endswith("_q") for c in after.placement.composites)


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("name", REPARTITIONED)
def test_repartition_puts_the_same_nodes_on_the_vpu(quantized, name, config):
    """The partitioner sees through Q/DQ bindings (opview.inline_qdq): the quantised module
    partitions exactly as the float one, every composite taking int8 in and out."""
    _same_placement(quantized, name, config)
