"""The realisation pass on a hand-built module: exactly the planned composite becomes QDQ,
in the form the VPU patterns match; the CPU ops stay float and read dequantized values."""

from __future__ import annotations

import numpy as np
import tvm
from tvm import relax

from vpuc.compiler.partition import Placement, partition_for_vpu
from vpuc.compiler.partition.graph import Composite
from vpuc.compiler.quantize.params import activation_params, bias_scale, quantize_bias, quantize_weight
from vpuc.compiler.quantize.plan import plan_quantization
from vpuc.compiler.quantize.transforms.realize import realize
from vpuc.targets import load_target

RNG = np.random.default_rng(0)
WEIGHT = RNG.standard_normal((8, 3, 3, 3)).astype(np.float32)  # OHWI
BIAS = RNG.standard_normal((1, 1, 1, 8)).astype(np.float32)
X = relax.Var("x", relax.TensorType((1, 6, 6, 3), "float32"))


def _conv(data, weight):
    return relax.op.nn.conv2d(data, weight, padding=1, data_layout="NHWC", kernel_layout="OHWI")


def before() -> tvm.IRModule:
    """conv -> +bias -> relu (the VPU composite), read by a sigmoid and an exp on the CPU;
    the input is read by the conv and by an exp on the CPU."""
    bb = relax.BlockBuilder()
    with bb.function("main", [X]):
        with bb.dataflow():
            conv = bb.emit(_conv(X, relax.const(WEIGHT)), "conv")
            bias = bb.emit(relax.op.add(conv, relax.const(BIAS)), "bias")
            relu = bb.emit(relax.op.nn.relu(bias), "relu")
            gate = bb.emit(relax.op.sigmoid(relu), "gate")
            side = bb.emit(relax.op.exp(X), "side")
            out = bb.emit_output(relax.op.add(gate, relax.op.mean(side)), "out")
        bb.emit_func_output(out)
    return bb.get()


PLACEMENT = Placement((Composite(0, "vpu.conv2d_bias_act", ("conv", "bias", "relu")),))
X_PARAMS, RELU_PARAMS = activation_params(-3.0, 3.0), activation_params(0.0, 5.0)


def expected() -> tvm.IRModule:
    """x_q once (CPU), its dequantize inside the composite with the int8 weight and int32
    bias; the relu output quantized, and dequantized once for the CPU."""
    w_q, w_params = quantize_weight(WEIGHT, axis=0)
    b_q, b_params = quantize_bias(BIAS, bias_scale(X_PARAMS, w_params), axis=3)

    def dq(data, p):
        return relax.op.dequantize(data, relax.const(p.scale), relax.const(p.zero_point), p.axis)

    bb = relax.BlockBuilder()
    with bb.function("main", [X]):
        with bb.dataflow():
            x_q = bb.emit(relax.op.quantize(X, relax.const(X_PARAMS.scale), relax.const(X_PARAMS.zero_point)))
            x_dq = bb.emit(dq(x_q, X_PARAMS))
            w = bb.emit(dq(relax.const(w_q), w_params))
            conv = bb.emit(_conv(x_dq, w))
            b = bb.emit(dq(relax.const(b_q), b_params))
            bias = bb.emit(relax.op.add(conv, b))
            relu = bb.emit(relax.op.nn.relu(bias))
            relu_q = bb.emit(
                relax.op.quantize(relu, relax.const(RELU_PARAMS.scale), relax.const(RELU_PARAMS.zero_point))
            )
            relu_dq = bb.emit(dq(relu_q, RELU_PARAMS))
            gate = bb.emit(relax.op.sigmoid(relu_dq))
            side = bb.emit(relax.op.exp(X))
            out = bb.emit_output(relax.op.add(gate, relax.op.mean(side)))
        bb.emit_func_output(out)
    return bb.get()


def _realized():
    mod = before()
    plan = plan_quantization(mod["main"], PLACEMENT)
    return realize(mod, plan, {"x": X_PARAMS, "relu": RELU_PARAMS}, {"conv": ["Conv_0"], "relu": ["Relu_0"]})


def test_plan_names_the_roles():
    (composite,) = plan_quantization(before()["main"], PLACEMENT).composites
    assert (composite.core, composite.bias, composite.activation, composite.root) == (
        "conv",
        "bias",
        "relu",
        "relu",
    )
    assert composite.inputs == ("x",) and composite.output_bounds == (0.0, float("inf"))


def test_realize_inserts_qdq_around_the_composite_only():
    realized = _realized()
    tvm.ir.assert_structural_equal(realized.mod, expected())
    assert [t.quantized for t in realized.tensors] == ["x_q", "relu_q"]
    assert realized.provenance["relu_q"] == ["Relu_0"] and realized.provenance["conv_in0"] == ["Conv_0"]


def test_realized_module_partitions_as_one_quantized_composite():
    target = load_target("vpu")
    result = partition_for_vpu(_realized().mod, target, _onnx_stub(), {}, profitability=False)
    names = [c.name for c in result.placement.composites]
    assert names == ["vpu.conv2d_bias_act_q"]


def _onnx_stub():
    import onnx

    return onnx.helper.make_model(onnx.helper.make_graph([], "stub", [], []))
