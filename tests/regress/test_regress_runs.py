"""`vpuc regress` on a small suite, as a user runs it (a fresh `vpuc` process each time):

    micro.onnx   two convolutions and a classifier, on vpu and cpu      the figures
    broken.onnx  a node no ONNX opset has                               fails to compile
    crash.onnx   micro, with `fault = "crash"`: its worker is SIGKILLed  dies
    hang.onnx    micro, with `fault = "hang"` and `timeout_s = 2`        never finishes

The goldens are recorded by a first serial run; a second serial run must then find every
figure the same (the figures are deterministic), and the same suite with --jobs 2 and
with --ray (a local Ray instance) must give the serial report, job for job."""

from __future__ import annotations

import json
import shutil
import sys
import xml.etree.ElementTree as ET

import onnx
import pytest
from onnx import TensorProto, helper

from vpuc.examples.graph_builder import GraphBuilder


def _micro() -> onnx.ModelProto:
    g = GraphBuilder("micro", seed=3)
    x = g.op("Relu", [g.conv("input", "conv1", 3, 8)], "relu1")
    x = g.op("Relu", [g.conv(x, "conv2", 8, 8)], "relu2")
    g.global_pool_classifier(x, channels=8, classes=4)
    return g.model({"input": [1, 3, 8, 8]}, {"logits": [1, 4]})


def _broken() -> onnx.ModelProto:
    node = helper.make_node("NoSuchOp", ["x"], ["y"], name="mystery")
    graph = helper.make_graph(
        [node], "broken", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 9
    return model


SIDECARS = {
    "micro": 'targets = ["vpu", "cpu"]\n',
    "broken": 'targets = ["cpu"]\n',
    "crash": 'targets = ["cpu"]\nfault = "crash"\n',
    "hang": 'targets = ["cpu"]\nfault = "hang"\ntimeout_s = 2\n',
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    folder = tmp_path_factory.mktemp("suite")
    micro = _micro()
    for name in ("micro", "crash", "hang"):
        onnx.save(micro, folder / f"{name}.onnx")
    onnx.save(_broken(), folder / "broken.onnx")
    for name, text in SIDECARS.items():
        (folder / f"{name}.regress.toml").write_text(text)
    (folder / "regress.toml").write_text("calib_synthetic = 2\n")
    return folder


def _regress(vpuc, suite, *args):
    done = vpuc("regress", suite, "--json", *args)
    assert done.returncode in (0, 1), done.stderr
    return json.loads(done.stdout), done.returncode


def _comparable(report: dict) -> list[dict]:
    """The jobs without their wall times: what must not depend on how the jobs ran."""
    return [{k: v for k, v in job.items() if k != "timings"} for job in report["jobs"]]


@pytest.fixture(scope="module")
def recorded(vpuc, suite):
    return _regress(vpuc, suite, "--update-golden")


@pytest.fixture(scope="module")
def serial(vpuc, suite, recorded, tmp_path_factory):
    junit = tmp_path_factory.mktemp("junit") / "serial.xml"
    report, code = _regress(vpuc, suite, "--junit", junit)
    return report, code, junit


def test_update_records_goldens_and_a_second_run_finds_every_figure_the_same(suite, recorded, serial):
    first, first_code = recorded
    again, code, _ = serial
    assert first_code == 1 and code == 1  # the three failing models, whatever the goldens
    assert {(g["path"], tuple(g["targets"])) for g in first["goldens"]} == {
        (str(suite / "micro.golden.json"), ("vpu", "cpu"))
    }
    assert not (suite / "broken.golden.json").exists()  # a failed job never becomes a golden
    by_job = {(j["model"], j["target"]): j for j in again["jobs"]}
    for target in ("vpu", "cpu"):
        job = by_job[("micro", target)]
        assert job["status"] == "same" and job["changes"] == [], job
        before = next(j for j in first["jobs"] if (j["model"], j["target"]) == ("micro", target))
        assert job["figures"] == before["figures"]  # deterministic: seeded inputs and calibration
    vpu = by_job[("micro", "vpu")]["figures"]
    assert vpu["cycles.vpu"] > 0 and vpu["cycles.total"] == vpu["cycles.vpu"] + vpu["cycles.link"]
    assert vpu["partition.subgraphs"] >= 1 and vpu["check.passed"] is True
    # each layer of subgraph 0 named by its ONNX tensor (issue 22), whatever it is called
    max_lsb = [value for key, value in vpu.items() if key.startswith("qdq[sg0/") and key.endswith("].max_lsb")]
    assert max_lsb and all(m <= 1 for m in max_lsb) and "accuracy[logits].top1" in vpu


def test_vpu_figures_are_what_vpuc_compile_and_run_report(vpuc, suite, serial, tmp_path):
    """The same compile and run by hand, with the suite's settings, give the golden's figures."""
    artifact = tmp_path / "micro.vpub"
    compiled = vpuc(
        "compile", suite / "micro.onnx", "--target", "vpu", "--calib-synthetic", "2", "-o", artifact, "--json"
    )
    ran = vpuc("run", artifact, "--check", suite / "micro.onnx", "--json", "--seed", "0")
    assert compiled.returncode == 0 and ran.returncode == 0, compiled.stderr + ran.stderr
    compile_report, run_report = json.loads(compiled.stdout), json.loads(ran.stdout)
    golden = json.loads((suite / "micro.golden.json").read_text())["targets"]["vpu"]["figures"]
    assert golden["cycles.total"] == run_report["cycles"]["total"]
    assert golden["sram_peak_bytes"] == max(s["sram_peak_bytes"] for s in run_report["subgraphs"])
    assert golden["partition.vpu_ops"] == compile_report["partition"]["totals"]["vpu_ops"]
    assert golden["estimate.cycles"] == compile_report["vpu"]["total"]["cycles"]
    assert golden["accuracy[logits].sqnr_db"] == compile_report["accuracy"]["outputs"][0]["sqnr_db"]


def test_failures_are_one_line_each_and_the_run_goes_on(serial):
    report, _, junit = serial
    by_model = {j["model"]: j for j in report["jobs"] if j["target"] == "cpu"}
    broken = by_model["broken"]["reason"]
    assert broken.startswith("compile failed (exit 2): vpuc compile: ") and "broken.onnx" in broken
    assert "NoSuchOp" in broken and "vpuc-regress-" not in broken  # names the suite's file, not a copy
    assert by_model["crash"]["reason"] == "the worker process died (SIGKILL)"
    assert by_model["hang"]["reason"] == "timed out after 2 s (the worker was killed)"
    assert all("\n" not in j["reason"] for j in report["jobs"] if j["reason"])
    assert report["summary"] == {"failed": 3, "same": 2} and report["exit_code"] == 1
    cases = ET.parse(junit).getroot().find("testsuite").findall("testcase")
    assert {(c.get("classname"), c.get("name"), c.find("error") is not None) for c in cases} == {
        ("regress.broken", "cpu", True), ("regress.crash", "cpu", True), ("regress.hang", "cpu", True),
        ("regress.micro", "cpu", False), ("regress.micro", "vpu", False),
    }  # fmt: skip


def test_jobs_2_gives_the_serial_report(vpuc, suite, serial):
    report, code = _regress(vpuc, suite, "--jobs", "2")
    assert report["executor"] == {"kind": "local", "workers": 2}
    assert code == serial[1] and _comparable(report) == _comparable(serial[0])


def test_ray_gives_the_serial_report(vpuc, suite, serial):
    report, code = _regress(vpuc, suite, "--ray", "--jobs", "2")
    assert report["executor"]["kind"] == "ray" and report["executor"]["cpus"] == 2
    assert code == serial[1] and _comparable(report) == _comparable(serial[0])


def test_a_drifting_golden_fails_with_the_table(vpuc, suite, serial, tmp_path):
    """A golden 10% faster than what the compiler does now, with one more VPU op and 1 dB
    more accurate: exit 1 and the table names both figures of each; --update-golden then
    records the real ones again."""
    drift = tmp_path / "drift"
    drift.mkdir()
    for name in ("micro.onnx", "micro.regress.toml", "regress.toml"):
        shutil.copy(suite / name, drift / name)
    truth = json.loads((suite / "micro.golden.json").read_text())
    tampered = json.loads(json.dumps(truth))
    figures = tampered["targets"]["vpu"]["figures"]
    real_cycles, real_ops = figures["cycles.total"], figures["partition.vpu_ops"]
    figures["cycles.total"] = round(real_cycles * 0.9)
    figures["partition.vpu_ops"] = real_ops + 1
    figures["accuracy[logits].sqnr_db"] += 1.0  # the golden was 1 dB more accurate
    (drift / "micro.golden.json").write_text(json.dumps(tampered))

    done = vpuc("regress", drift, "--targets", "vpu")
    assert done.returncode == 1, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if "micro" in line and "vpu" in line]
    cycles = next(line for line in rows if "cycles.total" in line)
    assert str(round(real_cycles * 0.9)) in cycles and str(real_cycles) in cycles and "regressed" in cycles
    ops = next(line for line in rows if "partition.vpu_ops" in line)
    assert str(real_ops + 1) in ops and "changed (exact)" in ops
    sqnr = next(line for line in rows if "accuracy[logits].sqnr_db" in line)
    assert "-1 dB" in sqnr and "regressed (tolerance 0.5 dB)" in sqnr
    assert done.stdout.rstrip().endswith("1 job(s): 1 regressed; exit 1")

    updated = vpuc("regress", drift, "--targets", "vpu", "--update-golden")
    assert updated.returncode == 0, updated.stdout + updated.stderr
    assert "updated: " in updated.stdout and "cycles.total" in updated.stdout
    assert json.loads((drift / "micro.golden.json").read_text())["targets"]["vpu"] == truth["targets"]["vpu"]


def test_ray_reports_a_dead_ray_worker_as_that_jobs_failure():
    """Not the job's own worker process: the Ray worker running the task dies."""
    import os

    from vpuc.compiler.regress.execute import run_ray

    def die(payload):
        os._exit(1)

    results = []
    payloads = [{"model": "m", "target": "vpu"}]
    run_ray(payloads, None, 1, results.append, task=die)
    assert len(results) == 1 and results[0]["status"] == "failed"
    assert results[0]["reason"].startswith("the Ray task failed: ")


def test_ray_without_ray_says_how_to_install_it(suite, monkeypatch, capsys):
    from vpuc.compiler.cli import main

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    assert main(["regress", str(suite), "--ray", "--models", "micro"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "vpuc regress: --ray needs Ray, an optional extra of vpuc: pip install 'vpuc[ray]'"


def test_user_errors_exit_2_before_any_job(vpuc, tmp_path):
    (tmp_path / "m.onnx").write_bytes(b"")
    (tmp_path / "m.regress.toml").write_text("calib_samples = 3\n")
    done = vpuc("regress", tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip() == (
        f"vpuc regress: {tmp_path / 'm.regress.toml'}: unknown key 'calib_samples' (known: "
        "targets, input_shapes, calib, calib_synthetic, calib_method, percentile, min_subgraph_ops, "
        "profitability, reference, compile_args, inputs, seed, timeout_s, tolerance, fault)"
    )
    (tmp_path / "m.regress.toml").write_text('targets = ["no-such-target"]\n')
    done = vpuc("regress", tmp_path)
    assert done.returncode == 2 and "no-such-target" in done.stderr and len(done.stderr.splitlines()) == 1
    done = vpuc("regress", tmp_path, "--jobs", "0")
    assert done.returncode == 2 and "--jobs: must be at least 1" in done.stderr
