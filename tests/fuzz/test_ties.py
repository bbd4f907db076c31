"""The harness's tie differential (runtime/ties.py) on graphs small enough to work by hand."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from fuzz_check import float_mismatch, lsb_mismatch, output_lsbs
from onnx import TensorProto, helper, numpy_helper

from vpuc.runtime.ties import explained_by_ties, float_tolerance, near_ties


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


def _batch_norm(
    x_scale: float, gamma: list[float], beta: list[float], dq_stats: bool = False
) -> onnx.ModelProto:
    """x -> Q(x_scale) -> DQ -> BatchNormalization (mean 0, var 1 - eps: a = gamma) -> Q(0.1)
    -> DQ -> y on [1, 2, 1, 1]: the int8 form is a multiply-add with an int32 bias at
    x_scale * |gamma| / 127, whose rounding moves the output by up to half that step."""
    eps = 1e-5
    c = len(gamma)
    inits = [
        numpy_helper.from_array(np.array(x_scale, np.float32), "sx"),
        numpy_helper.from_array(np.array(0.1, np.float32), "sy"),
        numpy_helper.from_array(np.array(0, np.int8), "zero"),
        numpy_helper.from_array(np.array(gamma, np.float32), "gamma"),
        numpy_helper.from_array(np.array(beta, np.float32), "beta"),
        numpy_helper.from_array(np.zeros(c, np.float32), "mean"),
        numpy_helper.from_array(np.full(c, 1 - eps, np.float32), "var"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "sx", "zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "sx", "zero"], ["xd"]),
    ]
    if dq_stats:  # as onnxruntime's quantize_static stores them: int8 gamma, int32 beta
        inits = [i for i in inits if i.name not in ("gamma", "beta")]
        inits += [
            numpy_helper.from_array(np.array([round(g * 4) for g in gamma], np.int8), "gamma_q"),
            numpy_helper.from_array(np.array(0.25, np.float32), "gamma_s"),
            numpy_helper.from_array(np.array([round(b * 10000) for b in beta], np.int32), "beta_q"),
            numpy_helper.from_array(np.array(1e-4, np.float32), "beta_s"),
        ]
        nodes += [
            helper.make_node("DequantizeLinear", ["gamma_q", "gamma_s"], ["gamma"]),
            helper.make_node("DequantizeLinear", ["beta_q", "beta_s"], ["beta"]),
        ]
    nodes += [
        helper.make_node("BatchNormalization", ["xd", "gamma", "beta", "mean", "var"], ["b"], epsilon=eps),
        helper.make_node("QuantizeLinear", ["b", "sy", "zero"], ["bq"]),
        helper.make_node("DequantizeLinear", ["bq", "sy", "zero"], ["y"]),
    ]
    shape = [1, c, 1, 1]
    graph = helper.make_graph(
        nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("dq_stats", [False, True], ids=["float_stats", "quantized_stats"])
def test_a_batch_norm_widens_the_window_by_its_bias_resolution(dq_stats):
    # by hand: x = 0.2 on both channels (2 steps of 0.1); channel 0 has gamma 1, so its int32
    # bias step is 0.1 * 1 / 127 and half of it is 0.00394 output steps (of 0.1); channel 1
    # has gamma 0.25, half a bias step 0.00098 steps. beta puts both outputs 0.003 steps above
    # the boundaries 2.5 (channel 0: 0.2 + 0.0503) and 1.5 (channel 1: 0.05 + 0.1003): a tie
    # on channel 0 only, where the fixed 0.002 window alone sees none.
    # (quantized_stats: gamma and beta behind DequantizeLinears, as onnxruntime's quantiser
    # writes them; the window was 0 there, u55-256-b76deea759)
    model = _batch_norm(0.1, [1.0, 0.25], [0.0503, 0.1003], dq_stats)
    found = near_ties(model, {"x": np.full((1, 2, 1, 1), 0.2, np.float32)})
    (name, values, nudge) = [t for t in found if t[0] == "b"][0]
    np.testing.assert_allclose(values.ravel() / 0.1, [2.503, 1.503], atol=1e-5)
    assert nudge.ravel()[0] < 0 and nudge.ravel()[1] == 0  # 2.503 rounds up: the nudge goes down
    # beyond the window (0.006 steps from the boundary) nothing is a tie
    far = _batch_norm(0.1, [1.0, 0.25], [0.0506, 0.1006], dq_stats)
    assert [t for t in near_ties(far, {"x": np.full((1, 2, 1, 1), 0.2, np.float32)}) if t[0] == "b"] == []


def _pool_times_7(width: int, float_tail: bool = False) -> onnx.ModelProto:
    """x [1, 1, 10, width] -> Q(1) -> DQ -> AveragePool 10x1 -> Q(1) -> DQ -> Mul 7 -> Q(1) ->
    DQ -> y: a mean of 10 integers at k + 0.5 steps is an exact tie, and the Mul carries the
    pool's rounding to the output with gain 7, as a grouped 1x1 conv on a finer scale did
    (the u55-256 fuzz finding: 47 ties in one pool)."""
    inits = [
        numpy_helper.from_array(np.array(1.0, np.float32), "one"),
        numpy_helper.from_array(np.array(0, np.int8), "zero"),
        numpy_helper.from_array(np.array(7.0, np.float32), "seven"),
    ]
    nodes = [
        helper.make_node("QuantizeLinear", ["x", "one", "zero"], ["xq"]),
        helper.make_node("DequantizeLinear", ["xq", "one", "zero"], ["xd"]),
        helper.make_node("AveragePool", ["xd"], ["p"], kernel_shape=[10, 1]),
        helper.make_node("QuantizeLinear", ["p", "one", "zero"], ["pq"]),
        helper.make_node("DequantizeLinear", ["pq", "one", "zero"], ["pd"]),
        helper.make_node("Mul", ["pd", "seven"], ["m"]),
        helper.make_node("QuantizeLinear", ["m", "one", "zero"], ["mq"]),
        helper.make_node("DequantizeLinear", ["mq", "one", "zero"], ["y"]),
    ]
    if float_tail:  # y computed in float after the last DequantizeLinear: the float tolerance
        inits.append(numpy_helper.from_array(np.array(0.01, np.float32), "hundredth"))
        nodes[-1].output[0] = "yd"
        nodes.append(helper.make_node("Mul", ["yd", "hundredth"], ["y"]))
    graph = helper.make_graph(
        nodes, "pool_times_7", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 10, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1, 1, width])], inits,
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _pool_case(float_tail: bool = False):
    # by hand: 20 columns of ten integers; 16 sum to 10k + 5, k = 0..7 twice (k + 0.5 steps:
    # a tie, which half-to-even rounds down for even k and up for odd k), 4 to 10k + 2
    # (k + 0.2: no tie)
    width, sums = 20, [10 * (j % 8) + 5 for j in range(16)] + [12, 22, 32, 42]
    x = np.zeros((1, 1, 10, width), np.float32)
    for j, total in enumerate(sums):
        x[0, 0, : total // 10, j] = 10  # ten-step values spread down the column: sum = total
        x[0, 0, 9, j] += total % 10
    mean = np.array(sums, np.float64) / 10
    return _pool_times_7(width, float_tail), {"x": x}, mean


def test_many_ties_past_every_subset_are_explained_by_the_descent():
    model, inputs, mean = _pool_case()
    lsbs = output_lsbs(model)
    ties = near_ties(model, inputs)
    assert sum(int(np.count_nonzero(n)) for _, _, n in ties) == 16  # past ALL_SUBSETS (10)
    # an integer engine rounding every tie half up: 7 * (k + 1) where onnxruntime gives 7 * k
    # for the 8 ties of even k; neither no flip nor all 16 nor any one alone gives it
    half_up = {"y": (7 * np.floor(mean + 0.5)).reshape(1, 1, 1, -1).astype(np.float32)}
    within = lambda o, r: lsb_mismatch(o, r, lsbs)  # noqa: E731
    assert within(half_up, {"y": (7 * np.rint(mean)).reshape(1, 1, 1, -1).astype(np.float32)})
    assert explained_by_ties(model, inputs, half_up, within) is None  # no lsbs: subsets only
    assert explained_by_ties(model, inputs, half_up, within, lsbs) == 8


def test_the_descent_does_not_explain_a_wrong_answer():
    model, inputs, mean = _pool_case()
    lsbs = output_lsbs(model)
    within = lambda o, r: lsb_mismatch(o, r, lsbs)  # noqa: E731
    wrong = 7 * np.floor(mean + 0.5)
    wrong[17] += 7  # 2.2 steps rounded to 3: no tie there
    assert (
        explained_by_ties(model, inputs, {"y": wrong.reshape(1, 1, 1, -1).astype(np.float32)}, within, lsbs)
        is None
    )
    wrong = 7 * np.floor(mean + 0.5)
    wrong[2] += 7  # a tie pushed a second step: neither rounding of 2.5 gives 4
    assert (
        explained_by_ties(model, inputs, {"y": wrong.reshape(1, 1, 1, -1).astype(np.float32)}, within, lsbs)
        is None
    )


def _check_part(tmp_path, answer):
    """`vpuc run --check`'s end-to-end part (runtime/check_qdq.py) on the hand model."""
    from vpuc.runtime.check_qdq import qdq_model_check

    model, inputs, _ = _pool_case()
    path = tmp_path / "pool_times_7.onnx"
    onnx.save(model, path)
    return qdq_model_check(str(path), inputs, {"y": answer.reshape(1, 1, 1, -1).astype(np.float32)}, 2)


def test_the_check_passes_tie_roundings_and_says_so(tmp_path):
    _, _, mean = _pool_case()
    part = _check_part(tmp_path, 7 * np.floor(mean + 0.5))  # 7 LSB from onnxruntime on 8 outputs
    (row,) = part["outputs"]
    assert row["max_lsb"] == 7 and row["passed"] and row["explained_by_ties"]
    assert part["passed"] and part["ties_flipped"] == 8


def test_the_check_still_fails_a_wrong_answer(tmp_path):
    _, _, mean = _pool_case()
    wrong = 7 * np.floor(mean + 0.5)
    wrong[17] += 21  # 2.2 steps rounded to 5: 3 LSB past every legitimate rounding
    part = _check_part(tmp_path, wrong)
    assert not part["passed"] and part["ties_flipped"] is None
    assert not part["outputs"][0]["passed"] and "explained_by_ties" not in part["outputs"][0]
    exact = _check_part(tmp_path, 7 * np.rint(mean))  # onnxruntime's own answer: no ties needed
    assert exact["passed"] and exact["ties_flipped"] is None and exact["outputs"][0]["max_lsb"] == 0


def test_the_descent_measures_a_float_output_by_the_float_tolerance():
    # the same 16 ties, then y * 0.01 in float: no LSB, so 1e-4 relative; only the 8 flips do
    model, inputs, mean = _pool_case(float_tail=True)
    lsbs = output_lsbs(model)
    assert lsbs == {"y": None}
    within = lambda o, r: lsb_mismatch(o, r, lsbs)  # noqa: E731
    half_up = (7 * np.floor(mean + 0.5)).astype(np.float32) * np.float32(0.01)
    answer = {"y": half_up.reshape(1, 1, 1, -1)}
    assert explained_by_ties(model, inputs, answer, within, lsbs) == 8
    answer["y"].ravel()[17] += np.float32(0.07)  # 2.2 steps rounded to 3: no tie
    assert explained_by_ties(model, inputs, answer, within, lsbs) is None


def test_a_float_output_near_float32s_largest_value_keeps_a_finite_tolerance():
    """The cpu fuzz run at 500 warned 'overflow encountered in add': the tolerance of a float32
    reference near 3.4e38 was computed in float32 and became inf, so any value passed there."""
    big = np.finfo(np.float32).max / np.float32(1.5)
    expected = {"y": np.array([big, 1.0, -2.0], np.float32)}
    assert float_mismatch({"y": expected["y"].copy()}, expected) is None
    for wrong in (np.inf, big / np.float32(2), np.float32(0.0)):
        got = expected["y"].copy()
        got[0] = wrong
        assert float_mismatch({"y": got}, expected) is not None, wrong
    # hand: 1e-4 * (2.27e38 + 2.27e38) + 1e-5 = 4.5e34 at the big element, finite
    assert np.isclose(float_tolerance(expected["y"])[0], 1e-4 * 2 * float(big) + 1e-5)
    same = {"y": np.array([np.inf, -np.inf, 1.0], np.float32)}
    assert float_mismatch({"y": same["y"].copy()}, same) is None  # equal infinities agree
    assert float_mismatch({"y": np.array([np.inf, np.inf, 1.0], np.float32)}, same) is not None
