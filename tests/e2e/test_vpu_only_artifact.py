"""A compile whose host part is empty (every op on the VPU: tinyconv's int8-io QDQ export on
vpu-plus) builds no host library: the manifest lists the VPU calls (compiler/host/calls.py,
docs/artifact.md) and `vpuc run` makes them itself. Its outputs are those of the same
programs run by a host library on TVM's VM (the artifact format before it, still loaded),
and within the check's 2 LSB of onnxruntime's QDQ evaluation."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import tvm
from tvm.script import relax as R

from vpuc import runtime
from vpuc.compiler import driver
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.host.calls import vpu_call_plan
from vpuc.runtime.artifact import Artifact, ArtifactError
from vpuc.runtime.executor import Executable

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
TINYCONV = ANCHORS / "tinyconv" / "tinyconv_int8_qdq.onnx"


@pytest.fixture(scope="module")
def prepared():
    if not TINYCONV.is_file():
        pytest.skip("the anchors are not beside the repo")
    return prepare_model(TINYCONV, "vpu-plus", CompileOptions())


def _no_build(*args, **kwargs):
    raise AssertionError("the host library was built")


def test_an_all_vpu_compile_builds_no_host_library_and_runs(prepared, monkeypatch, tmp_path):
    monkeypatch.setattr(driver, "build_host_library", _no_build)
    artifact = build_artifact(TINYCONV, prepared)
    assert "host.so" not in artifact.members and "host_target" not in artifact.manifest
    (program,) = prepared.programs
    assert artifact.manifest["host"]["calls"] == [
        {"symbol": program.symbol, "args": [{"input": 0}], "outputs": [{"shape": [1, 4], "dtype": "int8"}]}
    ]
    assert "skipped" in artifact.report["host_build"]
    direct = runtime.load(artifact.save(tmp_path / "direct.vpub"))
    monkeypatch.undo()
    with_library = build_artifact(TINYCONV, prepared, reference=True)  # the reference needs a library
    assert "host.so" in with_library.members and "calls" not in with_library.manifest["host"]
    on_vm = runtime.load(with_library.save(tmp_path / "vm.vpub"))
    session = ort.SessionOptions()
    session.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    ort_run = ort.InferenceSession(str(TINYCONV), session, providers=["CPUExecutionProvider"])
    for seed in range(3):
        x = np.random.default_rng(seed).integers(-128, 128, (1, 16, 16, 3), dtype=np.int8)
        (out,) = direct.run({"input": x}).values()
        np.testing.assert_array_equal(out, on_vm.run({"input": x})["output"])
        (expected,) = ort_run.run(None, {"input": x})
        assert np.abs(out.astype(int) - expected.astype(int)).max() <= 2
        assert direct.last_run.cycles["vpu"] > 0 and len(direct.last_run.host_ops) == 0
        assert direct.last_run.cycles == on_vm.last_run.cycles


def test_running_it_imports_no_tvm(prepared, monkeypatch, tmp_path):
    """`vpuc run` of an artifact without host code needs no TVM (1-2 s of its start)."""
    monkeypatch.setattr(driver, "build_host_library", _no_build)
    path = build_artifact(TINYCONV, prepared).save(tmp_path / "m.vpub")
    script = (
        "import sys\nfrom vpuc.compiler.cli import main\n"
        f"code = main(['run', {str(path)!r}, '--json'])\n"
        "print(code, 'tvm' in sys.modules, 'vpuc.sim.simulator' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.stdout.strip().splitlines()[-1] == "0 False True", result.stderr[-800:]


def test_a_manifest_call_to_no_program_is_refused_in_one_line(prepared, monkeypatch):
    monkeypatch.setattr(driver, "build_host_library", _no_build)
    artifact = build_artifact(TINYCONV, prepared)
    manifest = copy.deepcopy(artifact.manifest)
    manifest["host"]["calls"][0]["symbol"] = "nothing"
    with pytest.raises(
        ArtifactError, match=r"^m\.vpub: manifest host\.calls\[0\]\.symbol: names no VPU program"
    ):
        Executable(Artifact(manifest, artifact.members), source="m.vpub")
    manifest = copy.deepcopy(artifact.manifest)
    manifest["host"]["returns"] = [{"call": 1, "output": 0}]
    with pytest.raises(
        ArtifactError, match=r"host\.returns\[0\]: .* is not a model input or an earlier call"
    ):
        Executable(Artifact(manifest, artifact.members), source="m.vpub")


@tvm.script.ir_module
class TwoCalls:
    @R.function
    def main(x: R.Tensor((1, 8), "int8"), y: R.Tensor((1, 8), "int8")):
        with R.dataflow():
            a = R.call_dps_packed("sg0", (x,), out_ty=[R.Tensor((1, 4), "int8"), R.Tensor((2,), "int8")])
            a1 = a[1]
            b = R.call_dps_packed("sg1", (y, x), out_ty=R.Tensor((1, 2), "int8"))
            R.output(a1, b)
        return (b, a1)


@tvm.script.ir_module
class HostAdd:
    @R.function
    def main(x: R.Tensor((1, 8), "int8")):
        with R.dataflow():
            a = R.call_dps_packed("sg0", (x,), out_ty=R.Tensor((1, 8), "int8"))
            b = R.add(a, x)
            R.output(b)
        return b


def test_the_plan_is_the_calls_only_when_the_host_computes_nothing():
    assert vpu_call_plan(HostAdd) is None
    assert vpu_call_plan(TwoCalls) == {
        "calls": [
            {
                "symbol": "sg0",
                "args": [{"input": 0}],
                "outputs": [{"shape": [1, 4], "dtype": "int8"}, {"shape": [2], "dtype": "int8"}],
            },
            {
                "symbol": "sg1",
                "args": [{"input": 1}, {"input": 0}],
                "outputs": [{"shape": [1, 2], "dtype": "int8"}],
            },
        ],
        "returns": [{"call": 1, "output": 0}, {"call": 0, "output": 1}],
    }
