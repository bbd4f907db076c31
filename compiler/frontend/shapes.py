"""Frontend step 2: make every shape static.

`--input-shape name=1x3x224x224` fixes an input's dims; an input with a symbolic or unknown
dim and no such option is an error naming the input and the dim. Then onnx shape inference
runs (with data propagation, so Shape -> Gather chains carry values) and every graph output
must come out static.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from vpuc.compiler.errors import FrontendError

MAX_DIM = 2**31 - 1  # TVM's shapes and the VPU's index arithmetic are 32-bit
_SHAPE_SPEC = re.compile(r"^(?P<name>[^=]+)=(?P<dims>\d+([x,]\d+)*)$")


@dataclass(frozen=True)
class TensorSpec:
    """A graph input or output as a user sees it."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    index_range: int | None = None  # an input of Gather indices: valid in [-n, n) (index_inputs.py)

    def to_json(self) -> dict:
        found = {"name": self.name, "shape": list(self.shape), "dtype": self.dtype}
        if self.index_range is not None:
            found["index_range"] = self.index_range
        return found

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * np.dtype(self.dtype).itemsize


def parse_input_shape(spec: str) -> tuple[str, tuple[int, ...]]:
    """Parse `name=1x3x224x224` (or `name=1,3,224,224`) into (name, dims)."""
    match = _SHAPE_SPEC.match(spec.strip())
    if not match:
        raise FrontendError(f"--input-shape '{spec}': expected NAME=D1xD2x... such as x=1x3x224x224")
    dims = tuple(int(d) for d in re.split("[x,]", match["dims"]))
    if any(d <= 0 for d in dims):
        raise FrontendError(f"--input-shape '{spec}': every dim must be a positive integer")
    if any(d > MAX_DIM for d in dims):
        raise FrontendError(f"--input-shape '{spec}': a dim above {MAX_DIM:,} (2^31 - 1) is not supported")
    return match["name"], dims


def graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """The real inputs: graph inputs that are not initializers (old exporters list both)."""
    initializers = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializers]


def fix_input_shapes(
    model: onnx.ModelProto, name: str, input_shapes: dict[str, tuple[int, ...]]
) -> onnx.ModelProto:
    """Return a copy whose inputs have the static shapes given (or already declared)."""
    model = _copy(model)
    inputs = {vi.name: vi for vi in graph_inputs(model)}
    for given in input_shapes:
        if given not in inputs:
            known = ", ".join(inputs) or "none"
            raise FrontendError(f"{name}: --input-shape names '{given}', not an input (inputs: {known})")
    symbolic = [vi for vi in inputs.values() if vi.name not in input_shapes and _symbolic(vi)]
    if len(symbolic) > 1:  # name them all at once, not one failed compile per input
        flags = " ".join(f"--input-shape {vi.name}=D1xD2x..." for vi in symbolic)
        described = ", ".join(f"'{vi.name}' ({_describe(vi)})" for vi in symbolic)
        raise FrontendError(f"{name}: inputs {described} have symbolic dims; give {flags}")
    for vi in inputs.values():
        if not vi.type.HasField("tensor_type"):
            raise FrontendError(f"{name}: input '{vi.name}' is not a tensor")
        dims = _fixed_dims(name, vi, input_shapes.get(vi.name))
        _set_dims(vi, dims)
    _check_outputs(model, name)
    # Intermediate shapes recorded by the exporter may still be symbolic: infer them anew.
    # An output no node computes (an input passed through, a constant) has no node to infer
    # it from: it keeps the input's fixed dims or the constant's.
    del model.graph.value_info[:]
    known = {vi.name: vi for vi in inputs.values()}
    constants = {t.name: tuple(t.dims) for t in model.graph.initializer}
    for out in model.graph.output:
        if not out.type.HasField("tensor_type"):
            continue
        out.type.tensor_type.ClearField("shape")
        if out.name in known:
            out.type.tensor_type.shape.CopyFrom(known[out.name].type.tensor_type.shape)
        elif out.name in constants:
            _set_dims(out, constants[out.name])
    return model


def _check_outputs(model: onnx.ModelProto, name: str) -> None:
    """Each graph output listed once (onnxruntime returns a listed-twice output twice; vpuc's
    outputs are by name)."""
    seen: set[str] = set()
    for out in model.graph.output:
        if out.name in seen:
            raise FrontendError(
                f"{name}: output '{out.name}' is listed twice among the graph's outputs; list it once"
            )
        seen.add(out.name)


def infer_shapes(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """Run onnx shape inference (strict, with data propagation)."""
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError) as exc:
        message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        raise FrontendError(f"{name}: shape inference failed: {message}") from None


def static_shapes(model: onnx.ModelProto) -> dict[str, tuple[int, ...] | None]:
    """Every typed tensor's shape: a tuple when fully static, else None."""
    shapes: dict[str, tuple[int, ...] | None] = {}
    values = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    for vi in values:
        if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
            dims = vi.type.tensor_type.shape.dim
            static = all(d.HasField("dim_value") for d in dims)
            shapes[vi.name] = tuple(d.dim_value for d in dims) if static else None
    for tensor in model.graph.initializer:
        shapes[tensor.name] = tuple(tensor.dims)
    return shapes


def check_static_shapes(model: onnx.ModelProto, name: str) -> None:
    """Once the inputs are fixed and shape arithmetic folded, every tensor must have a static
    shape; the first node whose output does not (from static inputs) is named."""
    shapes = static_shapes(model)
    for index, node in enumerate(model.graph.node):
        if any(shapes.get(i) is None for i in node.input if i):
            continue  # an earlier node is the culprit (reported first)
        for output in node.output:
            if output and shapes.get(output) is None:
                label = node.name or f"#{index}:{node.output[0]}"
                raise FrontendError(
                    f"{name}: node '{label}' ({node.op_type}) gives '{output}' a shape known only at "
                    f"run time ({_describe_tensor(model, output)}){_if_hint(model, node)}; vpuc needs "
                    "static shapes"
                )


def _describe_tensor(model: onnx.ModelProto, tensor: str) -> str:
    for vi in [*model.graph.value_info, *model.graph.output]:
        if vi.name == tensor and vi.type.tensor_type.HasField("shape"):
            return _describe(vi)
    return "shape unknown"


def tensor_specs(model: onnx.ModelProto, values: list[onnx.ValueInfoProto], name: str) -> list[TensorSpec]:
    """TensorSpecs for graph inputs or outputs; every shape must be static by now."""
    specs = []
    for vi in values:
        tensor_type = vi.type.tensor_type
        dims = tensor_type.shape.dim
        if not tensor_type.HasField("shape") or not all(d.HasField("dim_value") for d in dims):
            raise FrontendError(
                f"{name}: '{vi.name}' has a dynamic shape ({_describe(vi)}) after fixing the "
                f"inputs{_dynamic_origin(model)}; vpuc needs static shapes"
            )
        dtype = helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)
        specs.append(TensorSpec(vi.name, tuple(d.dim_value for d in dims), np.dtype(dtype).name))
    return specs


def _dynamic_origin(model: onnx.ModelProto) -> str:
    """Where the first shape known only at run time comes from: the first node (graph order)
    whose inputs are all static and one of whose outputs is not."""
    shapes = static_shapes(model)
    for index, node in enumerate(model.graph.node):
        if not all(shapes.get(i) is not None for i in node.input if i):
            continue
        dynamic = [o for o in node.output if o and shapes.get(o) is None]
        if dynamic:
            label = node.name or f"#{index}:{node.output[0]}"
            return (
                f": node '{label}' ({node.op_type}) gives '{dynamic[0]}' a shape known only at run time"
                f"{_if_hint(model, node)}"
            )
    return ""


def _if_hint(model: onnx.ModelProto, node: onnx.NodeProto) -> str:
    """For an If: which graph inputs its condition depends on (--bind-input fixes them)."""
    if node.op_type != "If":
        return ""
    producers = {o: n for n in model.graph.node for o in n.output}
    inputs = {vi.name for vi in model.graph.input}
    found, stack, seen = [], [node.input[0]], set()
    while stack:
        tensor = stack.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        if tensor in inputs:
            found.append(tensor)
        elif tensor in producers:
            stack.extend(i for i in producers[tensor].input if i)
    if not found:
        return " (its condition is computed at run time)"
    names = ", ".join(sorted(found))
    return f" (its condition depends on input {names}: --bind-input {sorted(found)[0]}=VALUE fixes it)"


def _symbolic(vi: onnx.ValueInfoProto) -> bool:
    """A tensor input with a declared shape where some dim is a name or unknown."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return False
    return any(not d.HasField("dim_value") or d.dim_value < 0 for d in vi.type.tensor_type.shape.dim)


def _fixed_dims(name: str, vi: onnx.ValueInfoProto, given: tuple[int, ...] | None) -> tuple[int, ...]:
    tensor_type = vi.type.tensor_type
    declared = list(tensor_type.shape.dim) if tensor_type.HasField("shape") else None
    if given is None:
        if declared is None:
            raise FrontendError(
                f"{name}: input '{vi.name}' has no shape; give --input-shape {vi.name}=D1xD2x..."
            )
        for axis, dim in enumerate(declared):
            if not dim.HasField("dim_value") or dim.dim_value < 0:
                label = f"'{dim.dim_param}'" if dim.dim_param else "unknown"
                raise FrontendError(
                    f"{name}: input '{vi.name}' has a symbolic dim {label} at axis {axis} "
                    f"({_describe(vi)}); give --input-shape {vi.name}=D1xD2x..."
                )
        # an image with no rows or columns fails inside TVM's build (a negative output
        # shape); other empty tensors (an empty set reduced) compile and run
        if len(declared) == 4 and any(d.dim_value == 0 for d in declared[2:]):
            raise FrontendError(
                f"{name}: input '{vi.name}' declares a 0-size spatial dim ({_describe(vi)}); an "
                f"image with no rows or columns cannot be compiled, give --input-shape {vi.name}=D1xD2x..."
            )
        return tuple(d.dim_value for d in declared)
    if declared is not None:
        if len(declared) != len(given):
            raise FrontendError(
                f"{name}: --input-shape {vi.name}: rank {len(given)} but the model declares "
                f"rank {len(declared)} ({_describe(vi)})"
            )
        for axis, (dim, value) in enumerate(zip(declared, given, strict=True)):
            if dim.HasField("dim_value") and dim.dim_value > 0 and dim.dim_value != value:
                raise FrontendError(
                    f"{name}: --input-shape {vi.name}: axis {axis} is {value} but the model "
                    f"fixes it to {dim.dim_value}"
                )
    return given


def _set_dims(vi: onnx.ValueInfoProto, dims: tuple[int, ...]) -> None:
    shape = vi.type.tensor_type.shape
    shape.ClearField("dim")
    for value in dims:
        shape.dim.add().dim_value = value


def _describe(vi: onnx.ValueInfoProto) -> str:
    dims = vi.type.tensor_type.shape.dim
    return (
        "["
        + ", ".join(str(d.dim_value) if d.HasField("dim_value") else (d.dim_param or "?") for d in dims)
        + "]"
    )


def _copy(model: onnx.ModelProto) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy
