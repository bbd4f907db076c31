"""How `vpuc regress` judges figures against goldens, reads sidecars, writes goldens and
JUnit: every expected status below is worked out by hand from the tolerance rules of
docs/regress.md (no compile here; tests/regress/test_regress_runs.py runs real jobs)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from vpuc.compiler.regress import golden
from vpuc.compiler.regress.figures import check_failures, compare, extract
from vpuc.compiler.regress.report import write_junit
from vpuc.compiler.regress.suite import DEFAULT_TOLERANCES, SuiteError, discover

TOL = DEFAULT_TOLERANCES


def _status(name, old, new, **tolerances):
    (change,) = compare({name: old}, {name: new}, {**TOL, **tolerances})
    return change.status


@pytest.mark.parametrize(
    "name, old, new, expected",
    [
        ("cycles.total", 1000, 1000, "same"),
        ("cycles.total", 1000, 900, "better"),
        ("cycles.total", 1000, 1020, "worse"),  # +2.0%: at the 2% tolerance
        ("cycles.total", 1000, 1021, "regressed"),  # +2.1%
        ("subgraph[1].cycles", 500, 511, "regressed"),  # +2.2%
        ("estimate.cycles", 500, 505, "worse"),
        ("dram_read_bytes", 16952, 17291, "worse"),  # +339 = 1.9998%
        ("dram_read_bytes", 16952, 17292, "regressed"),  # +340 = 2.0057%
        ("sram_peak_bytes", 0, 16, "regressed"),  # from nothing: any growth
        ("transfer_bytes.to_vpu", 768, 512, "better"),
        ("partition.vpu_ops", 14, 13, "changed"),  # exact, whichever way
        ("partition.subgraphs", 1, 2, "changed"),
        ("ops.cpu_ops", 3, 3, "same"),
        ("check.passed", True, False, "changed"),
        ("accuracy[logits].sqnr_db", 40.0, 39.6, "worse"),  # -0.4 dB <= 0.5
        ("accuracy[logits].sqnr_db", 40.0, 39.4, "regressed"),  # -0.6 dB
        ("check[logits].sqnr_db", 40.0, 47.0, "better"),
        ("check[logits].sqnr_db", None, 131.4, "same"),  # equal outputs vs float round-off: both >= 100 dB
        ("check[logits].sqnr_db", 131.4, 99.0, "regressed"),  # 100 (capped) -> 99
        ("accuracy[logits].top1", 1.0, 0.875, "regressed"),  # one of 8 samples flipped, tolerance 0
        ("qdq[sg0/gv].max_lsb", 0, 1, "regressed"),
        ("qdq[sg0/gv].max_lsb", 1, 0, "better"),
        ("qdq[sg0/gv].exact_share", 1.0, 0.995, "worse"),
        ("qdq[sg0/gv].exact_share", 1.0, 0.98, "regressed"),
        ("estimate.error", 0.01, -0.025, "worse"),  # |error| 1% -> 2.5%: +1.5 points <= 2
        ("estimate.error", -0.01, 0.035, "regressed"),  # 1% -> 3.5%: +2.5 points
        ("estimate.error", 0.03, -0.01, "better"),
        ("something.unknown", 1, 2, "changed"),  # a figure this version has no rule for
    ],
)
def test_status_by_rule(name, old, new, expected):
    assert _status(name, old, new) == expected


def test_tolerances_from_the_sidecar_apply():
    assert _status("cycles.total", 1000, 1040) == "regressed"
    assert _status("cycles.total", 1000, 1040, cycles=0.05) == "worse"
    assert _status("accuracy[y].sqnr_db", 30.0, 28.5, sqnr_db=2.0) == "worse"
    assert _status("qdq[sg0/gv].max_lsb", 0, 1, lsb=1) == "worse"


def test_new_and_missing_figures():
    changes = {
        c.figure: c
        for c in compare({"cycles.vpu": 5, "sram_peak_bytes": 9}, {"cycles.vpu": 5, "x.sqnr_db": 3.0}, TOL)
    }
    assert changes["cycles.vpu"].status == "same"
    assert changes["x.sqnr_db"].status == "new" and not changes["x.sqnr_db"].regression
    assert changes["sram_peak_bytes"].status == "missing" and changes["sram_peak_bytes"].regression


def test_delta_shows_both_the_difference_and_the_relative_change():
    (change,) = compare({"cycles.total": 13890}, {"cycles.total": 14300}, TOL)
    assert (change.golden, change.new, change.delta, change.tolerance) == (
        13890,
        14300,
        "+410 (+2.95%)",
        "2%",
    )
    (change,) = compare({"a[y].sqnr_db": 40.0}, {"a[y].sqnr_db": 39.25}, TOL)
    assert change.delta == "-0.75 dB" and change.tolerance == "0.5 dB"


# --- figures from the reports ----------------------------------------------------------------

COMPILED = {
    "totals": {"nodes": 17, "cpu_ops": 3, "vpu_ops": 14},
    "partition": {"totals": {"vpu_ops": 14, "cpu_ops": 3, "subgraphs": 2, "boundaries": 4, "bytes": 1280}},
    "vpu": {"total": {"cycles": 1100}},
    "accuracy": {"outputs": [{"name": "logits", "sqnr_db": 46.0, "top1_agreement": 1.0},
                             {"name": "hidden", "sqnr_db": 30.5, "top1_agreement": None}]},
}  # fmt: skip
RAN = {
    "cycles": {"total": 1500, "vpu": 1000, "link": 500},
    "subgraphs": [
        {"id": 0, "cycles": 600, "dram_read_bytes": 100, "dram_write_bytes": 10, "sram_peak_bytes": 4096},
        {"id": 1, "cycles": 400, "dram_read_bytes": 50, "dram_write_bytes": 20, "sram_peak_bytes": 8192},
    ],
    "transfer_bytes": {"to_vpu": 768, "from_vpu": 512},
    "check": {
        "float": {"outputs": [{"name": "logits", "sqnr_db": 48.74123, "sqnr_floor_db": 36.0, "passed": True},
                              {"name": "hidden", "sqnr_db": 20.0, "sqnr_floor_db": 20.5, "passed": False}]},
        "qdq": {"tolerance_lsb": 1, "outputs": [{"subgraph": 1, "output": "gv", "max_lsb": 2, "exact_share": 0.97, "passed": False}]},
        "passed": False,
    },
}  # fmt: skip


def test_figures_of_a_job():
    figures = extract(COMPILED, RAN)
    assert figures["ops.vpu_ops"] == 14 and figures["partition.subgraphs"] == 2
    assert (figures["cycles.total"], figures["cycles.vpu"], figures["cycles.link"]) == (1500, 1000, 500)
    assert figures["dram_read_bytes"] == 150 and figures["dram_write_bytes"] == 30  # summed by hand
    assert figures["sram_peak_bytes"] == 8192  # the larger of the two
    assert figures["subgraph[1].cycles"] == 400 and figures["subgraph[0].sram_peak_bytes"] == 4096
    assert figures["estimate.cycles"] == 1100 and figures["estimate.error"] == 0.1  # (1100 - 1000) / 1000
    assert figures["accuracy[logits].top1"] == 1.0 and "accuracy[hidden].top1" not in figures
    assert figures["check[logits].sqnr_db"] == 48.741
    assert figures["qdq[sg1/gv].max_lsb"] == 2 and figures["check.passed"] is False
    reasons = check_failures(RAN)
    assert reasons == [
        "output 'hidden' SQNR 20 dB below its floor 20.5 dB",
        "subgraph 1 output 'gv' 2 LSB from the QDQ reference (tolerance 1)",
    ]


def test_a_cpu_job_has_no_vpu_figures():
    compiled = {
        "totals": {"nodes": 5, "cpu_ops": 5, "vpu_ops": 0},
        "partition": None,
        "vpu": None,
        "accuracy": None,
    }
    ran = {"cycles": {"total": 0, "vpu": 0, "link": 0}, "subgraphs": [], "transfer_bytes": {"to_vpu": 0, "from_vpu": 0},
           "check": {"float": {"outputs": [{"name": "y", "sqnr_db": None, "rel_err": 0.0, "passed": True}]}, "qdq": None, "passed": True}}  # fmt: skip
    assert extract(compiled, ran) == {
        "ops.cpu_ops": 5, "ops.nodes": 5, "ops.vpu_ops": 0, "check[y].sqnr_db": None, "check.passed": True,
    }  # fmt: skip


# --- the suite folder ------------------------------------------------------------------------


def _suite(tmp_path: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return tmp_path


def test_discover_merges_suite_defaults_and_sidecars(tmp_path):
    suite = _suite(tmp_path, {
        "regress.toml": 'targets = ["vpu"]\ncalib_synthetic = 4\n[tolerance]\ncycles = 0.05\n',
        "a.onnx": "", "sub/b.onnx": "", ".hidden/c.onnx": "",
        "sub/b.regress.toml": 'targets = ["vpu", "cpu"]\nseed = 3\n[tolerance]\nbytes = 0.1\n',
    })  # fmt: skip
    jobs = discover(suite)
    assert [j.name for j in jobs] == ["a@vpu", "sub/b@vpu", "sub/b@cpu"]
    b = jobs[1]
    assert b.settings["calib_synthetic"] == 4 and b.settings["seed"] == 3
    assert b.tolerances["cycles"] == 0.05 and b.tolerances["bytes"] == 0.1 and b.tolerances["lsb"] == 0
    assert b.golden_path == suite / "sub" / "b.golden.json"
    # --targets picks among each model's own targets; --models filters by glob
    assert [j.name for j in discover(suite, targets=["cpu"])] == ["sub/b@cpu"]
    assert [j.name for j in discover(suite, patterns=["sub/*"])] == ["sub/b@vpu", "sub/b@cpu"]


def test_a_model_without_targets_runs_on_the_command_line_ones(tmp_path):
    suite = _suite(tmp_path, {"a.onnx": ""})
    assert [j.name for j in discover(suite)] == ["a@vpu"]
    assert [j.name for j in discover(suite, targets=["cpu", "vpu-plus"])] == ["a@cpu", "a@vpu-plus"]


@pytest.mark.parametrize(
    "sidecar, message",
    [
        ("calib_samples = 3", "unknown key 'calib_samples'"),
        ('targets = "vpu"', "'targets' must be a non-empty list"),
        ("calib_synthetic = 0", "'calib_synthetic' must be a number of synthetic samples >= 1"),
        ('calib = "missing.npz"', "'calib':"),
        ('fault = "explode"', "'fault' must be one of crash, hang"),
        ("[tolerance]\ncycle = 0.1", "unknown tolerance 'cycle'"),
        ("[tolerance]\ncycles = -1", "tolerance 'cycles' must be a number >= 0"),
        ('compile_args = ["--target", "cpu"]', "compile_args: '--target' is set by the runner"),
        ("targets = [", "not valid TOML"),
    ],
)
def test_a_bad_sidecar_names_the_file_and_the_key(tmp_path, sidecar, message):
    suite = _suite(tmp_path, {"m.onnx": "", "m.regress.toml": sidecar})
    with pytest.raises(SuiteError, match=r"m\.regress\.toml: ") as caught:
        discover(suite)
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_folder_without_models_is_refused(tmp_path):
    with pytest.raises(SuiteError, match="no \\*.onnx model"):
        discover(tmp_path)
    with pytest.raises(SuiteError, match="not a folder"):
        discover(tmp_path / "nope")


# --- goldens and reports -----------------------------------------------------------------


def test_judge_and_update(tmp_path):
    suite = _suite(tmp_path, {"m.onnx": "model bytes", "m.regress.toml": 'targets = ["vpu", "cpu"]'})
    vpu, cpu = discover(suite)
    ok = {"status": "ok", "figures": {"cycles.total": 1000, "partition.vpu_ops": 3}, "elapsed_s": 1.0}
    assert golden.judge(vpu, ok, None, "0.1.0")["status"] == "no golden"

    written = golden.update([(vpu, golden.judge(vpu, ok, None, "0.1.0"))], "0.1.0")
    assert written == [{"path": str(vpu.golden_path), "targets": ["vpu"], "changed": True}]
    entry = golden.read(vpu.golden_path)["vpu"]
    assert entry["figures"] == ok["figures"] and entry["vpuc_version"] == "0.1.0"
    assert golden.judge(vpu, ok, entry, "0.1.0")["status"] == "same"
    # writing the same figures again leaves the file alone
    assert golden.update([(vpu, golden.judge(vpu, ok, entry, "0.1.0"))], "0.1.0")[0]["changed"] is False

    slower = {**ok, "figures": {"cycles.total": 1100, "partition.vpu_ops": 3}}
    line = golden.judge(vpu, slower, entry, "0.1.0")
    assert line["status"] == "regressed" and [c["figure"] for c in line["changes"]] == ["cycles.total"]
    faster = {**ok, "figures": {"cycles.total": 990, "partition.vpu_ops": 3}}
    assert golden.judge(vpu, faster, entry, "0.1.0")["status"] == "better"

    # a failed job never becomes a golden; the other target's entry is kept
    failed = {"status": "failed", "reason": "compile failed (exit 2): x", "figures": None, "elapsed_s": 0.5}
    cpu_ok = {"status": "ok", "figures": {"ops.nodes": 4}, "elapsed_s": 1.0}
    golden.update(
        [(vpu, golden.judge(vpu, failed, entry, "0.1.0")), (cpu, golden.judge(cpu, cpu_ok, None, "0.1.0"))],
        "0.1.0",
    )
    targets = golden.read(vpu.golden_path)
    assert targets["vpu"]["figures"] == ok["figures"] and targets["cpu"]["figures"] == {"ops.nodes": 4}

    # a changed model or setting is named beside the figures
    (tmp_path / "m.onnx").write_text("other model bytes")
    (tmp_path / "m.regress.toml").write_text('targets = ["vpu", "cpu"]\ncalib_synthetic = 2')
    vpu = discover(suite)[0]
    notes = golden.judge(vpu, ok, golden.read(vpu.golden_path)["vpu"], "0.2.0")["notes"]
    assert notes == [
        "the model file changed since the golden was recorded",
        "settings changed since the golden: calib_synthetic",
        "golden recorded by vpuc 0.1.0, this is 0.2.0",
    ]


def test_an_unreadable_golden_is_a_user_error_unless_updating(tmp_path):
    path = tmp_path / "m.golden.json"
    path.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(SuiteError, match=r"m\.golden\.json: unreadable golden"):
        golden.read(path)
    assert golden.read(path, lenient=True) == {}


def test_junit_xml(tmp_path):
    def job(model, status, changes=(), reason=None):
        return {"model": model, "target": "vpu", "status": status, "reason": reason, "changes": list(changes),
                "notes": [], "counts": {}, "timings": {"elapsed_s": 2.0}}  # fmt: skip

    regressed = {"figure": "cycles.total", "golden": 1000, "new": 1100, "delta": "+100 (+10.00%)",
                 "status": "regressed", "tolerance": "2%"}  # fmt: skip
    report = {
        "suite": "s", "update_golden": False,
        "jobs": [job("a", "same"), job("b", "regressed", [regressed]), job("c", "failed", reason="timed out after 3 s"),
                 job("d", "no golden", reason="no golden figures for target 'vpu' in d.golden.json")],
    }  # fmt: skip
    path = tmp_path / "junit.xml"
    write_junit(report, path)
    suite = ET.parse(path).getroot().find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "2", "1")
    cases = {c.get("classname"): c for c in suite.findall("testcase")}
    assert cases["regress.a"].find("failure") is None and cases["regress.a"].find("error") is None
    failure = cases["regress.b"].find("failure")
    assert failure.get("message") == "regressed: cycles.total" and "1000 -> 1100" in failure.text
    assert cases["regress.c"].find("error").get("message") == "timed out after 3 s"
    assert cases["regress.d"].find("failure") is not None
    write_junit({**report, "update_golden": True}, path)  # recorded: only the failed job is an error
    suite = ET.parse(path).getroot().find("testsuite")
    assert (suite.get("failures"), suite.get("errors")) == ("0", "1")


def test_a_payload_carries_the_models_external_data_and_sidecar_files(tmp_path):
    """What a Ray task on another machine gets: every file the job reads, by content."""
    import numpy as np
    import onnx

    from vpuc.compiler.regress.jobs import inline, payload
    from vpuc.examples import zoo

    onnx.save(zoo.build("tinyconvnet"), tmp_path / "m.onnx", save_as_external_data=True,
              all_tensors_to_one_file=True, location="m.weights", size_threshold=0)  # fmt: skip
    np.savez(tmp_path / "calib.npz", input=np.zeros((2, 1, 3, 16, 16), np.float32))
    (tmp_path / "m.regress.toml").write_text(
        'calib = "calib.npz"\nseed = 7\ninput_shapes = {input = [1, 3, 16, 16]}\n'
    )
    (job,) = discover(tmp_path)
    packed = payload(job, has_vpu=True)
    assert set(packed["files"]) == {"model/m.onnx", "model/m.weights", "calib.npz"}
    assert packed["compile"] == ["model/m.onnx", "--target", "vpu", "-o", "model.vpub", "--json",
                                 "--input-shape", "input=1x3x16x16", "--calib", "calib.npz"]  # fmt: skip
    assert packed["run"] == ["model.vpub", "--check", "model/m.onnx", "--json", "--seed", "7"]
    shipped = inline(packed)["files"]
    assert shipped["model/m.weights"] == (tmp_path / "m.weights").read_bytes()
    assert shipped["calib.npz"] == (tmp_path / "calib.npz").read_bytes()
    assert payload(job, has_vpu=False)["compile"][-2:] == [
        "--input-shape",
        "input=1x3x16x16",
    ]  # no calibration on a CPU
