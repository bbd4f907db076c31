"""The frontend: loading, static shapes, shape-arithmetic folding, support checks, import.
Numbers come from onnxruntime on the same model (tests/e2e covers the zoo)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler import compat
from vpuc.compiler.errors import FrontendError
from vpuc.compiler.frontend import import_model, parse_input_shape
from vpuc.compiler.frontend.shapes import fix_input_shapes
from vpuc.examples import zoo


def _conv_model(batch="N", extra_nodes=(), opsets=(("", 17),)) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv"), *extra_nodes]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 4, 8, 8])],
        [weight],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])


def test_parse_input_shape():
    assert parse_input_shape("x=1x3x224x224") == ("x", (1, 3, 224, 224))
    assert parse_input_shape("input.1=2,3") == ("input.1", (2, 3))
    for bad in ("x", "x=", "x=1xx2", "x=1x-2", "=1x2", "x=0x3"):
        with pytest.raises(FrontendError, match="--input-shape"):
            parse_input_shape(bad)


def test_symbolic_dim_needs_input_shape():
    with pytest.raises(FrontendError, match=r"input 'x' has a symbolic dim 'N' at axis 0.*--input-shape x="):
        import_model(_conv_model())
    imported = import_model(_conv_model(), {"x": (2, 3, 8, 8)})
    assert imported.inputs[0].shape == (2, 3, 8, 8)
    assert imported.outputs[0].shape == (2, 4, 8, 8)


@pytest.mark.parametrize(
    "shapes,message",
    [
        ({"z": (1, 3, 8, 8)}, r"--input-shape names 'z', not an input \(inputs: x\)"),
        ({"x": (1, 3, 8)}, r"rank 3 but the model declares rank 4"),
        ({"x": (1, 3, 9, 8)}, r"axis 2 is 9 but the model fixes it to 8"),
    ],
)
def test_bad_input_shapes(shapes, message):
    with pytest.raises(FrontendError, match=message):
        import_model(_conv_model(), shapes)


def test_every_unsupported_node_is_reported_at_once():
    extra = [
        helper.make_node("Relu", ["y"], ["r"], name="relu"),
        helper.make_node("Foo", ["r"], ["f"], name="custom_foo", domain="com.example"),
        helper.make_node("Celu", ["f"], ["d"], name="celu_1"),
        helper.make_node("Celu", ["d"], ["y2"], name="celu_2"),
    ]
    model = _conv_model(batch=1, extra_nodes=extra, opsets=(("", 17), ("com.example", 1)))
    model.graph.output[0].name = "y2"
    with pytest.raises(FrontendError) as info:
        import_model(model)
    message = str(info.value)
    assert "3 unsupported node(s)" in message
    for expected in ("'custom_foo' (com.example.Foo)", "'celu_1' (Celu)", "'celu_2' (Celu)"):
        assert expected in message
    assert "relu" not in message and "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(FrontendError, match=r"nope\.onnx: no such file"):
        import_model(tmp_path / "nope.onnx")


def test_not_onnx(tmp_path):
    path = tmp_path / "notes.onnx"
    path.write_text("this is not a protobuf, just some text\n" * 20)
    with pytest.raises(FrontendError, match=r"notes\.onnx: not an ONNX model"):
        import_model(path)


def test_truncated_file(tmp_path):
    data = zoo.build("tinyconvnet").SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(FrontendError, match=r"cut\.onnx: "):
        import_model(path)


def test_checker_error_names_the_node(tmp_path):
    model = _conv_model(batch=1, extra_nodes=[helper.make_node("Relu", ["ghost"], ["r"], name="bad_relu")])
    path = tmp_path / "invalid.onnx"
    onnx.save(model, path)
    with pytest.raises(FrontendError, match=r"invalid\.onnx: invalid ONNX graph: .*bad_relu"):
        import_model(path)


def test_external_data(tmp_path):
    model = zoo.build("tinyconvnet")
    path = tmp_path / "ext" / "model.onnx"
    path.parent.mkdir()
    onnx.save(model, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    assert (path.parent / "weights.bin").stat().st_size > 1000
    imported = import_model(path)
    assert imported.outputs[0].shape == (1, 4)
    (path.parent / "weights.bin").unlink()
    with pytest.raises(FrontendError, match=r"model\.onnx: .*weights\.bin"):
        import_model(path)


def test_folding_leaves_float_compute_alone():
    """BN folding belongs to the graph passes: the frontend must not pre-empt it."""
    imported = import_model(zoo.build("tinyconvnet"))
    ops = [n.op_type for n in imported.onnx_model.graph.node]
    assert ops.count("BatchNormalization") == 4
    assert imported.folded_nodes == []


@pytest.mark.parametrize(
    "fixture,raw_error",
    [
        ("torch_upsample_pad", "Dynamic pads are not supported"),
        ("torch_transformer_block", "must have the same datatype"),
        ("paddle_style", "cannot handle ShapeExpr"),
    ],
)
def test_exports_need_and_get_shape_folding(fixtures_dir, fixture, raw_error):
    """These exports compute shapes or parameters at run time: TVM's importer alone fails on
    them with static input shapes; after the fold pre-pass they import (e2e checks numbers)."""
    model = onnx.load(fixtures_dir / "exports" / f"{fixture}.onnx")
    data = np.load(fixtures_dir / "exports" / f"{fixture}.npz")
    shapes = {vi.name: data[vi.name].shape for vi in model.graph.input}
    static = fix_input_shapes(model, fixture, shapes)
    with pytest.raises(Exception, match=raw_error):
        compat.relax_from_onnx(
            static, {k: list(v) for k, v in shapes.items()}, dict.fromkeys(shapes, "float32")
        )
    imported = import_model(model, shapes)
    left = {n.op_type for n in imported.onnx_model.graph.node}
    assert imported.folded_nodes and not {"Shape", "Size", "Constant"} & left
