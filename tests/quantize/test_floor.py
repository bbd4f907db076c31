"""Per-layer sensitivity, --keep-float and the accuracy floor (floor.py, measure.py, layers.py).

The sensitivity comes from one switchable build (switch.py); here it is checked against a
compile that keeps every other layer in float (a separate realisation and build), and the
floor on the MiniLM-class sentence encoder, the case it exists for."""

from __future__ import annotations

import numpy as np
import pytest
from quantize_testing import optimised

from vpuc.compiler.errors import CompileError
from vpuc.compiler.partition import partition_for_vpu
from vpuc.compiler.quantize import (
    AccuracyFloorError,
    CalibrationData,
    QuantOptions,
    quantize,
    split_file_samples,
    synthetic_split,
)
from vpuc.examples import sentence_encoder
from vpuc.targets import load_target

TARGET = load_target("vpu")
TINY_LAYERS = [
    "stage1/conv",
    "stage2/conv",
    "stage2/pool",
    "stage3/conv",
    "stage4/conv",
    "stage4/pool",
    "head/flatten",
    "head/fc",
]


def _quantize(name_or_model, split=None, **options):
    mod, provenance, imported = optimised(name_or_model)
    split = split or synthetic_split(imported.inputs, 32, seed=0, onnx_model=imported.onnx_model)
    result = quantize(
        mod, TARGET, imported.onnx_model, provenance, split.calibration, held_out=split.held_out,
        profitability=False, options=QuantOptions(**options),
    )  # fmt: skip
    return result, mod, provenance, imported


@pytest.fixture(scope="module")
def tiny():
    from vpuc.examples import zoo

    model = zoo.build("tinyconvnet")
    mod, provenance, imported = optimised(model)
    split = synthetic_split(imported.inputs, 32, seed=0, onnx_model=imported.onnx_model)
    held = split.held_out.subset(range(0, 4), "first 4")  # what the sensitivity reads
    return model, type(split)(split.calibration, held)


def test_sensitivity_names_every_layer_and_matches_a_compile_of_that_layer_alone(tiny):
    model, split = tiny
    # AdaRound off on both sides: its budget is shared by the layers quantised, so one layer
    # alone would get more iterations (different weights) than it does among eight
    result = _quantize(model, split, min_sqnr_db=None, adaround=False)[0]
    rows = {row["layer"]: row for row in result.accuracy["sensitivity"]}
    assert list(rows) == TINY_LAYERS and not any(row["kept_float"] for row in rows.values())
    alone = _quantize(
        model,
        split,
        min_sqnr_db=None,
        sensitivity=False,
        adaround=False,
        keep_float=tuple(n for n in TINY_LAYERS if n != "stage4/conv"),
    )[0]
    assert [op["composite"] for op in alone.summary["quantized_ops"]] == ["vpu.conv2d_bias_act"]
    figure = alone.accuracy["outputs"][0]["sqnr_db"]
    assert rows["stage4/conv"]["sqnr_alone_db"] == pytest.approx(figure, abs=0.01)
    assert figure < 200.0  # it is quantised: the figure is not the exact-match cap


def test_keep_float_keeps_the_whole_layer_on_the_cpu(tiny):
    model, split = tiny
    result, mod, provenance, imported = _quantize(model, split, keep_float=("stage3/conv",))
    kept = {b for b, reason in result.kept_float.items() if reason.endswith("--keep-float stage3/conv")}
    assert kept and all(provenance.get(b, [None])[0] == "stage3/conv" or "relu" in b for b in kept)
    quantized = {
        n for op in result.summary["quantized_ops"] for b in op["bindings"] for n in provenance.get(b, [])
    }
    assert "stage3/conv" not in quantized and "stage3/relu" not in quantized and "stage4/conv" in quantized
    report = partition_for_vpu(
        result.mod,
        TARGET,
        imported.onnx_model,
        result.provenance,
        profitability=False,
        blocked=result.kept_float,
    ).report
    devices = {op["name"]: (op["device"], op["reason"]) for op in report["ops"]}
    assert devices["stage3/conv"] == ("cpu", "kept in float on the CPU: --keep-float stage3/conv")
    assert devices["stage3/relu"][0] == "cpu" and devices["stage4/conv"][0] == "vpu"


def test_keep_float_of_an_unknown_node_is_a_compile_error(tiny):
    model, split = tiny
    with pytest.raises(CompileError, match="--keep-float 'stage3/cnv': the model has no node of that name"):
        _quantize(model, split, keep_float=("stage3/cnv",))


@pytest.fixture(scope="module")
def encoder():
    model = sentence_encoder.sentence_encoder(layers=2)
    feeds = sentence_encoder.realistic_feeds(40, seed=0)
    return model, split_file_samples(CalibrationData(feeds, "realistic sentences"))


def test_floor_keeps_the_fewest_sensitive_layers_in_float(encoder):
    """All int8, the encoder is below 25 dB on realistic sentences; the floor keeps the
    most sensitive layers in float until it holds, and no kept layer is superfluous."""
    model, split = encoder
    result = _quantize(model, split)[0]
    floor = result.accuracy["floor"]
    assert floor["sqnr_db_all_int8"] < 25.0 <= floor["sqnr_db"] == result.accuracy["outputs"][0]["sqnr_db"]
    assert floor["reached"] and 1 <= len(floor["kept_float"]) <= 4
    ranked = sorted(result.accuracy["sensitivity"], key=lambda r: r["sqnr_alone_db"])
    assert floor["kept_float"][0] == ranked[0]["layer"]  # the most sensitive first
    assert any("kept" in w and "in float" in w for w in result.warnings)
    assert floor["search"][0] == {"kept_float": [], "sqnr_db": floor["sqnr_db_all_int8"]}
    assert floor["search"][-1]["kept_float"] == floor["kept_float"]


def test_unreachable_floor_fails_with_the_figure_unless_accepted(encoder):
    model, split = encoder
    with pytest.raises(
        AccuracyFloorError, match=r"output SQNR \d+\.\d dB on the held-out samples is below --min-sqnr 90"
    ):
        _quantize(model, split, min_sqnr_db=90.0)
    accepted = _quantize(model, split, min_sqnr_db=90.0, accept_below_floor=True)[0]
    assert not accepted.accuracy["floor"]["reached"] and "(accepted)" in accepted.warnings[-1]
    assert np.isfinite(accepted.accuracy["outputs"][0]["sqnr_db"])


def test_the_floor_refusal_says_the_samples_were_synthetic():
    """Issue 26 item 11: on synthetic data the refusal says so and shows --calib."""
    model = sentence_encoder.sentence_encoder(layers=2)
    feeds = sentence_encoder.realistic_feeds(10, seed=0)
    split = split_file_samples(CalibrationData(feeds, "synthetic (N=10, seed=0)", synthetic=True))
    with pytest.raises(AccuracyFloorError, match=r"synthetic random ones: no --calib X\.npz was given"):
        _quantize(model, split, min_sqnr_db=90.0)
