"""The QDQ parameter check on the ONNX model itself, before the Relax import.

TVM's importer rejects per-axis parameters on the wrong axis with an internal message
("Size mismatch: ...") and accepts a zero scale silently, so the check runs on the ONNX
graph first and names the QuantizeLinear/DequantizeLinear node at fault (QDQError). The
importer calls `check_qdq_onnx` on the loaded model before TVM imports it; quantize/qdq/params.py
checks the same rules again on the imported module.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from vpuc.compiler.errors import QDQError

QDQ_NODES = ("QuantizeLinear", "DequantizeLinear")
ZERO_POINT_DTYPES = ("int8", "uint8", "int16", "uint16", "int32")


def is_qdq_onnx(model: onnx.ModelProto) -> bool:
    return any(node.op_type in QDQ_NODES for node in model.graph.node)


def check_qdq_onnx(model: onnx.ModelProto) -> None:
    """Raise QDQError naming the first Q/DQ node whose parameters are unusable."""
    if not is_qdq_onnx(model):
        return
    constants = _constants(model)
    shapes = _shapes(model, constants)
    for index, node in enumerate(model.graph.node):
        if node.op_type not in QDQ_NODES:
            continue
        scale = constants.get(node.input[1]) if len(node.input) > 1 else None
        zero = _zero_point(node, constants, scale)
        axis = next((a.i for a in node.attribute if a.name == "axis"), 1)
        problem = param_problem(scale, zero, axis, shapes.get(node.input[0]))
        if problem:
            name = node.name or f"#{index}:{node.output[0]}"
            raise QDQError(f"{node.op_type} node '{name}': {problem}")


def _zero_point(node: onnx.NodeProto, constants: dict, scale: np.ndarray | None) -> np.ndarray | None:
    if len(node.input) > 2 and node.input[2]:
        return constants.get(node.input[2])
    if scale is None:
        return None
    return np.zeros(scale.shape, np.uint8)  # ONNX default: uint8 zero


def _constants(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant":
            for attr in node.attribute:
                if attr.name == "value":
                    found[node.output[0]] = numpy_helper.to_array(attr.t)
    return found


def _shapes(model: onnx.ModelProto, constants: dict[str, np.ndarray]) -> dict[str, tuple[int, ...]]:
    """Static shapes of the graph's tensors (shape inference; unknown dims left out)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # a model shape inference cannot handle: check what is known
        inferred = model
    shapes = {name: value.shape for name, value in constants.items()}
    infos = [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]
    for info in infos:
        dims = info.type.tensor_type.shape.dim
        if dims and all(d.HasField("dim_value") for d in dims):
            shapes[info.name] = tuple(d.dim_value for d in dims)
    return shapes


def param_problem(
    scale: np.ndarray | None, zero: np.ndarray | None, axis: int, input_shape: tuple[int, ...] | None
) -> str | None:
    """What is wrong with one node's parameters, or None (see the module docstring)."""
    if scale is None or zero is None:
        return "scale and zero point must be constants (initializers)"
    if scale.ndim > 1:
        shape = list(scale.shape)
        return f"scale has shape {shape}: only per-tensor and per-axis (1-D) parameters are supported"
    flat = scale.reshape(-1).astype(np.float64)
    bad = flat[~(np.isfinite(flat) & (flat > 0))]
    if bad.size:
        return f"scale must be positive and finite (got {bad[0]:g})"
    if zero.size != scale.size and zero.size != 1:
        return f"zero point has {zero.size} values but scale has {scale.size}"
    if str(zero.dtype) not in ZERO_POINT_DTYPES:
        return f"zero point is {zero.dtype}; int8, uint8 or int32 expected"
    if scale.size == 1 or input_shape is None:
        return None
    return _axis_problem(scale.size, axis, tuple(input_shape))


def _axis_problem(channels: int, axis: int, shape: tuple[int, ...]) -> str | None:
    if not -len(shape) <= axis < len(shape):
        return f"axis {axis} is out of range for an input of rank {len(shape)}"
    if shape[axis] == channels:
        return None
    matching = [i for i, d in enumerate(shape) if d == channels]
    hint = f"; axis {matching[0]} has {channels}" if matching else ""
    return (
        f"per-axis parameters have {channels} values but axis {axis} of the input {list(shape)} "
        f"has {shape[axis]}{hint}"
    )
