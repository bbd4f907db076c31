"""Bad input through the CLI: exit code 2, one line on stderr naming the culprit, no
traceback, and no output file left behind."""

from __future__ import annotations

import json
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.compiler import compile_model
from vpuc.examples import zoo


def _assert_user_error(result, *fragments):
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def _dynamic_model(path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _unsupported_model(path):
    graph = helper.make_graph(
        [
            helper.make_node("Celu", ["x"], ["a"], name="celu_a"),
            helper.make_node("Relu", ["a"], ["b"], name="relu"),
            helper.make_node("Celu", ["b"], ["y"], name="celu_b"),
        ],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _invalid_model(path):
    graph = helper.make_graph(
        [helper.make_node("Relu", ["nowhere"], ["y"], name="lost_relu")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def _make_bad_model(kind, path):
    if kind == "missing":
        return
    if kind == "not_onnx":
        path.write_text("name,value\nx,1\n" * 50)
    elif kind == "truncated":
        data = zoo.build("resnet_mini").SerializeToString()
        path.write_bytes(data[: len(data) // 3])
    elif kind == "invalid":
        _invalid_model(path)
    elif kind == "unsupported":
        _unsupported_model(path)
    elif kind == "dynamic":
        _dynamic_model(path)


@pytest.mark.parametrize(
    "kind,fragments",
    [
        ("missing", ["model.onnx: no such file"]),
        ("not_onnx", ["model.onnx: not an ONNX model"]),
        ("truncated", ["model.onnx"]),
        ("invalid", ["model.onnx: invalid ONNX graph", "lost_relu"]),
        ("unsupported", ["2 unsupported node(s)", "'celu_a' (Celu)", "'celu_b' (Celu)"]),
        ("dynamic", ["input 'x' has a symbolic dim 'batch'", "--input-shape x="]),
    ],
)
def test_compile_rejects_bad_models(vpuc, tmp_path, kind, fragments):
    model = tmp_path / "model.onnx"
    _make_bad_model(kind, model)
    out = tmp_path / "out.vpub"
    _assert_user_error(vpuc("compile", model, "--target", "cpu", "-o", out), *fragments)
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ([] if kind == "missing" else ["model.onnx"])


def test_dynamic_model_compiles_with_input_shape(vpuc, tmp_path):
    _dynamic_model(tmp_path / "model.onnx")
    result = vpuc("compile", tmp_path / "model.onnx", "--input-shape", "x=3x4", "-o", tmp_path / "m.vpub")
    assert result.returncode == 0, result.stderr
    ran = vpuc("run", tmp_path / "m.vpub", "--check", tmp_path / "model.onnx", "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["outputs"][0]["shape"] == [3, 4]


def test_unknown_target(vpuc, zoo_dir, tmp_path):
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "--target", "npu9", "-o", tmp_path / "o.vpub")
    _assert_user_error(result, "unknown target 'npu9'")
    assert not (tmp_path / "o.vpub").exists()


@pytest.mark.parametrize(
    ("line", "key"),
    [
        ("sram_bytes = -1", "hardware.sram_bytes"),
        ('issue_order = "sometimes"', "hardware.issue_order"),
        ("mac_fill_cycles = -2", "hardware.mac_fill_cycles"),
        ('softmax_passes_in = "flash"', "hardware.softmax_passes_in"),
    ],
)
def test_bad_target_file_names_key(vpuc, zoo_dir, tmp_path, line, key):
    bad = tmp_path / "t.toml"
    bad.write_text(f'[target]\nname = "t"\ninherit = "vpu"\n[hardware]\n{line}\n')
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "--target", bad, "-o", tmp_path / "o.vpub")
    _assert_user_error(result, "t.toml", key)


@pytest.fixture(scope="module")
def tiny_artifact(tmp_path_factory, zoo_dir):
    path = tmp_path_factory.mktemp("artifact") / "tiny.vpub"
    return compile_model(zoo_dir / "tinyconvnet.onnx", target="cpu").save(path)


@pytest.mark.parametrize(
    "arrays,fragments",
    [
        ({}, ["input 'input' is missing"]),
        ({"input": np.zeros((1, 3, 16, 15), np.float32)}, ["'input' has shape [1, 3, 16, 15], expected [1, 3, 16, 16]"]),
        ({"input": np.zeros((1, 3, 16, 16), np.float64)}, ["'input' has dtype float64, expected float32"]),
        ({"input": np.zeros((1, 3, 16, 16), np.float32), "extra": np.zeros(1)}, ["'extra' is not an input"]),
    ],
)  # fmt: skip
def test_run_rejects_bad_inputs(vpuc, tiny_artifact, tmp_path, arrays, fragments):
    np.savez(tmp_path / "in.npz", **arrays)
    out = tmp_path / "out.npz"
    result = vpuc("run", tiny_artifact, "--inputs", tmp_path / "in.npz", "--outputs", out)
    _assert_user_error(result, "in.npz", *fragments)
    assert not out.exists()


def _tamper(source, dest, name, change):
    with zipfile.ZipFile(source) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members[name] = change(members[name])
    with zipfile.ZipFile(dest, "w") as zf:
        for n, data in members.items():
            zf.writestr(n, data)


def test_run_rejects_tampered_artifact(vpuc, tiny_artifact, tmp_path):
    bad = tmp_path / "bad.vpub"
    _tamper(tiny_artifact, bad, "report.json", lambda data: data.replace(b"tinyconvnet", b"tinyconvNET"))
    _assert_user_error(vpuc("run", bad), "bad.vpub", "'report.json' fails its sha256 check")


def test_run_rejects_unknown_format_version(vpuc, tiny_artifact, tmp_path):
    bad = tmp_path / "future.vpub"

    def bump(data):
        manifest = json.loads(data)
        manifest["format_version"] = 99
        return json.dumps(manifest).encode()

    _tamper(tiny_artifact, bad, "manifest.json", bump)
    _assert_user_error(vpuc("run", bad), "future.vpub", "format version 99 is not supported")


def test_run_rejects_non_artifact(vpuc, tmp_path):
    (tmp_path / "x.vpub").write_text("hello")
    _assert_user_error(vpuc("run", tmp_path / "x.vpub"), "x.vpub: not a .vpub artifact")
