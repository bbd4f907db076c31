"""Frontend step 4: list every node the CPU path cannot compile right, all at once.

Two kinds of "no", each naming the node:
  - an op the Relax importer cannot convert (or converts wrongly whatever its attributes);
  - an op it converts, in a configuration it gets wrong and frontend/op_fixes.py cannot
    rewrite (each with its reason: ONNX's backend node tests found them giving wrong
    answers or crashing the host build, tests/onnx_node).
A user with three unsupported ops learns about all three in one run, each by node name and
op type, instead of fixing them one error at a time.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import compat
from vpuc.compiler.errors import FrontendError
from vpuc.compiler.frontend.fixes.semantics import conv_transpose_padding
from vpuc.compiler.frontend.fold import ATTRIBUTE_LIKE_INPUTS
from vpuc.compiler.frontend.shapes import static_shapes

# Ops the importer lists but cannot convert (found on ONNX's backend node tests).
KNOWN_BROKEN = {"MatMulInteger", "ConvInteger"}
MAX_LISTED = 12
# Element types TVM 0.27 cannot hold in memory or cast (sub-byte and 6-bit floats), or
# whose casts it rounds unlike ONNX (8-bit floats).
UNSUPPORTED_TYPES = {
    TensorProto.INT4, TensorProto.UINT4, TensorProto.INT2, TensorProto.UINT2,
    TensorProto.FLOAT4E2M1, TensorProto.FLOAT6E2M3, TensorProto.FLOAT6E3M2,
    TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
    TensorProto.FLOAT8E5M2FNUZ, TensorProto.FLOAT8E8M0, TensorProto.STRING,
}  # fmt: skip
INTEGERS = {
    TensorProto.INT8, TensorProto.INT16, TensorProto.INT32, TensorProto.INT64,
    TensorProto.UINT8, TensorProto.UINT16, TensorProto.UINT32, TensorProto.UINT64,
}  # fmt: skip


def unsupported_nodes(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(node name, op type) for every node of the main graph the importer cannot convert."""
    convertible = compat.onnx_importer_ops()
    found = []
    for index, node in enumerate(model.graph.node):
        domain = node.domain if node.domain not in ("", "ai.onnx") else ""
        op = f"{domain}.{node.op_type}" if domain else node.op_type
        if domain or node.op_type not in convertible or node.op_type in KNOWN_BROKEN:
            found.append((_label(node, index), op))
    return found


def unsupported_configurations(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(node name, "Op: reason") for supported ops in a configuration vpuc refuses."""
    facts = _Facts(model)
    found = []
    for index, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx"):
            continue
        reason = _type_reason(node, facts) or _empty_constant_reason(node, facts)
        check = CONFIGURATION_CHECKS.get(node.op_type)
        reason = reason or (check(node, facts) if check else None)
        if reason:
            found.append((_label(node, index), f"{node.op_type}: {reason}"))
    return found


def check_supported(model: onnx.ModelProto, name: str) -> None:
    """Raise one FrontendError naming every unsupported node."""
    found = unsupported_nodes(model)
    listed_nodes = {node for node, _ in found}
    found += [(n, why) for n, why in unsupported_configurations(model) if n not in listed_nodes]
    if not found:
        return
    listed = ", ".join(f"'{node}' ({op})" for node, op in found[:MAX_LISTED])
    more = f", and {len(found) - MAX_LISTED} more" if len(found) > MAX_LISTED else ""
    kinds = sorted({op.split(":")[0] for _, op in found})
    raise FrontendError(f"{name}: {len(found)} unsupported node(s) [{', '.join(kinds)}]: {listed}{more}")


def _label(node: onnx.NodeProto, index: int) -> str:
    return node.name or f"#{index}:{node.output[0]}"


class _Facts:
    """Element types, static shapes and constants of the model's tensors."""

    def __init__(self, model: onnx.ModelProto) -> None:
        graph = model.graph
        self.types = {t.name: t.data_type for t in graph.initializer}
        for vi in [*graph.input, *graph.value_info, *graph.output]:
            if vi.type.HasField("tensor_type"):
                self.types[vi.name] = vi.type.tensor_type.elem_type
        self.shapes = static_shapes(model)
        self.constants = {t.name: t for t in graph.initializer}

    def constant(self, tensor: str) -> np.ndarray | None:
        proto = self.constants.get(tensor)
        return None if proto is None else numpy_helper.to_array(proto)


def _attr(node: onnx.NodeProto, name: str, default=None):
    for attr in node.attribute:
        if attr.name == name:
            return helper.get_attribute_value(attr)
    return default


def _type_reason(node: onnx.NodeProto, facts: _Facts) -> str | None:
    for tensor in [*node.input, *node.output]:
        elem = facts.types.get(tensor)
        if elem in UNSUPPORTED_TYPES:
            return f"tensor '{tensor}' has type {TensorProto.DataType.Name(elem)}, not supported"
    to = _attr(node, "to") if node.op_type == "Cast" else None
    if to in UNSUPPORTED_TYPES:
        return f"a cast to {TensorProto.DataType.Name(to)} is not supported"
    return None


def _empty_constant_reason(node: onnx.NodeProto, facts: _Facts) -> str | None:
    """TVM writes an empty constant into the host library in a form it cannot read back."""
    parameters = ATTRIBUTE_LIKE_INPUTS.get(node.op_type, ())
    for position, tensor in enumerate(node.input):
        proto = facts.constants.get(tensor)
        if proto is not None and position not in parameters and 0 in proto.dims:
            return f"the empty constant '{tensor}' (a dim of size 0) is not supported as data"
    return None


# --- one check per op: the node and what is known -> the reason it is refused, or None ---------


def _batch_norm(node, facts: _Facts) -> str | None:
    if _attr(node, "training_mode", 0):
        return "training_mode=1 (batch statistics) is not supported: vpuc compiles for inference"
    return None


def _dropout(node, facts: _Facts) -> str | None:
    if len(node.input) < 3 or not node.input[2]:
        return None
    training = facts.constant(node.input[2])
    if training is None or training.any():
        return "training mode (random dropout) is not supported: vpuc compiles for inference"
    return None


def _pow(node, facts: _Facts) -> str | None:
    if facts.types.get(node.input[0]) in INTEGERS:
        return "Pow of integer tensors is not supported (TVM's power takes floats only)"
    return None


def _rms_norm(node, facts: _Facts) -> str | None:
    shape = facts.shapes.get(node.input[0])
    if shape and _attr(node, "axis", -1) % len(shape) == 0:
        return "axis 0 (normalising over every axis, the batch too) is not supported"
    return None


def _roi_align(node, facts: _Facts) -> str | None:
    mode = _attr(node, "mode", b"avg")
    if (mode.decode() if isinstance(mode, bytes) else mode) == "max":
        return "mode 'max' is not supported (TVM's max pooling of samples differs from ONNX's)"
    return None


def _conv_transpose(node, facts: _Facts) -> str | None:
    if _attr(node, "output_shape") is not None and conv_transpose_padding(node, facts.shapes) is None:
        return (
            "output_shape is supported only as extra output rows/columns at the end, fewer "
            "than the stride, with no pads"
        )
    return None


def _reduce_extreme(node, facts: _Facts) -> str | None:
    """TVM's max/min of an empty set is not ONNX's -inf/+inf (ReduceMin gives -inf)."""
    shape = facts.shapes.get(node.input[0])
    if shape is not None and 0 in shape:
        return "a reduction of an empty tensor is not supported"
    return None


def _resize(node, facts: _Facts) -> str | None:
    if _attr(node, "antialias", 0):
        return "antialias=1 is not supported"
    mode = _attr(node, "coordinate_transformation_mode", b"half_pixel")
    if (mode.decode() if isinstance(mode, bytes) else mode) == "half_pixel_symmetric":
        return "coordinate_transformation_mode 'half_pixel_symmetric' is not supported"
    scales = facts.constant(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    shape = facts.shapes.get(node.input[0])
    if scales is not None and scales.size and shape is not None:
        axes = _attr(node, "axes") or range(len(shape))
        sizes = np.asarray([shape[a] for a in axes], np.float64) * scales.astype(np.float64)
        if not np.allclose(sizes, np.round(sizes)):
            return (
                "scales whose output size is not a whole number are not supported (TVM maps "
                "coordinates by the rounded size, ONNX by the scale)"
            )
    return None


def _resize_policy(node, facts: _Facts) -> str | None:
    """What frontend/fixes/conversions.py leaves of keep_aspect_ratio_policy (a Resize whose
    `axes` it could not expand has runtime parameters: the importer's own refusal stands)."""
    policy = _attr(node, "keep_aspect_ratio_policy", b"stretch")
    if (policy.decode() if isinstance(policy, bytes) else policy) != "stretch":
        return (
            "keep_aspect_ratio_policy whose sizes are not exactly the common scale times the "
            "input is not supported (TVM would map coordinates by each axis's own scale)"
        )
    return None


def _max_pool(node, facts: _Facts) -> str | None:
    if len(node.output) > 1 and node.output[1]:
        return "the Indices output (argmax) is not supported"
    return None


def _split(node, facts: _Facts) -> str | None:
    sizes = facts.constant(node.input[1]) if len(node.input) > 1 and node.input[1] else None
    if sizes is None:
        sizes = np.asarray(_attr(node, "split", []) or [1])
    if (sizes == 0).any():
        return "empty parts (a split size of 0) are not supported"
    return None


def _top_k(node, facts: _Facts) -> str | None:
    if facts.types.get(node.input[0]) == TensorProto.UINT64:
        return "uint64 input is not supported (TVM's topk has no uint64 kernel)"
    return None


CONFIGURATION_CHECKS: dict[str, Callable[[onnx.NodeProto, _Facts], str | None]] = {
    "BatchNormalization": _batch_norm,
    "Dropout": _dropout,
    "Pow": _pow,
    "RMSNormalization": _rms_norm,
    "RoiAlign": _roi_align,
    "ConvTranspose": _conv_transpose,
    "ReduceMin": _reduce_extreme,
    "ReduceMax": _reduce_extreme,
    "Resize": lambda node, facts: _resize(node, facts) or _resize_policy(node, facts),
    "MaxPool": _max_pool,
    "Split": _split,
    "TopK": _top_k,
}
