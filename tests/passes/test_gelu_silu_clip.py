"""gelu, silu and clip: activations exporters spell out, folded back into one op each.

0.5 * x * (1 + erf(x / sqrt 2))                        => nn.gelu(x)
0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  => nn.gelu_tanh(x)
x * sigmoid(x)                                         => nn.silu(x)
TIR max(x, lo) then TIR min(., hi) (ONNX Clip)         => clip(x, lo, hi)
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from pass_testing import assert_rewrites_to, bind, run_pass
from tvm.script import ir as I
from tvm.script import relax as R
from tvm.script import tirx as T

from vpuc.compiler.frontend import import_model
from vpuc.compiler.passes import Audit, PassOptions, dce, fold_constants, gelu, silu, strip_audit
from vpuc.compiler.passes.clip import clip
from vpuc.compiler.passes.provenance import import_with_provenance


@I.ir_module
class TorchErfGelu:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            scaled = R.divide(h, R.const(1.4142135381698608, "float32"))
            erf = R.erf(scaled)
            one_plus = R.add(erf, R.const(1.0, "float32"))
            gated = R.multiply(h, one_plus)
            out = R.multiply(gated, R.const(0.5, "float32"))
            R.output(out)
        return out


@I.ir_module
class OtherOrderErfGelu:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            scaled = R.multiply(h, R.const(0.7071067690849304, "float32"))
            erf = R.erf(scaled)
            one_plus = R.add(R.const(1.0, "float32"), erf)
            half = R.multiply(R.const(0.5, "float32"), h)
            out = R.multiply(half, one_plus)
            R.output(out)
        return out


@I.ir_module
class Gelu:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            out = R.nn.gelu(h)
            R.output(out)
        return out


def test_erf_gelu_in_pytorch_order():
    after, audit = run_pass(gelu, TorchErfGelu)
    assert_rewrites_to(after, Gelu)
    assert audit["fused"][0]["nodes"] == ["scaled", "erf", "one_plus", "gated", "out"]


def test_erf_gelu_in_another_order_with_multiply_by_one_over_sqrt2():
    """(0.5 * x) * (1 + erf(x * 0.7071...)): the same product, grouped differently."""
    after, _ = run_pass(gelu, OtherOrderErfGelu)
    assert_rewrites_to(after, Gelu)


@I.ir_module
class TanhGelu:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            cube = R.power(h, R.const(3.0, "float32"))
            small = R.multiply(cube, R.const(0.044715, "float32"))
            inner = R.add(h, small)
            scaled = R.multiply(inner, R.const(math.sqrt(2 / math.pi), "float32"))
            t = R.tanh(scaled)
            one_plus = R.add(t, R.const(1.0, "float32"))
            half = R.multiply(h, R.const(0.5, "float32"))
            out = R.multiply(half, one_plus)
            R.output(out)
        return out


@I.ir_module
class GeluTanh:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            out = R.nn.gelu_tanh(h)
            R.output(out)
        return out


def test_tanh_approximation_becomes_gelu_tanh():
    after, audit = run_pass(gelu, TanhGelu)
    assert_rewrites_to(after, GeluTanh)
    assert audit["fused"][0]["reason"] == "nn.gelu_tanh (tanh approximation)"


@I.ir_module
class WrongHalf:
    @R.function
    def main(h: R.Tensor((2, 64), "float32")):
        with R.dataflow():
            scaled = R.divide(h, R.const(1.4142135381698608, "float32"))
            erf = R.erf(scaled)
            one_plus = R.add(erf, R.const(1.0, "float32"))
            gated = R.multiply(h, one_plus)
            out = R.multiply(gated, R.const(0.6, "float32"))
            R.output(out)
        return out


def test_a_constant_off_its_value_is_a_near_miss():
    """0.6 * x * (1 + erf(x / sqrt 2)) is not GELU: nothing changes and the audit says why."""
    after, audit = run_pass(gelu, WrongHalf)
    assert_rewrites_to(after, WrongHalf)
    assert audit["not_fused"][0]["reason"] == "attribute out of range: the constant factor is 0.6, not 0.5"


@I.ir_module
class Swish:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32")):
        with R.dataflow():
            gate = R.sigmoid(x)
            out = R.multiply(x, gate)
            R.output(out)
        return out


@I.ir_module
class Silu:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32")):
        with R.dataflow():
            out = R.nn.silu(x)
            R.output(out)
        return out


@I.ir_module
class SqueezeExcite:
    @R.function
    def main(x: R.Tensor((1, 8, 4, 4), "float32")):
        with R.dataflow():
            m = R.mean(x, axis=[2, 3], keepdims=True)
            gate = R.sigmoid(m)
            out = R.multiply(x, gate)
            R.output(out)
        return out


def test_swish_becomes_silu_and_a_gate_on_another_tensor_does_not():
    assert_rewrites_to(run_pass(silu, Swish)[0], Silu)
    after, audit = run_pass(silu, SqueezeExcite)
    assert_rewrites_to(after, SqueezeExcite)
    assert audit == {"fused": [], "not_fused": []}


def _relu6_model() -> onnx.ModelProto:
    """Conv -> Clip(0, 6) with the bounds as inputs, as PyTorch exports ReLU6 at opset 17."""
    weight = numpy_helper.from_array(np.full((4, 3, 1, 1), 0.5, "float32"), "w")
    low = numpy_helper.from_array(np.array(0.0, "float32"), "lo")
    high = numpy_helper.from_array(np.array(6.0, "float32"), "hi")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("Clip", ["c", "lo", "hi"], ["y"], name="relu6"),
    ]
    graph = helper.make_graph(
        nodes, "relu6", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], [weight, low, high],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@I.ir_module
class ConvRelu6:
    @R.function
    def main(x: R.Tensor((1, 3, 4, 4), "float32"), w: R.Tensor((4, 3, 1, 1), "float32")):
        R.func_attr({"num_input": 1})
        with R.dataflow():
            conv = R.nn.conv2d(x, w)
            relu6 = R.clip(conv, T.float64(0.0), T.float64(6.0))
            gv = relu6
            R.output(gv)
        return gv


def test_onnx_clip_becomes_one_clip():
    """The importer writes Clip as two TIR functions (Before: its import, the NaN guard on
    the bounds folded); they are recognised by what their bodies compute (one T.max, one
    T.min), and min(max(x, 0), 6) is clip(x, 0, 6)."""
    mod = import_with_provenance(import_model(_relu6_model()))
    mod = dce(clip(fold_constants(mod, PassOptions()), PassOptions()), PassOptions())
    assert_rewrites_to(strip_audit(mod), bind(ConvRelu6, w=np.full((4, 3, 1, 1), 0.5, "float32")))
    assert Audit.of(mod).to_json()["fused"] == [
        {"pattern": "clip", "nodes": ["relu6"], "reason": "clip(0, 6)"}
    ]
