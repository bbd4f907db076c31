"""Frontend step 3: fold run-time shape arithmetic and attribute-like inputs to constants.

Real exports compute shapes while running (PyTorch's `x.view(x.size(0), -1)` becomes
Shape -> Gather -> Unsqueeze -> Concat -> Reshape; tf2onnx and Paddle do the same for Expand,
Resize, Pad), keep weights in Constant nodes and pass Pad/Resize/Reduce/Clip parameters as
inputs. TVM's importer needs those as constants. Once every input shape is static, this
pre-pass folds, to a fixpoint:

    Constant node                          -> initializer
    Shape(x) / Size(x), x of static shape  -> int64 initializer
    op(constants...) -> integer or bool    -> initializer   (shape arithmetic)
    op(constants...) -> attribute-like use -> initializer   (e.g. Resize scales, Pad value)
    Identity(constant)                     -> initializer
    If(constant condition)                 -> the nodes of the branch it takes (if_inline.py)

It touches nothing else: float compute on weights (batch-norm folding and the like) is left
to the graph passes, so the audit there sees every fusion.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vpuc.compiler.errors import FrontendError
from vpuc.compiler.frontend.if_inline import inline_if
from vpuc.compiler.frontend.shapes import infer_shapes, static_shapes

# Inputs that carry parameters rather than data: (op_type) -> input positions.
ATTRIBUTE_LIKE_INPUTS: dict[str, tuple[int, ...]] = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Resize": (1, 2, 3), "Upsample": (1,), "Pad": (1, 2, 3), "Slice": (1, 2, 3, 4),
    "Squeeze": (1,), "Unsqueeze": (1,), "Clip": (1, 2), "Split": (1,), "TopK": (1,),
    "Range": (0, 1, 2), "OneHot": (1,), "CumSum": (1,), "Trilu": (1,), "Dropout": (1, 2),
    "ReduceMean": (1,), "ReduceSum": (1,), "ReduceMax": (1,), "ReduceMin": (1,),
    "ReduceProd": (1,), "ReduceL1": (1,), "ReduceL2": (1,), "ReduceLogSum": (1,),
    "ReduceLogSumExp": (1,), "ReduceSumSquare": (1,), "NonMaxSuppression": (2, 3, 4),
}  # fmt: skip
# An integer result larger than this is data (an index table), not shape arithmetic.
MAX_INTEGER_FOLD_ELEMENTS = 4096
MAX_ROUNDS = 16


@dataclass
class FoldResult:
    """The folded model and the nodes that became constants, in order."""

    model: onnx.ModelProto
    folded: list[tuple[str, str]] = field(default_factory=list)  # (node name, op type)


def fold_shape_computations(model: onnx.ModelProto, name: str) -> FoldResult:
    """Fold to a fixpoint; the model's inputs must already have static shapes."""
    result = FoldResult(model=model)
    for _ in range(MAX_ROUNDS):
        result.model = infer_shapes(result.model, name)
        folded_now = _fold_round(result.model, name)
        if not folded_now:
            break
        result.folded.extend(folded_now)
    _drop_unused_initializers(result.model)
    result.model = infer_shapes(result.model, name)
    return result


def _fold_round(model: onnx.ModelProto, name: str) -> list[tuple[str, str]]:
    graph = model.graph
    constants = {t.name: t for t in graph.initializer}
    shapes = static_shapes(model)
    shape_like = _shape_like_tensors(graph)
    elem_types = _elem_types(model)
    opsets = list(model.opset_import)
    kept, folded = [], []
    for node in graph.node:
        if node.op_type == "If" and node.domain in ("", "ai.onnx") and node.input[0] in constants:
            branch_nodes, branch_constants = inline_if(node, constants[node.input[0]], _names_in(graph))
            kept.extend(branch_nodes)
            graph.initializer.extend(branch_constants)
            constants.update({t.name: t for t in branch_constants})
            folded.append((node.name or node.output[0], node.op_type))
            continue
        values = _try_fold(node, constants, shapes, shape_like, elem_types, opsets, name)
        if values is None:
            kept.append(node)
            continue
        for output, value in zip(node.output, values, strict=True):
            tensor = numpy_helper.from_array(np.asarray(value), output)
            constants[output] = tensor
            graph.initializer.append(tensor)
        folded.append((node.name or node.output[0], node.op_type))
    if folded:
        del graph.node[:]
        graph.node.extend(kept)
        del graph.value_info[:]
    return folded


def _try_fold(node, constants, shapes, shape_like, elem_types, opsets, name):
    """The node's output values if it should fold, else None."""
    if node.domain not in ("", "ai.onnx") or _has_subgraph(node):
        return None
    if node.op_type in ("Shape", "Size"):
        shape = shapes.get(node.input[0])
        return None if shape is None else [_shape_value(node, shape)]
    inputs = [i for i in node.input if i]
    if not all(i in constants for i in inputs):
        return None
    if node.op_type not in ("Constant", "Identity") and not _worth_folding(
        node, shape_like, elem_types, shapes
    ):
        return None
    return _evaluate(node, constants, opsets, name)


def _worth_folding(node, shape_like, elem_types, shapes) -> bool:
    if all(out in shape_like for out in node.output):
        return True
    for out in node.output:
        if elem_types.get(out) not in _INTEGER_TYPES:
            return False
        shape = shapes.get(out)
        if shape is None or int(np.prod(shape, dtype=np.int64)) > MAX_INTEGER_FOLD_ELEMENTS:
            return False
    return True


_INTEGER_TYPES = {
    onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
    onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.BOOL,
}  # fmt: skip


def _shape_value(node: onnx.NodeProto, shape: tuple[int, ...]) -> np.ndarray:
    if node.op_type == "Size":
        return np.array(int(np.prod(shape, dtype=np.int64)), dtype=np.int64)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    start, end = attrs.get("start", 0), attrs.get("end", None)
    return np.array(shape[start:end], dtype=np.int64)


def _evaluate(node, constants, opsets, name) -> list[np.ndarray]:
    graph = helper.make_graph(
        [node],
        "fold",
        [],
        [helper.make_value_info(out, onnx.TypeProto()) for out in node.output],
        [constants[i] for i in dict.fromkeys(i for i in node.input if i)],
    )
    single = helper.make_model(graph, opset_imports=opsets)
    from onnx.reference import ReferenceEvaluator  # here: a model with nothing to fold does not load it

    try:
        return list(ReferenceEvaluator(single).run(None, {}))
    except Exception as exc:  # the reference evaluator raises many types
        # It lacks some ops at older opsets (DequantizeLinear before 19: a fuzzer finding,
        # a QDQ Pad's constant value); onnxruntime has them.
        values = _evaluate_with_onnxruntime(single)
        if values is not None:
            return values
        label = node.name or node.output[0]
        raise FrontendError(
            f"{name}: node '{label}' ({node.op_type}): cannot fold its constant inputs: {exc}"
        ) from None


def _evaluate_with_onnxruntime(model: onnx.ModelProto) -> list[np.ndarray] | None:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return list(session.run(None, {}))
    except Exception:  # noqa: BLE001 - onnxruntime's own error kinds; the caller reports
        return None


def _shape_like_tensors(graph: onnx.GraphProto) -> set[str]:
    """Tensors used only as parameters: attribute-like inputs and what alone feeds them."""
    shape_like: set[str] = set()
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for position, tensor in enumerate(node.input):
            consumers.setdefault(tensor, []).append(node)
            if position in ATTRIBUTE_LIKE_INPUTS.get(node.op_type, ()):
                shape_like.add(tensor)
    outputs = {o.name for o in graph.output}
    for node in reversed(graph.node):
        if all(o in shape_like and o not in outputs for o in node.output):
            shape_like.update(i for i in node.input if i)
    # A tensor that also feeds data inputs is data, not a parameter.
    for tensor in list(shape_like):
        for consumer in consumers.get(tensor, []):
            positions = [p for p, t in enumerate(consumer.input) if t == tensor]
            slots = ATTRIBUTE_LIKE_INPUTS.get(consumer.op_type, ())
            if any(p not in slots for p in positions) and not _all_outputs_in(consumer, shape_like):
                shape_like.discard(tensor)
    return shape_like


def _all_outputs_in(node: onnx.NodeProto, names: set[str]) -> bool:
    return all(o in names for o in node.output)


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    types = {t.name: t.data_type for t in model.graph.initializer}
    for vi in [*model.graph.input, *model.graph.value_info, *model.graph.output]:
        if vi.type.HasField("tensor_type"):
            types[vi.name] = vi.type.tensor_type.elem_type
    return types


def _names_in(graph: onnx.GraphProto) -> set[str]:
    names = {t.name for t in graph.initializer} | {v.name for v in graph.input}
    for node in graph.node:
        names.update([*node.input, *node.output, node.name])
    return names


def _has_subgraph(node: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)


def _used_names(graph: onnx.GraphProto) -> set[str]:
    used = {o.name for o in graph.output}
    for node in graph.node:
        used.update(node.input)
        for attr in node.attribute:
            for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs):
                used.update(_used_names(sub))
    return used


def _drop_unused_initializers(model: onnx.ModelProto) -> None:
    graph = model.graph
    used = _used_names(graph)
    kept = [t for t in graph.initializer if t.name in used]
    dropped = {t.name for t in graph.initializer} - {t.name for t in kept}
    if not dropped:
        return
    del graph.initializer[:]
    graph.initializer.extend(kept)
    inputs = [vi for vi in graph.input if vi.name not in dropped]
    del graph.input[:]
    graph.input.extend(inputs)
