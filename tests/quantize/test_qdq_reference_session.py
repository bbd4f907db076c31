"""The QDQ accuracy measurement's onnxruntime sessions do not spin between runs (issue 23):
spinning workers held a loaded machine's cores from the run that came next (MobileNet's
measurement 1.3-1.7 s with them, 0.4-0.6 s without, on 2 busy cores)."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from vpuc.compiler.quantize.qdq.reference import _session


def _relu_model():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "relu", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_sessions_do_not_spin():
    session = _session(_relu_model())
    options = session.get_session_options()
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    (y,) = session.run(None, {"x": np.array([[-1, 0, 2, -3]], np.float32)})
    np.testing.assert_array_equal(y, [[0, 0, 2, 0]])
