"""The defects a careless user found (issue 26), each as the user met it: outputs that are
devices, numbers out of range, a closed pipe, NaN inputs, file modes, cut table cells, and
the smaller messages. The CLI runs in this process (cli.main) except where the process is the
point (a pipe, a memory limit, the umask, stdout that is not a terminal)."""

from __future__ import annotations

import json
import os
import resource
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.compiler import cli, compile_model


@pytest.fixture
def vpuc(capsys):
    def run(*args):
        code = cli.main([str(a) for a in args])
        captured = capsys.readouterr()
        return subprocess.CompletedProcess(args, code, captured.out, captured.err)

    return run


def _process(*args, stdout=subprocess.PIPE, limit_bytes=None, umask=None, cwd=None):
    """`vpuc ARGS` in a fresh process, optionally under an address-space limit or a umask."""

    def before():
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
        if umask is not None:
            os.umask(umask)

    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    return subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *map(str, args)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, preexec_fn=before, timeout=300, env=env, cwd=cwd,
    )  # fmt: skip


def _one_line(result, code: int, *fragments: str) -> str:
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def _relu(path, shape=(1, 4), opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    return path


@pytest.fixture(scope="module")
def relu_artifact(tmp_path_factory):
    folder = tmp_path_factory.mktemp("relu")
    model = _relu(folder / "relu.onnx")
    return compile_model(model, "cpu").save(folder / "relu.vpub"), model


# --- item 1: -o a device is never read as a zip ---------------------------------------------


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/full"])
def test_output_onto_a_device_is_refused_without_reading_it(tmp_path, device):
    """Under a 2 GB address space: before, the overwrite check read the device until memory ran
    out (OOM kill, or MemoryError exit 3)."""
    model = _relu(tmp_path / "m.onnx")
    result = _process("compile", model, "-o", device, limit_bytes=2 << 30)
    _one_line(result, 2, device, "not a regular file")


# --- item 4: user mistakes, not vpuc bugs -----------------------------------------------------


def test_input_shape_beyond_any_index_is_a_user_error(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx")
    _one_line(vpuc("compile", model, "--input-shape", "x=99999999999999999999x4"), 2, "--input-shape", "2^31")


def test_negative_seed_is_a_user_error(vpuc, relu_artifact):
    _one_line(vpuc("run", relu_artifact[0], "--seed", "-1"), 2, "--seed", "-1")


def test_a_declared_zero_size_dim_is_a_user_error(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx", shape=(1, 3, 0, 16))
    _one_line(vpuc("compile", model, "-o", tmp_path / "m.vpub"), 2, "'x'", "0-size")


# --- item 5: a closed pipe is 141 on the commands that print tables ---------------------------


def test_run_into_a_closed_pipe_is_not_a_failed_check(relu_artifact):
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        result = _process("run", relu_artifact[0], stdout=write_end)
    finally:
        os.close(write_end)
    assert result.returncode == cli.EXIT_BROKEN_PIPE, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr


# --- item 6: NaN inputs alike on every artifact; NaN is never "exact" --------------------------


def test_nan_input_is_refused_on_a_cpu_artifact(vpuc, relu_artifact, tmp_path):
    inputs = tmp_path / "nan.npz"
    np.savez(inputs, x=np.array([[np.nan, 1, 2, 3]], np.float32))
    _one_line(vpuc("run", relu_artifact[0], "--inputs", inputs), 2, "input 'x'", "NaN", "--allow-nonfinite")


def test_nan_against_the_reference_is_never_exact(vpuc, relu_artifact, tmp_path):
    """Relu(NaN) is NaN in onnxruntime; whatever the host gives, the row must not say exact."""
    inputs = tmp_path / "nan.npz"
    np.savez(inputs, x=np.array([[np.nan, 1, 2, 3]], np.float32))
    artifact, model = relu_artifact
    result = vpuc("run", artifact, "--inputs", inputs, "--check", model, "--allow-nonfinite")
    row = next(line for line in result.stdout.splitlines() if line.lstrip("│| ").startswith("y"))
    assert "exact" not in row or "nan" not in row.lower(), row


# --- item 7: written files follow the umask ---------------------------------------------------


def test_artifacts_and_zoo_models_follow_the_umask(tmp_path):
    model = _relu(tmp_path / "m.onnx")
    assert _process("compile", model, "-o", tmp_path / "m.vpub", umask=0o022).returncode == 0
    assert _process("zoo", tmp_path / "zoo", "--models", "tinyconvnet", umask=0o022).returncode == 0
    for path in (tmp_path / "m.vpub", tmp_path / "zoo" / "tinyconvnet.onnx"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, (path, oct(path.stat().st_mode))


def test_the_cached_qdq_reference_follows_the_umask(tmp_path):
    """`run --check` caches the QDQ reference beside the artifact: it was written 0600."""
    model = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "tinyconv" / "tinyconv_int8_qdq.onnx"
    artifact = tmp_path / "t.vpub"
    assert _process("compile", model, "--target", "vpu-plus", "-o", artifact, umask=0o022).returncode == 0
    result = _process("run", artifact, "--check", model, umask=0o022)
    assert result.returncode == 0, result.stderr
    (cached,) = tmp_path.glob("t.vpub.reference-*.so")
    assert stat.S_IMODE(cached.stat().st_mode) == 0o644, oct(cached.stat().st_mode)


# --- item 8: vpuc sim keeps every figure when stdout is a pipe --------------------------------


def test_sim_into_a_pipe_cuts_no_figure(tmp_path):
    from tests.sim.test_sim_reports import PROGRAM, dram_image

    program = tmp_path / "conv.s"
    program.write_text(PROGRAM)
    image = tmp_path / "dram.bin"
    image.write_bytes(dram_image().tobytes())
    result = _process("sim", program, "--dram", image)
    assert result.returncode == 0, result.stderr
    assert f"{64 * 16 * 9 * 16:,} (" in result.stdout  # 147,456 MACs: a hand count
    assert "…" not in result.stdout


# --- item 12: the smaller ones ----------------------------------------------------------------


def test_empty_output_name_is_refused(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx")
    _one_line(vpuc("compile", model, "-o", ""), 2, "-o", "empty")


def test_output_under_a_file_says_not_a_directory(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx")
    (tmp_path / "afile").write_text("mine")
    _one_line(vpuc("compile", model, "-o", tmp_path / "afile" / "m.vpub"), 2, "afile", "not a directory")
    assert (tmp_path / "afile").read_text() == "mine"


def test_running_an_onnx_model_says_compile_it_first(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx")
    _one_line(vpuc("run", model), 2, "m.onnx", "vpuc compile")


def test_several_symbolic_inputs_are_named_at_once(vpuc, tmp_path):
    """Item 11: three symbolic inputs, one compile to learn all three flags."""
    names = ("a", "b", "c")
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", 4]) for n in names]
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    nodes = [helper.make_node("Sum", list(names), ["y"], name="sum")]
    graph = helper.make_graph(nodes, "g", inputs, [y])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    _one_line(vpuc("compile", model, "-o", tmp_path / "m.vpub"), 2, *(f"--input-shape {n}=" for n in names))


def test_unknown_opset_is_refused_at_compile(vpuc, tmp_path):
    model = _relu(tmp_path / "m.onnx", opset=99)
    _one_line(vpuc("compile", model, "-o", tmp_path / "m.vpub"), 2, "opset 99")


def test_errors_under_json_are_a_json_object(vpuc, tmp_path):
    import json

    result = vpuc("compile", tmp_path / "absent.onnx", "--json", "-o", tmp_path / "m.vpub")
    assert result.returncode == 2
    error = json.loads(result.stdout)
    assert error["exit_code"] == 2 and "absent.onnx" in error["error"]


def test_a_target_file_without_a_name_is_not_reported_as_its_parent(tmp_path):
    from vpuc.targets import load_target

    path = tmp_path / "mine.toml"
    path.write_text('[target]\ninherit = "vpu"\n')
    assert load_target(str(path)).name == "mine"


def test_partition_svg_without_graphviz_fails_before_any_work(vpuc, tmp_path, monkeypatch):
    from vpuc.compiler import driver
    from vpuc.compiler.partition import draw

    def must_not_run(*args, **kwargs):
        raise AssertionError("prepare_model ran before --svg was checked")

    monkeypatch.setattr(draw.shutil, "which", lambda name: None)
    monkeypatch.setattr(driver, "prepare_model", must_not_run)
    model = _relu(tmp_path / "m.onnx")
    _one_line(vpuc("partition", model, "--svg", tmp_path / "p.svg"), 2, "p.svg", "graphviz")


def test_compile_help_names_the_default_target(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compile", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "default: cpu" in text and "--target vpu" in text


# --- item 11: checks and messages on real models (the CLI as a subprocess) -------------------


def _vad_like(path):
    """If(sr == 16000) {x * 2} else {reshape(x, 2x8)} -> Relu: the output's shape says which
    sample rate the model ran with."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures"))
    from corpus import vad_like

    onnx.save(vad_like(), path)
    return path


@pytest.mark.parametrize("target", ["cpu", "vpu"])
def test_an_artifact_with_a_bound_input_can_be_checked(tmp_path, target):
    """Item 11 (a): --check feeds the bound value to the reference (8000: the else branch, a
    2x8 output; without it onnxruntime refuses, with 16000 the shapes differ)."""
    model, artifact = _vad_like(tmp_path / "vad.onnx"), tmp_path / "vad.vpub"
    compiled = _process("compile", model, "--target", target, "--bind-input", "sr=8000", "-o", artifact)
    assert compiled.returncode == 0, compiled.stderr
    checked = _process("run", artifact, "--check", model, "--json")
    assert checked.returncode == 0, checked.stderr
    report = json.loads(checked.stdout)
    assert report["check"]["passed"], report["check"]
    rows = report["check"]["float"]["outputs"]
    assert [r["name"] for r in rows] == ["y"] and rows[0]["max_abs_err"] <= 0.05, rows


def test_an_input_file_may_hold_the_bound_value_only(tmp_path):
    """Item 11 (a): the inputs the unbound model was checked with still run (sr equal to
    the bound value); another sample rate is refused in one line, exit 2."""
    model, artifact = _vad_like(tmp_path / "vad.onnx"), tmp_path / "vad.vpub"
    assert _process("compile", model, "--bind-input", "sr=8000", "-o", artifact).returncode == 0
    x = np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)
    same, other = tmp_path / "same.npz", tmp_path / "other.npz"
    np.savez(same, x=x, sr=np.array([8000], np.int64))
    np.savez(other, x=x, sr=np.array([16000], np.int64))
    checked = _process("run", artifact, "--inputs", same, "--check", model, "--json")
    assert checked.returncode == 0, checked.stderr
    assert json.loads(checked.stdout)["check"]["passed"]
    _one_line(_process("run", artifact, "--inputs", other), 2, "other.npz", "'sr'", "--bind-input sr=8000")


def test_every_input_without_a_static_shape_is_named_in_one_line(tmp_path):
    """Item 11 (b): a named symbolic dim, another, and an unnamed unknown one: one compile,
    one line with the three flags (the static input needs none), then the compile works."""
    inputs = [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", 4]),
              helper.make_tensor_value_info("b", TensorProto.FLOAT, [1, "T"]),
              helper.make_tensor_value_info("c", TensorProto.FLOAT, [None, 4]),
              helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 4])]  # fmt: skip
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph(
        [helper.make_node("Sum", ["a", "b", "c", "d"], ["y"], name="sum")], "g", inputs, [y]
    )
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    line = _one_line(
        _process("compile", model, "-o", tmp_path / "m.vpub"), 2,
        "m.onnx", "--input-shape a=", "--input-shape b=", "--input-shape c=",
    )  # fmt: skip
    assert "--input-shape d=" not in line
    fixed = _process("compile", model, "-o", tmp_path / "m.vpub", "--input-shape", "a=1x4",
                     "--input-shape", "b=1x4", "--input-shape", "c=1x4")  # fmt: skip
    assert fixed.returncode == 0, fixed.stderr


def test_the_floor_refusal_on_synthetic_data_says_so(zoo_dir, tmp_path):
    """Item 11 (c): no --calib, a floor the model cannot reach: one line saying the samples
    were synthetic and showing --calib, each kept layer named once."""
    line = _one_line(
        _process("compile", zoo_dir / "tinyconvnet.onnx", "--target", "vpu", "--min-sqnr", "140",
                 "-o", tmp_path / "m.vpub"),
        2, "synthetic", "--calib X.npz", "below --min-sqnr 140",
    )  # fmt: skip
    if "layer(s) in float (" in line:
        names = line.split("layer(s) in float (", 1)[1].split(")", 1)[0].split(", ")
        assert len(names) == len(set(names)), line
