"""bench/run_all.py's summary reads what each bench wrote, whatever its age: the figures
below are worked out by hand from the JSON written here (no bench runs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture
def run_all(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(BENCH))
    sys.modules.pop("run_all", None)
    import run_all

    monkeypatch.setattr(run_all, "OUT", tmp_path)
    return run_all


def _write(folder: Path, name: str, figures: dict) -> None:
    (folder / f"{name}.json").write_text(json.dumps(figures))


def _rows(run_all) -> dict:
    return {row["figure"]: row for row in run_all.summary()["rows"]}


def test_every_bench_program_is_run_and_no_helper(run_all):
    found = set(run_all.programs())
    assert {"cpu_vs_ort", "e2e", "fusion_vs_ort", "quant_vs_ort", "roofline", "sim_speed"} <= found
    assert not found & {"_common", "_cpu_worker", "resnet18_program", "run_all"}


def test_summary_of_old_and_new_json_shapes(run_all, tmp_path):
    # cpu_vs_ort as main writes it, plus a key no summary knows
    _write(tmp_path, "cpu_vs_ort", {"models": {"a": {"latency_ratio": 3.0, "brand_new": 1},
                                               "b": {"latency_ratio": 1.0}, "c": {"latency_ratio": 2.0}}})  # fmt: skip
    # quant_vs_ort in its newer shape: vpuc's default configuration against onnxruntime's best
    _write(tmp_path, "quant_vs_ort", {"models": {
        "a": {"vpuc": {"default": {"sqnr_db": 40.0}}, "ort_best": ["per_channel/minmax", 41.5]},
        "b": {"ours_sqnr_db": 30.0, "ort_sqnr_db": 28.0},  # the older shape
    }})  # fmt: skip
    _write(tmp_path, "e2e", {"runs": {"a@vpu": {"sim_over_numpy": 1.5, "estimate_over_simulated": 0.97},
                                      "b@vpu": {"sim_over_numpy": 2.5, "estimate_over_simulated": 1.02}}})  # fmt: skip
    _write(tmp_path, "sim_speed", {"ratio_vs_numpy": 1.9})
    rows = _rows(run_all)
    cpu = rows["CPU path latency / onnxruntime, untuned"]
    assert (cpu["min"], cpu["median"], cpu["max"], cpu["worst"], cpu["count"]) == (1.0, 2.0, 3.0, "a", 3)
    quant = rows["int8 SQNR - onnxruntime quantize_static (dB)"]
    assert quant["values"] == {"a": -1.5, "b": 2.0} and quant["worst"] == "a"  # the lower gain is worse
    sim = rows["simulator wall time / numpy floor"]
    assert sim["values"] == {"resnet18 program": 1.9, "a@vpu": 1.5, "b@vpu": 2.5} and sim["median"] == 1.9
    estimate = rows["compile-time estimate / simulated cycles"]
    assert estimate["worst"] == "a@vpu"  # 3% from 1 against 2%
    assert rows["CPU path latency / onnxruntime, tuned"]["count"] == 0  # not measured
    assert rows["simulated cycles / roofline bound"]["count"] == 0


def test_corpus_compile_times(run_all, tmp_path):
    _write(tmp_path, "corpus", {"budgets_s": {"mlperf_tiny_vpu": 2.0, "vision_10mb_vpu": 20.0}, "models": {
        "tflite_resnet8": {"vpu": {"compiled": 1, "compile_s": 3.0, "steps_s": {"host_build": 1.5}},
                           "cpu": {"compiled": 1, "compile_s": 1.0, "steps_s": {"host_build": 0.8}}},
        "resnet18_half_10mb": {"vpu": {"compiled": 1, "compile_s": 10.0, "steps_s": {"host_build": 4.0}}},
        "broken": {"vpu": {"compiled": 0, "error": "x"}},
    }})  # fmt: skip
    rows = _rows(run_all)
    assert rows["whole compile time / its relax.build (host build) time"]["values"] == {
        "tflite_resnet8@vpu": 2.0, "tflite_resnet8@cpu": 1.25, "resnet18_half_10mb@vpu": 2.5,
    }  # fmt: skip
    budget = rows["compile time / budget (MLPerf-Tiny, 10 MB vision, vpu)"]
    assert budget["values"] == {"tflite_resnet8@vpu": 1.5, "resnet18_half_10mb@vpu": 0.5}
    assert budget["worst"] == "tflite_resnet8@vpu"


def test_roofline_by_target(run_all, tmp_path):
    _write(tmp_path, "roofline", {"models": {}, "by_target": {
        "vpu": {"m": {"cycles_over_bound": 1.2, "dram_over_compulsory": 1.0}},
        "u55-256": {"m": {"cycles_over_bound": 2.0, "dram_over_compulsory": 2.5}},
    }})  # fmt: skip
    rows = _rows(run_all)
    assert rows["simulated cycles / roofline bound"]["values"] == {"m@vpu": 1.2, "m@u55-256": 2.0}
    assert rows["DRAM bytes / compulsory bytes"]["worst"] == "m@u55-256"


def test_roofline_vector_bound_at_the_targets_rates():
    """The roofline's vector term by hand: u55-256 pools 6 taps a cycle, adds 4/3
    elements, clips 4, looks up 1, multiplies 8/9 (targets/u55-256.toml); vpu 32 of each."""
    from vpuc.targets import load_target
    from vpuc.targets.roofline import vector_cycles

    def work(kind, target, taps=1):
        return vector_cycles(load_target(target).hardware, kind, 8 * 8 * 16, taps)  # 1024 elements

    assert work("pool", "u55-256", taps=4) == pytest.approx(1024 * 4 / 6)
    assert work("add", "u55-256") == pytest.approx(768)
    assert work("softmax", "u55-256") == pytest.approx(1024 / 4 + 1024 / 1 + 1024 * 9 / 8)
    assert work("add", "vpu") == pytest.approx(32)
    assert work("concat", "vpu") == 0
