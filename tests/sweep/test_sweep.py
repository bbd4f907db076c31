"""`vpuc sweep` as a user runs it (a fresh `vpuc` process each time), on a small QDQ model
(two convolutions and a classifier, quantised by onnxruntime's quantize_static):

    4 points (mac_rows 8, 16 x sram_bytes 1K, 64K), serial: the 1 KiB points are infeasible
    (no layer fits), the others' figures must equal what `vpuc compile --target POINT.toml`
    and `vpuc run` report for that point; --jobs 2 and --ray (a local instance, 2 workers)
    must give the serial records; a second run into the same folder computes nothing.

Bad input answers in one line naming the parameter, exit 2.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

from vpuc.examples.graph_builder import GraphBuilder

PARAMS = ["--param", "mac_rows=8,16", "--param", "sram_bytes=1K,64K"]


def _micro() -> onnx.ModelProto:
    g = GraphBuilder("micro", seed=3)
    x = g.op("Relu", [g.conv("input", "conv1", 3, 16)], "relu1")
    x = g.op("Relu", [g.conv(x, "conv2", 16, 16)], "relu2")
    g.global_pool_classifier(x, channels=16, classes=4)
    return g.model({"input": [1, 3, 16, 16]}, {"logits": [1, 4]})


class _Samples(CalibrationDataReader):
    def __init__(self):
        rng = np.random.default_rng(0)
        self.samples = iter(
            [{"input": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
        )

    def get_next(self):
        return next(self.samples, None)


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sweep")
    onnx.save(_micro(), folder / "float.onnx")
    quantize_static(str(folder / "float.onnx"), str(folder / "micro.onnx"), _Samples(), quant_format=QuantFormat.QDQ,
                    per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8)  # fmt: skip
    return folder / "micro.onnx"


@pytest.fixture(scope="module")
def serial(model, vpuc):
    out = model.parent / "serial"
    done = vpuc("sweep", model, *PARAMS, "-o", out, "--json")
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def _records(result):
    return [(p["id"], p["point"], p["status"], p["reason"], p["figures"]) for p in result["points"]]


def test_infeasible_points_are_recorded_and_the_sweep_goes_on(serial):
    _, result = serial
    status = {p["point"]["sram_bytes"]: set() for p in result["points"]}
    for p in result["points"]:
        status[p["point"]["sram_bytes"]].add(p["status"])
    assert status == {1024: {"infeasible"}, 65536: {"ok"}}
    reasons = [p["reason"] for p in result["points"] if p["status"] == "infeasible"]
    assert all("SRAM" in r for r in reasons), reasons


def test_each_point_equals_compile_and_run(serial, vpuc, tmp_path):
    folder, result = serial
    for p in [p for p in result["points"] if p["status"] == "ok"]:
        toml = folder / "targets" / f"{p['id']}.toml"
        artifact = tmp_path / f"{p['id']}.vpub"
        compiled = vpuc("compile", serial[0].parent / "micro.onnx", "--target", toml, "-o", artifact,
                        "--no-reference", "--json")  # fmt: skip
        assert compiled.returncode == 0, compiled.stderr
        ran = vpuc("run", artifact, "--json")
        assert ran.returncode == 0, ran.stderr
        report, run = json.loads(compiled.stdout), json.loads(ran.stdout)
        f = p["figures"]
        assert (f["cycles"], f["vpu_cycles"], f["link_cycles"]) == tuple(
            run["cycles"][k] for k in ("total", "vpu", "link")
        )
        assert f["subgraphs"] == run["subgraphs"]
        assert (f["to_vpu_bytes"], f["from_vpu_bytes"]) == (
            run["transfer_bytes"]["to_vpu"],
            run["transfer_bytes"]["from_vpu"],
        )
        assert f["host_ops"] == report["totals"]["cpu_ops"]
        clock = p["point"].get("clock_mhz", 1000)
        assert f["latency_us"] == pytest.approx(run["cycles"]["total"] / clock)


def test_outputs_and_resume(serial, model, vpuc):
    folder, result = serial
    rows = list(csv.DictReader((folder / "sweep.csv").open()))
    assert [r["point"] for r in rows] == [p["id"] for p in result["points"]]
    assert {"pareto.svg", "pareto.png", "effect_mac_rows.svg", "effect_sram_bytes.png"} <= {
        p.name for p in folder.iterdir()
    }
    again = vpuc("sweep", model, *PARAMS, "-o", folder, "--json")
    assert again.returncode == 0, again.stderr
    second = json.loads(again.stdout)
    assert second["summary"]["computed"] == 0 and second["summary"]["reused"] == 4
    assert _records(second) == _records(result)


@pytest.mark.parametrize("where", [["--jobs", "2"], ["--ray", "--workers", "2"]], ids=["jobs", "ray"])
def test_jobs_and_ray_give_the_serial_records(serial, model, vpuc, tmp_path, where):
    done = vpuc("sweep", model, *PARAMS, "-o", tmp_path / "out", "--json", "--no-plots", *where)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["executor"]["kind"] == ("ray" if "--ray" in where else "local")
    assert _records(result) == _records(serial[1])


@pytest.mark.parametrize(
    "args, named",
    [
        (["--param", "mac_size=8,16"], "--param mac_size: unknown parameter"),
        (["--param", "mac_rows=0,16"], "--param mac_rows=0: 0 is out of range [1, 1024]"),
        (["--param", "sram_bytes=512"], "--param sram_bytes=512: 512 is out of range"),
        (["--param", "ops.relu=maybe"], "--param ops.relu=maybe: an op is on or off"),
        (["--param", "mac_rows=" + ",".join(map(str, range(1, 401))),
          "--param", "mac_cols=" + ",".join(map(str, range(1, 401)))], "the grid has 160,000 points"),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_naming_the_parameter(model, vpuc, tmp_path, args, named):
    done = vpuc("sweep", model, *args, "-o", tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and named in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()
