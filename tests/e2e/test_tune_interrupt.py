"""An interrupted `vpuc tune` keeps what it measured (issue 26 item 2): each validated record
is written to the database when it is found, so Ctrl-C after the first records leaves them
on disk, whole; a rerun on that database starts from them, and `vpuc compile --db` applies
them.

The tune runs as the CLI in its own process, with MIN_SPEEDUP set to 0 so that every
validated candidate is stored (otherwise whether a record appears within seconds depends on
the random search finding a faster schedule on this machine)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.host.database import META, RECORDS

STORE_EVERY_CANDIDATE = (
    "import sys; from vpuc.compiler.tune import tuner; tuner.MIN_SPEEDUP = 0.0; "
    "from vpuc.compiler.cli import main; sys.exit(main(sys.argv[1:]))"
)
WAIT_FOR_RECORDS_S = 300


def _tune(model, db, trials: int) -> list[str]:
    return [sys.executable, "-c", STORE_EVERY_CANDIDATE, "tune", str(model), "--target", "cpu",
            "--trials", str(trials), "--time-budget", "900", "--db", str(db), "--json"]  # fmt: skip


def _small_model(path):
    """conv 3x3 (4 -> 8 channels) -> relu on 1x4x8x8: one or two kernels, short rounds."""
    weight = np.random.default_rng(0).standard_normal((8, 4, 3, 3)).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"], name="relu")]  # fmt: skip
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 8, 8])], [numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _records(db) -> list[str]:
    path = db / RECORDS
    return [line for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_interrupted_tune_keeps_its_records_and_a_rerun_resumes(vpuc, tmp_path):
    model, db = _small_model(tmp_path / "small.onnx"), tmp_path / "db"
    proc = subprocess.Popen(
        _tune(model, db, 100_000), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + WAIT_FOR_RECORDS_S
        while not _records(db) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert proc.poll() is None, proc.communicate()
        assert _records(db), "no record stored within the wait"
        first_record_s = WAIT_FOR_RECORDS_S - (deadline - time.monotonic())
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        proc.kill()
    print(f"first record after {first_record_s:.1f} s")
    assert proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr, stderr
    kept = _records(db)
    assert kept and all(isinstance(json.loads(line), list) for line in kept)
    meta = json.loads((db / META).read_text())
    assert len(meta["tasks"]) == len(kept), meta["tasks"]

    start = time.monotonic()
    rerun = subprocess.run(_tune(model, db, 1), capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    print(f"rerun {time.monotonic() - start:.1f} s")
    report = json.loads(rerun.stdout)
    assert report["resumed"] == len(kept), report
    assert report["stored"] >= len(kept) and len(_records(db)) == report["stored"], report

    compiled = vpuc("compile", model, "-o", tmp_path / "t.vpub", "--db", db, "--json")
    assert compiled.returncode == 0, compiled.stderr
    assert json.loads(compiled.stdout)["host_build"]["tuned_tasks"] == report["stored"]
