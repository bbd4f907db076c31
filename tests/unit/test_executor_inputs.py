"""`Executable.run`'s inputs: the fast path (`_exact_inputs`, arrays that are already what
the full check returns) and the full check (`check_inputs`) accept and refuse the same
inputs, and every run computes on the inputs it was given (small inputs are copied into
buffers the Executable keeps between calls)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from vpuc.compiler import compile_model
from vpuc.runtime.executor import Executable
from vpuc.runtime.inputs import InputError

SHAPE = (1, 8, 8, 8)


@pytest.fixture(scope="module")
def relu():
    value = [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(SHAPE)) for n in "xy"]
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", value[:1], value[1:])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return Executable(compile_model(model, target="cpu"), time_host_ops=False)


def test_each_run_computes_on_its_own_inputs_and_returns_new_arrays(relu):
    rng = np.random.default_rng(0)
    first, second = (rng.standard_normal(SHAPE).astype(np.float32) for _ in range(2))
    out1 = relu.run({"x": first})["y"]
    out2 = relu.run({"x": second})["y"]
    np.testing.assert_array_equal(out1, np.maximum(first, 0))  # not overwritten by the second run
    np.testing.assert_array_equal(out2, np.maximum(second, 0))
    assert not np.shares_memory(out1, out2)


@pytest.mark.parametrize(
    "make",
    [
        lambda a: np.asfortranarray(a),  # not C-contiguous
        lambda a: np.ascontiguousarray(np.swapaxes(np.swapaxes(a, 1, 3).copy(), 1, 3)),
        lambda a: np.swapaxes(np.swapaxes(a, 1, 3).copy(), 1, 3),  # a strided view
        lambda a: a.view(type("Sub", (np.ndarray,), {})),  # a subclass of ndarray
    ],
)
def test_inputs_the_fast_path_passes_on_give_the_same_outputs(relu, make):
    x = np.random.default_rng(1).standard_normal(SHAPE).astype(np.float32)
    np.testing.assert_array_equal(relu.run({"x": make(x)})["y"], np.maximum(x, 0))


@pytest.mark.parametrize(
    ("inputs", "message"),
    [
        ({"x": np.zeros(SHAPE, np.float64)}, "has dtype float64, expected float32"),
        ({"x": np.zeros((1, 8, 8), np.float32)}, "has shape [1, 8, 8], expected [1, 8, 8, 8]"),
        ({"x": np.zeros(SHAPE, np.float32), "z": np.zeros(1)}, "'z' is not an input of the model"),
        ({"z": np.zeros(SHAPE, np.float32)}, "'z' is not an input of the model"),
        ({}, "input 'x' is missing"),
    ],
)
def test_wrong_inputs_are_refused_with_the_full_checks_message(relu, inputs, message):
    with pytest.raises(InputError) as refused:
        relu.run(inputs, source="in.npz")
    assert str(refused.value).startswith("in.npz: ") and message in str(refused.value)
