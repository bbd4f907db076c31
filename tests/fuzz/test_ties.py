"""The harness's tie differential (fuzz_ties.py) on graphs small enough to work by hand."""

from __future__ import annotations

import numpy as np
import onnx
from fuzz_check import lsb_mismatch, output_lsbs
from fuzz_ties import explained_by_ties, near_ties
from onnx import TensorProto, helper, numpy_helper


def _q_times_3() -> onnx.ModelProto:
    """x -> Q(scale 1) -> DQ -> Mul 3 -> Q(scale 1) -> DQ -> y: a rounding of x carried
    forward with gain 3, as a later layer carries a tie (a finer scale, a BatchNorm's gain)."""
    inits = [
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0, np.int8), "zero"),
        numpy_helper.from_array(np.array(3.0, np.float32), "three"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "one", "zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "one", "zero"], ["xd"]),
        helper.make_node("Mul", ["xd", "three"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "one", "zero"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "one", "zero"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "q_times_3", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _explained(x, ours):
    model = _q_times_3()
    lsbs = output_lsbs(model)
    inputs = {"x": np.array(x, np.float32)}
    answer = {"y": np.array(ours, np.float32)}
    return explained_by_ties(model, inputs, answer, lambda o, r: lsb_mismatch(o, r, lsbs))


def test_an_answer_that_rounded_a_tie_the_other_way_is_explained():
    # onnxruntime: Q(0.5) = 0 (half to even), Q(1.2) = 1 -> y = [0, 3]. Rounding the tie up
    # gives 1 -> y = [3, 3]: 3 LSB from onnxruntime, but a legitimate rounding of x.
    assert lsb_mismatch({"y": np.array([3, 3], np.float32)}, {"y": np.array([0, 3], np.float32)}, {"y": 1.0})
    assert _explained([0.5, 1.2], [3, 3]) == 1
    # a value 0.001 of a step from its boundary counts as a tie too: 1.501 -> 2 -> 6, or 1 -> 3
    assert _explained([1.501, 1.2], [3, 3]) == 1


def test_a_wrong_answer_is_not_explained():
    assert _explained([0.5, 1.2], [6, 3]) is None  # neither rounding of 0.5 gives 6
    assert _explained([0.5, 1.2], [3, 9]) is None  # 1.2 is no tie: it must give 3
    assert _explained([0.4, 1.2], [3, 3]) is None  # no tie anywhere: nothing to flip


def test_near_ties_finds_only_values_near_a_boundary():
    (found,) = near_ties(_q_times_3(), {"x": np.array([0.5, 1.2], np.float32)})
    name, values, nudge = found
    assert name == "x" and nudge[1] == 0 and nudge[0] > 0  # 0.5 went down: the nudge is up
    assert near_ties(_q_times_3(), {"x": np.array([0.49, 1.2], np.float32)}) == []  # 0.01 away
