"""Issue 26 item 1, every written path: `--html /dev/full` (and --per-layer-csv, report -o,
asm -o, --trace, --dot) once renamed a temporary file over the device, so a user running as
root replaced /dev/full with a regular file and vpuc exited 0. A FIFO stands in for the device
here (a failing test must not damage /dev). And a full disk under stdout is the machine's
state, not a vpuc bug: one line, exit 2, no traceback (it was exit 3 with a traceback)."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import onnx
import pytest
from onnx import TensorProto, helper


def _vpuc(*args, stdout=subprocess.PIPE, cwd=None, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *map(str, args)],
        stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout, cwd=cwd,
    )  # fmt: skip


def _one_line(result, code: int, *fragments: str) -> None:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture(scope="module")
def relu(tmp_path_factory):
    folder = tmp_path_factory.mktemp("relu")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    model = folder / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
    assert _vpuc("compile", model, "-o", folder / "m.vpub").returncode == 0
    (folder / "p.s").write_text("end\n")
    return folder


@pytest.mark.parametrize(
    "args, flag",
    [
        (("compile", "m.onnx", "-o", "n.vpub", "--html", "{fifo}"), "--html"),
        (("compile", "m.onnx", "-o", "n.vpub", "--per-layer-csv", "{fifo}"), "--per-layer-csv"),
        (("run", "m.vpub", "--html", "{fifo}"), "--html"),
        (("run", "m.vpub", "--trace", "{fifo}"), "--trace"),
        (("run", "m.vpub", "--per-layer-csv", "{fifo}"), "--per-layer-csv"),
        (("report", "m.vpub", "-o", "{fifo}"), "-o"),
        (("partition", "m.onnx", "--dot", "{fifo}"), "--dot"),
        (("asm", "p.s", "-o", "{fifo}"), "-o"),
    ],
)
def test_no_writer_replaces_a_special_file(relu, tmp_path, args, flag):
    fifo = tmp_path / "device"
    os.mkfifo(fifo)
    result = _vpuc(*(a.format(fifo=fifo) for a in args), cwd=relu)
    _one_line(result, 2, str(fifo), "not a regular file", flag)
    assert stat.S_ISFIFO(fifo.lstat().st_mode), "the FIFO was replaced"


@pytest.mark.parametrize(
    "args, flag",
    [
        (("compile", "m.onnx", "-o", "-"), "-o"),
        (("report", "m.vpub", "-o", "-"), "-o"),
        (("run", "m.vpub", "--html", "-"), "--html"),
        (("asm", "p.s", "-o", "-"), "-o"),
    ],
)
def test_a_dash_is_not_a_file_name(relu, tmp_path, args, flag):
    """`-o -` wrote a file named "-" in the working folder (issue 26): vpuc writes files, so a
    dash is refused in one line and nothing is written."""
    for name in ("m.onnx", "m.vpub", "p.s"):
        (tmp_path / name).write_bytes((relu / name).read_bytes())
    result = _vpuc(*args, cwd=tmp_path)
    _one_line(result, 2, f"{flag} -", "not standard output")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(
    "args",
    [
        ("compile", "{fifo}"),
        ("partition", "{fifo}"),
        ("run", "{fifo}"),
        ("run", "m.vpub", "--inputs", "{fifo}"),
        ("run", "m.vpub", "--check", "{fifo}"),
        ("compile", "m.onnx", "--target", "vpu", "--calib", "{fifo}", "-o", "n.vpub"),
    ],
)
def test_no_reader_reads_a_special_file(relu, tmp_path, args):
    """`vpuc compile /dev/zero` read the device until memory ran out; `--inputs /dev/zero` said
    "no such file". A FIFO stands in (reading one without a writer blocks: the timeout)."""
    fifo = tmp_path / "device"
    os.mkfifo(fifo)
    result = _vpuc(*(a.format(fifo=fifo) for a in args), cwd=relu, timeout=120)
    _one_line(result, 2, str(fifo), "not a regular file")


@pytest.mark.parametrize("args", [("targets",), ("run", "m.vpub"), ("run", "m.vpub", "--json")])
def test_stdout_on_a_full_device_is_one_line(relu, args):
    with open("/dev/full", "w") as full:
        result = _vpuc(*args, stdout=full, cwd=relu)
    _one_line(result, 2, "cannot write", "No space left on device")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("budget", ["0", "-5", "nan", "inf"])
def test_a_time_budget_that_is_not_a_positive_number_of_seconds(relu, budget):
    """`--time-budget nan` and `inf` ran the search ("tuning failed: cannot convert float NaN
    to integer"): refused before any work, as 0 and negatives were."""
    result = _vpuc("tune", "m.onnx", "--time-budget", budget, "--db", "db", cwd=relu)
    _one_line(result, 2, "--time-budget", "positive number of seconds")
    assert not (relu / "db").exists()
