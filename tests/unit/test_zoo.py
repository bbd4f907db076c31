"""Tests for the example model zoo (examples/zoo.py) and the exporter fixtures.

The zoo models and the files in tests/fixtures/exports are the inputs the rest of the
toolchain is tested on, so these tests pin what they promise: valid ONNX that
onnxruntime runs, the documented shapes, live (finite, non-constant) outputs, and, for
the fixtures, the run-time shape constructs real exporters write.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from vpuc.examples import zoo

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "exports"
VPU_NATIVE_OPS = {"Conv", "Relu", "MaxPool", "Add", "Gemm", "Flatten", "Reshape", "Concat", "Clip"}

# name -> (input name and shape, output name and shape), as the builders' docstrings say
DOCUMENTED_SHAPES = {
    "tinyconvnet": ({"input": [1, 3, 16, 16]}, {"logits": [1, 4]}),
    "opzoonet": ({"input": [1, 3, 16, 16]}, {"probs": [1, 4]}),
    "resnet_mini": ({"input": [1, 3, 32, 32]}, {"logits": [1, 10]}),
    "mobilenet_mini": ({"input": [1, 3, 32, 32]}, {"logits": [1, 10]}),
    "transformer_encoder": ({"tokens": [1, 16, 32]}, {"hidden": [1, 16, 32]}),
}

# fixture -> op types it must keep: the exporter constructs the frontend is tested on
FIXTURE_CONSTRUCTS = {
    "torch_small_cnn": {"Shape", "Gather", "Unsqueeze", "Concat", "Reshape", "Constant"},
    "torch_upsample_pad": {"Resize", "Pad", "Expand", "Shape", "Concat", "ConstantOfShape"},
    "torch_transformer_block": {"Shape", "Gather", "Concat", "Reshape", "LayerNormalization"},
    "tf2onnx_style": {"Transpose", "Constant", "Shape", "Slice", "Concat", "Reshape"},
    "paddle_style": {"Pad", "Concat", "ReduceMean", "Clip", "Expand", "Shape"},
    "constant_weights": {"Constant", "Conv", "Squeeze"},
}


@functools.cache
def _built(name: str) -> onnx.ModelProto:
    return zoo.build(name)


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _static_shape(value_info: onnx.ValueInfoProto) -> list[int]:
    return [dim.dim_value for dim in value_info.type.tensor_type.shape.dim]


# -- the zoo ------------------------------------------------------------------------------


def test_zoo_lists_the_models_in_order() -> None:
    assert list(zoo.MODELS) == list(DOCUMENTED_SHAPES)


@pytest.mark.parametrize("name", list(DOCUMENTED_SHAPES))
def test_zoo_model_passes_the_full_checker(name: str) -> None:
    onnx.checker.check_model(_built(name), full_check=True)


@pytest.mark.parametrize("name", list(DOCUMENTED_SHAPES))
def test_zoo_model_has_documented_graph_shapes(name: str) -> None:
    model = _built(name)
    inputs, outputs = DOCUMENTED_SHAPES[name]
    assert {vi.name: _static_shape(vi) for vi in model.graph.input} == inputs
    assert {vi.name: _static_shape(vi) for vi in model.graph.output} == outputs


@pytest.mark.parametrize("name", list(DOCUMENTED_SHAPES))
def test_zoo_model_runs_with_live_outputs(name: str) -> None:
    model = _built(name)
    outputs = _run(model, zoo.sample_inputs(model))
    expected_shapes = list(DOCUMENTED_SHAPES[name][1].values())
    assert [list(out.shape) for out in outputs] == expected_shapes
    for out in outputs:
        assert np.isfinite(out).all()
        assert np.ptp(out) > 1e-3, "output is (nearly) constant"


@pytest.mark.parametrize("name", list(DOCUMENTED_SHAPES))
def test_zoo_node_names_are_set_and_unique(name: str) -> None:
    names = [node.name for node in _built(name).graph.node]
    assert all(names)
    assert len(names) == len(set(names))


def test_tinyconvnet_trunk_ends_at_32x4x4() -> None:
    inferred = onnx.shape_inference.infer_shapes(_built("tinyconvnet"), strict_mode=True)
    trunk = {vi.name: vi for vi in inferred.graph.value_info}["stage4/pool"]
    assert _static_shape(trunk) == [1, 32, 4, 4]


def test_opzoonet_is_mostly_ops_outside_the_vpu_set() -> None:
    op_types = [node.op_type for node in _built("opzoonet").graph.node]
    foreign = [op for op in op_types if op not in VPU_NATIVE_OPS]
    assert len(foreign) > len(op_types) / 2
    assert {"Sigmoid", "LeakyRelu", "Mul", "AveragePool", "ReduceMean", "MatMul", "Softmax"} <= set(op_types)


def test_zoo_builds_are_reproducible() -> None:
    assert zoo.build("tinyconvnet").SerializeToString() == _built("tinyconvnet").SerializeToString()


def test_write_zoo_writes_loadable_files(tmp_path: Path) -> None:
    paths = zoo.write_zoo(tmp_path / "zoo")
    assert [path.name for path in paths] == [f"{name}.onnx" for name in zoo.MODELS]
    for path in paths:
        onnx.checker.check_model(onnx.load(path))


def test_write_zoo_writes_only_the_named_models(tmp_path: Path) -> None:
    paths = zoo.write_zoo(str(tmp_path), names=["resnet_mini"])
    assert paths == [tmp_path / "resnet_mini.onnx"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["resnet_mini.onnx"]


def test_build_unknown_name_lists_the_known_models() -> None:
    with pytest.raises(KeyError) as error:
        zoo.build("nope")
    message = str(error.value)
    assert "nope" in message
    assert all(name in message for name in zoo.MODELS)


def test_sample_inputs_are_seeded_and_typed() -> None:
    ids = helper.make_tensor_value_info("ids", TensorProto.INT64, ["batch_size", 5])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch_size", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch_size", 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [ids, x], [y])
    model = helper.make_model(graph)
    feeds = zoo.sample_inputs(model, seed=3)
    assert feeds["ids"].dtype == np.int64 and feeds["ids"].shape == (1, 5)
    assert not feeds["ids"].any()
    assert feeds["x"].dtype == np.float32 and feeds["x"].shape == (1, 3)
    np.testing.assert_array_equal(feeds["x"], zoo.sample_inputs(model, seed=3)["x"])
    assert not np.array_equal(feeds["x"], zoo.sample_inputs(model, seed=4)["x"])


# -- exporter fixtures --------------------------------------------------------------------


def test_every_fixture_is_listed() -> None:
    on_disk = sorted(path.stem for path in FIXTURE_DIR.glob("*.onnx"))
    assert on_disk == sorted(FIXTURE_CONSTRUCTS)


@pytest.mark.parametrize("name", sorted(FIXTURE_CONSTRUCTS))
def test_fixture_matches_its_recorded_output(name: str) -> None:
    path = FIXTURE_DIR / f"{name}.onnx"
    assert path.stat().st_size < 200_000
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    with np.load(FIXTURE_DIR / f"{name}.npz") as recorded:
        feeds = {arg.name: recorded[arg.name] for arg in session.get_inputs()}
        expected = [recorded[arg.name] for arg in session.get_outputs()]
    for actual, reference in zip(session.run(None, feeds), expected, strict=True):
        np.testing.assert_allclose(actual, reference, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", sorted(FIXTURE_CONSTRUCTS))
def test_fixture_keeps_its_exporter_constructs(name: str) -> None:
    model = onnx.load(FIXTURE_DIR / f"{name}.onnx")
    onnx.checker.check_model(model, full_check=True)
    assert FIXTURE_CONSTRUCTS[name] <= {node.op_type for node in model.graph.node}
    batch_dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert batch_dim.dim_param, "fixtures keep a symbolic batch dimension"
