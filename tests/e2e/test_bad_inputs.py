"""Every bad input a new user tried answered cleanly (issue 13): one line naming the file,
node, key or flag; exit 2 for the user's mistakes, 3 only for vpuc's; no traceback; no
partial file; nothing the user had is lost. The CLI runs in this process (cli.main, as the
`vpuc` script calls it) except where the process itself is the point (a closed pipe);
tests/e2e/test_cli_errors.py runs the older cases as separate processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.compiler import cli, compile_model


@pytest.fixture
def vpuc(capsys):
    """The CLI in this process (what `vpuc ARGS` does, without a Python start per call):
    `vpuc("run", path)` -> CompletedProcess with the exit code, stdout and stderr."""

    def run(*args):
        code = cli.main([str(a) for a in args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return run


def _one_line(result, code: int, *fragments: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _save(path, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _relu(path, shape=(1, 4)):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    return _save(path, [helper.make_node("Relu", ["x"], ["y"], name="relu")], [x], [y])


def _two_inputs(path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    return _save(path, [helper.make_node("Add", ["x", "z"], ["y"], name="add")], [x, z], [y])


@pytest.fixture(scope="module")
def relu_artifact(tmp_path_factory):
    folder = tmp_path_factory.mktemp("relu")
    model = _relu(folder / "relu.onnx")
    return compile_model(model, "cpu").save(folder / "relu.vpub"), model


# --- compile: outputs that would destroy what the user has ------------------------------------


def test_compile_onto_the_model_itself_is_refused(vpuc, tmp_path):
    model = _relu(tmp_path / "M.onnx")
    before = model.read_bytes()
    _one_line(vpuc("compile", model, "-o", model), 2, "M.onnx", "names the model itself")
    assert model.read_bytes() == before


def test_compile_onto_another_file_is_refused(vpuc, tmp_path):
    model = _relu(tmp_path / "M.onnx")
    other = tmp_path / "notes.txt"
    other.write_text("mine")
    _one_line(vpuc("compile", model, "-o", other), 2, "notes.txt", "not a .vpub artifact")
    assert other.read_text() == "mine"


def test_compile_over_an_older_artifact_is_fine(vpuc, tmp_path, relu_artifact):
    artifact, model = relu_artifact
    target = tmp_path / "old.vpub"
    target.write_bytes(artifact.read_bytes())
    assert vpuc("compile", model, "-o", target).returncode == 0


# --- compile: options ------------------------------------------------------------------------


def test_input_shape_given_twice_differently(vpuc, tmp_path):
    model = tmp_path / "m.onnx"
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])
    _save(model, [helper.make_node("Relu", ["x"], ["y"])], [x], [y])
    out = tmp_path / "m.vpub"
    result = vpuc("compile", model, "--input-shape", "x=2x4", "--input-shape", "x=3x4", "-o", out)
    _one_line(result, 2, "--input-shape x: given twice, as 2x4 and 3x4")
    assert not out.exists()
    same = vpuc("compile", model, "--input-shape", "x=2x4", "--input-shape", "x=2x4", "-o", out)
    assert same.returncode == 0, same.stderr


@pytest.mark.parametrize(
    "flag",
    [["--calib", "c.npz"], ["--calib-synthetic", "8"], ["--calib-method", "minmax"], ["--adaround"],
     ["--equalize"], ["--keep-float", "r"]],
)  # fmt: skip
def test_calibration_options_with_a_cpu_target(vpuc, tmp_path, flag):
    model = _relu(tmp_path / "m.onnx")
    _one_line(
        vpuc("compile", model, "--target", "cpu", *flag, "-o", tmp_path / "m.vpub"), 2, flag[0], "has no VPU"
    )
    assert not (tmp_path / "m.vpub").exists()


@pytest.mark.parametrize(
    "op,inputs,outputs,node,fragment",
    [
        ("Unique", [("x", [6])], [("y", ["n"])], "uniq", "node 'uniq' (Unique) gives 'y'"),
        (
            "NonMaxSuppression",
            [("b", [1, 6, 4]), ("s", [1, 1, 6])],
            [("y", ["n", 3])],
            "nms",
            "node 'nms' (NonMaxSuppression) gives 'y'",
        ),
    ],
)  # fmt: skip
def test_data_dependent_shapes_name_the_node(vpuc, tmp_path, op, inputs, outputs, node, fragment):
    model = tmp_path / "m.onnx"
    dtype = TensorProto.INT64 if op == "NonMaxSuppression" else TensorProto.FLOAT
    _save(
        model,
        [helper.make_node(op, [n for n, _ in inputs], [n for n, _ in outputs], name=node)],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, dtype, s) for n, s in outputs],
    )
    _one_line(vpuc("compile", model, "-o", tmp_path / "m.vpub"), 2, fragment, "known only at run time")


# --- run: inputs -----------------------------------------------------------------------------


def test_npy_inputs_for_a_one_input_model(vpuc, tmp_path, relu_artifact):
    artifact, _ = relu_artifact
    x = np.array([[-1.0, 2.0, -3.0, 4.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    result = vpuc("run", artifact, "--inputs", tmp_path / "x.npy", "--outputs", tmp_path / "y.npz")
    assert result.returncode == 0, result.stderr
    with np.load(tmp_path / "y.npz") as out:
        np.testing.assert_array_equal(out["y"], np.maximum(x, 0))


def test_npy_inputs_for_a_two_input_model(vpuc, tmp_path):
    artifact = compile_model(_two_inputs(tmp_path / "m.onnx"), "cpu").save(tmp_path / "m.vpub")
    np.save(tmp_path / "x.npy", np.zeros((1, 4), np.float32))
    _one_line(vpuc("run", artifact, "--inputs", tmp_path / "x.npy"), 2, "x.npy", "2 inputs (x, z)", ".npz")


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"x,y\n1,2\n", "not an .npz file"),
        (b"", "not an .npz file"),
        (b"PK\x03\x04garbage", "not a readable .npz file"),
    ],
    ids=["text", "empty", "broken zip"],
)
def test_inputs_that_are_not_npz(vpuc, tmp_path, relu_artifact, content, fragment):
    artifact, _ = relu_artifact
    (tmp_path / "in.npz").write_bytes(content)
    line = _one_line(vpuc("run", artifact, "--inputs", tmp_path / "in.npz"), 2, "in.npz", fragment)
    assert "pickle" not in line


def test_inputs_holding_python_objects(vpuc, tmp_path, relu_artifact):
    artifact, _ = relu_artifact
    np.savez(tmp_path / "in.npz", x=np.array([{"a": 1}], dtype=object))
    _one_line(vpuc("run", artifact, "--inputs", tmp_path / "in.npz"), 2, "in.npz", "Python objects")


def test_zero_d_inputs_stay_zero_d(vpuc, tmp_path):
    """`vpuc run` once turned every 0-d input into shape (1,) (runtime/inputs.py)."""
    model = tmp_path / "clip.onnx"
    vi = helper.make_tensor_value_info
    _save(
        model,
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [vi("x", TensorProto.FLOAT, [3]), vi("lo", TensorProto.FLOAT, []), vi("hi", TensorProto.FLOAT, [])],
        [vi("y", TensorProto.FLOAT, [3])],
    )
    assert vpuc("compile", model, "-o", tmp_path / "c.vpub").returncode == 0
    np.savez(tmp_path / "in.npz", x=np.array([-2, 0.5, 3], np.float32), lo=np.float32(-1), hi=np.float32(1))
    result = vpuc("run", tmp_path / "c.vpub", "--inputs", tmp_path / "in.npz", "--check", model, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["check"]["passed"]


@pytest.mark.parametrize("value", ["-1", "nan", "inf"])
def test_bad_tolerance(vpuc, relu_artifact, value):
    artifact, model = relu_artifact
    _one_line(vpuc("run", artifact, "--check", model, "--tolerance", value), 2, "--tolerance")


@pytest.mark.parametrize("flag", ["--check", "--float-model"])
@pytest.mark.parametrize(
    "kind, fragment",
    [("missing", "no such file"), ("folder", "is a directory"), ("artifact", "not an ONNX model")],
)
def test_check_model_that_is_not_an_onnx_file(vpuc, tmp_path, relu_artifact, flag, kind, fragment):
    """`--check MODEL` and `--float-model F` named a missing file, a folder or the artifact
    itself: a one-line user error naming the flag and the path (was exit 3, FileNotFoundError)."""
    artifact, model = relu_artifact
    bad = {"missing": tmp_path / "nothere.onnx", "folder": tmp_path, "artifact": artifact}[kind]
    args = ["--check", bad] if flag == "--check" else ["--check", model, "--float-model", bad]
    _one_line(vpuc("run", artifact, *args), 2, f"{flag}: {bad}", fragment)


def test_outputs_onto_the_inputs_file_is_refused(vpuc, tmp_path, relu_artifact):
    artifact, _ = relu_artifact
    np.savez(tmp_path / "in.npz", x=np.ones((1, 4), np.float32))
    before = (tmp_path / "in.npz").read_bytes()
    result = vpuc("run", artifact, "--inputs", tmp_path / "in.npz", "--outputs", tmp_path / "in.npz")
    _one_line(result, 2, "--outputs names --inputs's file")
    assert (tmp_path / "in.npz").read_bytes() == before


# --- run: artifacts --------------------------------------------------------------------------


def _edit_manifest(source, dest, change):
    with zipfile.ZipFile(source) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    members["manifest.json"] = change(json.loads(members["manifest.json"]))
    with zipfile.ZipFile(dest, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)


@pytest.mark.parametrize(
    "change",
    [
        lambda m: json.dumps({**m, "inputs": [{**m["inputs"][0], "shape": [1, 5]}]}).encode(),
        lambda m: json.dumps({**m, "inputs": [{"name": "x"}]}).encode(),
        lambda m: json.dumps({**m, "outputs": "y"}).encode(),
        lambda m: b"[1, 2]",
    ],
    ids=["shape", "missing keys", "wrong type", "not an object"],
)
def test_hand_edited_manifest(vpuc, tmp_path, relu_artifact, change):
    artifact, _ = relu_artifact
    edited = tmp_path / "edited.vpub"
    _edit_manifest(artifact, edited, change)
    _one_line(vpuc("run", edited), 2, "edited.vpub", "manifest.json")


# --- zoo -------------------------------------------------------------------------------------


def test_zoo_onto_an_existing_file(vpuc, tmp_path):
    (tmp_path / "zoo").write_text("mine")
    _one_line(
        vpuc("zoo", tmp_path / "zoo", "--models", "tinyconvnet"), 2, "zoo: exists and is not a directory"
    )
    assert (tmp_path / "zoo").read_text() == "mine"


def test_zoo_into_a_folder_that_cannot_be_made(vpuc, tmp_path):
    (tmp_path / "file").write_text("mine")
    _one_line(vpuc("zoo", tmp_path / "file" / "zoo"), 2, "cannot create the folder")


# --- output closed early (a real process: the pipe is the point) --------------------------


@pytest.mark.parametrize("args", [["targets", "--json"], ["targets"], ["--help"]])
def test_stdout_closed_early(args):
    """`vpuc ... | head -1`: the reader is gone before vpuc writes; vpuc ends quietly (141,
    as SIGPIPE ends other tools), never with an internal error."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    result = subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(write_end)
    assert result.returncode in (0, cli.EXIT_BROKEN_PIPE), result.stderr
    assert "internal error" not in result.stderr and "Traceback" not in result.stderr


# --- vpuc's own failures are exit 3 ----------------------------------------------------------


def test_tvm_failing_in_the_host_build_is_a_vpuc_bug(tmp_path, monkeypatch, vpuc):
    """A model the frontend and the passes accepted that TVM then fails to build is vpuc's
    fault: exit 3 naming the stage, not a user error telling them to change target."""
    import tvm
    from tvm import relax

    def broken(mod, *args, **kwargs):
        raise tvm.error.InternalError("Check failed: something inside TVM")

    monkeypatch.setattr(relax, "build", broken)  # compiler/host/build.py calls relax.build,
    monkeypatch.setattr(tvm.tirx, "build", broken)  # or, on two cores, host/split_build.py tirx.build
    model = _relu(tmp_path / "m.onnx")
    _one_line(
        vpuc("compile", model, "-o", tmp_path / "m.vpub"), 3, "internal error", "host build", "bug in vpuc"
    )
    assert not (tmp_path / "m.vpub").exists()


# --- asm / disasm ----------------------------------------------------------------------------


def test_disasm_of_an_empty_file(vpuc, tmp_path):
    (tmp_path / "p.bin").write_bytes(b"")
    _one_line(vpuc("disasm", tmp_path / "p.bin"), 2, "p.bin: empty file")


def test_asm_of_a_program_without_end(vpuc, tmp_path):
    (tmp_path / "p.s").write_text("# a load and nothing after it\nload dram=0 sram=0 row_bytes=16\n")
    _one_line(vpuc("asm", tmp_path / "p.s", "-o", tmp_path / "p.bin"), 2, "p.s:2:", "does not end with 'end'")
    assert not (tmp_path / "p.bin").exists()


def test_asm_onto_its_own_source(vpuc, tmp_path):
    source = tmp_path / "p.s"
    source.write_text("load dram=0 sram=0 row_bytes=16\nend\n")
    _one_line(vpuc("asm", source, "-o", source), 2, "names the program itself")
    assert source.read_text().startswith("load")
    assert vpuc("asm", source, "-o", tmp_path / "p.bin").returncode == 0
    assert vpuc("disasm", tmp_path / "p.bin").returncode == 0


def test_tvm_failing_in_the_partitioner_is_a_vpuc_bug(tmp_path, monkeypatch, vpuc, zoo_dir):
    import tvm

    def broken(*args, **kwargs):
        raise tvm.error.InternalError("Check failed: something inside TVM")

    monkeypatch.setattr(tvm.relax.transform, "FuseOpsByPattern", broken)  # only the partitioner calls it
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "--target", "vpu", "--calib-synthetic", "2",
                  "-o", tmp_path / "m.vpub")  # fmt: skip
    _one_line(result, 3, "internal error", "VPU partitioning failed inside TVM", "bug in vpuc")
    assert not (tmp_path / "m.vpub").exists()


@pytest.mark.parametrize("shape, loads", [([1, 0], False), ([2, 4, 0], False), ([0, 2], True), ([0], True)])
def test_an_empty_constant_the_host_library_cannot_hold_is_refused(vpuc, tmp_path, shape, loads):
    """TVM's importer folds a ConstantOfShape of an empty shape into a constant that its own
    library loader rejects unless the first dim is the empty one (ONNX's node test
    causal_conv_with_state_kernel_size_one_expanded): refused at compile time, not an
    artifact that does not load."""
    value = onnx.numpy_helper.from_array(np.array([1.5], np.float32))
    shape_init = onnx.numpy_helper.from_array(np.array(shape, np.int64), "s")
    model = _save(
        tmp_path / "m.onnx",
        [helper.make_node("ConstantOfShape", ["s"], ["e"], value=value, name="zeros"),
         helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("e", TensorProto.FLOAT, shape)],
        [shape_init],
    )  # fmt: skip
    artifact = tmp_path / "m.vpub"
    compiled = vpuc("compile", model, "--target", "cpu", "-o", artifact)
    if not loads:
        _one_line(compiled, 2, f"an empty tensor (shape {shape})", "not supported")
        assert not artifact.exists()
        return
    assert compiled.returncode == 0, compiled.stderr
    out = tmp_path / "out.npz"
    ran = vpuc("run", artifact, "--outputs", out)
    assert ran.returncode == 0, ran.stderr
    with np.load(out) as data:
        assert data["e"].shape == tuple(shape) and np.array_equal(data["y"].shape, [2])
