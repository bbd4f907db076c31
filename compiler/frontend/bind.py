"""Frontend step: `--bind-input NAME=VALUE` makes a graph input a constant.

A model that branches on an input known before deployment (a voice-activity detector on its
sample rate, a detector on a score threshold) compiles to one static graph once that input
is a constant: the fold step then folds what depends on it, `If` nodes included. The input
leaves the compiled model's inputs.

    NAME=16000          one value (broadcast to the input's static shape)
    NAME=0.5,0.25       the values in order (as many as the shape holds)
    NAME=values.npy     an array of the input's shape

Values are cast to the input's dtype; a value the dtype cannot hold exactly (1.5 for an
integer input, 300 for uint8) is an error naming the input.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vpuc.compiler.errors import FrontendError

_SPEC = re.compile(r"^(?P<name>[^=]+)=(?P<value>.+)$")


def parse_bind_input(spec: str) -> tuple[str, str]:
    """`name=value` -> (name, value text); the value is read against the model later."""
    match = _SPEC.match(spec.strip())
    if not match:
        raise FrontendError(f"--bind-input '{spec}': expected NAME=VALUE such as sr=16000 or x=values.npy")
    return match["name"], match["value"]


def bind_inputs(model: onnx.ModelProto, name: str, bound: dict[str, str]) -> onnx.ModelProto:
    """A copy of `model` with each bound input replaced by an initializer."""
    if not bound:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    initializers = {t.name for t in copy.graph.initializer}
    inputs = {vi.name: vi for vi in copy.graph.input if vi.name not in initializers}
    for input_name, text in bound.items():
        if input_name not in inputs:
            known = ", ".join(inputs) or "none"
            raise FrontendError(f"{name}: --bind-input names '{input_name}', not an input (inputs: {known})")
        value = _value(name, inputs[input_name], text)
        copy.graph.initializer.append(numpy_helper.from_array(value, input_name))
    kept = [vi for vi in copy.graph.input if vi.name not in bound]
    del copy.graph.input[:]
    copy.graph.input.extend(kept)
    return copy


def _value(name: str, vi: onnx.ValueInfoProto, text: str) -> np.ndarray:
    tensor_type = vi.type.tensor_type
    dtype = np.dtype(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
    dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor_type.shape.dim]
    where = f"{name}: --bind-input {vi.name}"
    raw = _read(where, text)
    value = raw.astype(dtype)
    if not np.array_equal(value.astype(np.float64), raw.astype(np.float64), equal_nan=True):
        raise FrontendError(f"{where}: {text} does not fit the input's dtype {dtype.name} exactly")
    if None in dims:  # a symbolic dim: the value gives the shape (rank must agree)
        if raw.ndim != len(dims) and not (raw.size == 1 and len(dims) == 0):
            raise FrontendError(
                f"{where}: the input has rank {len(dims)} with symbolic dims; give a .npy of that rank"
            )
        return value.reshape(raw.shape if raw.ndim == len(dims) else ())
    shape = tuple(dims)
    if value.size == 1:
        return np.full(shape, value.reshape(-1)[0], dtype)
    if value.size != int(np.prod(shape, dtype=np.int64)):
        raise FrontendError(f"{where}: {value.size} values for an input of shape {list(shape)}")
    return value.reshape(shape)


def _read(where: str, text: str) -> np.ndarray:
    if text.endswith(".npy"):
        path = Path(text)
        if not path.is_file():
            raise FrontendError(f"{where}: no such file {text}")
        try:
            return np.load(path, allow_pickle=False)
        except (ValueError, OSError) as exc:
            raise FrontendError(f"{where}: cannot read {text} ({exc})") from None
    try:
        numbers = [float(part) for part in text.split(",")]
    except ValueError:
        raise FrontendError(
            f"{where}: '{text}' is not a number, a comma-separated list or a .npy file"
        ) from None
    return np.array(numbers[0] if len(numbers) == 1 else numbers)
