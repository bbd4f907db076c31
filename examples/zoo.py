"""The example model zoo: small ONNX models built in code, for demos, tests and benches.

Sits in front of the whole pipeline: `vpuc` compiles these models (ONNX -> Relax -> VPU),
the tests run them through onnxruntime as the reference, and the benches report on them.
Models are built with `onnx.helper` from seeded random weights, so nothing is
downloaded and every build gives the same bytes. The builders live in `zoo_cnns.py`
and `zoo_transformer.py`; this module names them and writes them out.

    from vpuc.examples import zoo
    model = zoo.build("resnet_mini")
    feeds = zoo.sample_inputs(model)
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from vpuc.examples.zoo_cnns import mobilenet_mini, opzoonet, resnet_mini, tinyconvnet
from vpuc.examples.zoo_transformer import transformer_encoder

MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "tinyconvnet": tinyconvnet,
    "opzoonet": opzoonet,
    "resnet_mini": resnet_mini,
    "mobilenet_mini": mobilenet_mini,
    "transformer_encoder": transformer_encoder,
}


def build(name: str) -> onnx.ModelProto:
    """Builds the zoo model called `name`; a KeyError lists the known names."""
    try:
        builder = MODELS[name]
    except KeyError:
        known = ", ".join(MODELS)
        raise KeyError(f"unknown zoo model {name!r}; known models: {known}") from None
    return builder()


def write_zoo(outdir: str | Path, names: list[str] | None = None) -> list[Path]:
    """Writes `<name>.onnx` for each named model (all of them by default) into `outdir`."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in names if names is not None else list(MODELS):
        path = outdir / f"{name}.onnx"
        onnx.save_model(build(name), path)
        written.append(path)
    return written


def _concrete_shape(value_info: onnx.ValueInfoProto) -> tuple[int, ...]:
    """The input's shape with symbolic or unknown dimensions (e.g. "batch_size") set to 1."""
    dims = value_info.type.tensor_type.shape.dim
    return tuple(dim.dim_value if dim.HasField("dim_value") else 1 for dim in dims)


def _graph_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are fed at run time (not initializers with a default value)."""
    initializer_names = {tensor.name for tensor in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in initializer_names]


def sample_inputs(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Seeded feeds for a model's inputs: standard normal for floats, zeros otherwise."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for value_info in _graph_inputs(model):
        dtype = helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)
        shape = _concrete_shape(value_info)
        if np.issubdtype(dtype, np.floating):
            feeds[value_info.name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[value_info.name] = np.zeros(shape, dtype=dtype)
    return feeds
