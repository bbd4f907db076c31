"""The per-layer sensitivity by default only where its passes are cheap (issue 23: a YOLOv8n at
320 px spent most of its 89 s of compile CPU on 328 sensitivity passes nobody asked for).

The rule (measure.sensitivity_wanted) against values worked by hand, and on tinyconvnet (8
layers, 1,235,072 MACs: 8 x 4 x 1,235,072 = 39,522,304 multiply-accumulates) with the limit
moved below and above that: skipped with the reason in the report, measured when asked, and
measured anyway when the accuracy floor needs it to choose the layers kept in float."""

from __future__ import annotations

import pytest
from quantize_testing import optimised

from vpuc.compiler.quantize import QuantOptions, quantize, synthetic_split
from vpuc.compiler.quantize.measurement import measure
from vpuc.compiler.quantize.measurement.measure import sensitivity_wanted
from vpuc.targets import load_target

TINY_SENSITIVITY_MACS = 8 * 4 * 1_235_072


def test_the_rule_by_hand():
    auto = QuantOptions()
    assert sensitivity_wanted(auto, 82, 1_092_998_400)[0] is False  # YOLOv8n 320: 3.6e11
    wanted, why = sensitivity_wanted(auto, 54, 16_315_376)  # PP-OCR cls: 3.5e9, under 1e10
    assert wanted and why is None
    assert sensitivity_wanted(auto, 10, 250_000_000) == (True, None)  # 1e10 exactly: measured
    assert sensitivity_wanted(auto, 10, 250_000_001)[0] is False
    assert sensitivity_wanted(QuantOptions(sensitivity=True), 82, 1_092_998_400) == (True, None)
    assert sensitivity_wanted(QuantOptions(sensitivity=False), 1, 1) == (False, None)
    why = sensitivity_wanted(auto, 82, 1_092_998_400)[1]
    assert "82 layers x 4 samples x 1,092,998,400 MACs" in why and "--sensitivity" in why


@pytest.fixture(scope="module")
def tiny():
    from vpuc.examples import zoo

    mod, provenance, imported = optimised(zoo.build("tinyconvnet"))
    split = synthetic_split(imported.inputs, 32, seed=0, onnx_model=imported.onnx_model)
    return mod, provenance, imported, split


def _quantize(tiny, **options):
    mod, provenance, imported, split = tiny
    return quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration, held_out=split.held_out,
        profitability=False, options=QuantOptions(**options),
    )  # fmt: skip


@pytest.mark.parametrize(
    ("limit", "options", "measured"),
    [
        (TINY_SENSITIVITY_MACS, {}, True),  # at the limit: measured
        (TINY_SENSITIVITY_MACS - 1, {}, False),  # past it: skipped, said why
        (TINY_SENSITIVITY_MACS - 1, {"sensitivity": True}, True),  # asked
        (10**12, {"sensitivity": False}, False),  # declined
    ],
)
def test_tinyconvnet_sensitivity_by_the_limit(tiny, monkeypatch, limit, options, measured):
    monkeypatch.setattr(measure, "SENSITIVITY_AUTO_MACS", limit)
    accuracy = _quantize(tiny, min_sqnr_db=None, **options).accuracy
    assert bool(accuracy["sensitivity"]) == measured
    skipped = accuracy["sensitivity_skipped"]
    assert (skipped is not None) == (not measured and "sensitivity" not in options), skipped
    if measured:
        assert len(accuracy["sensitivity"]) == 8 and accuracy["sensitivity_passes"] >= 8


def test_the_floor_measures_it_when_it_needs_it(tiny, monkeypatch):
    """A floor the all-int8 model misses orders the layers by their sensitivity: measured even
    past the limit (and the floor then keeps layers in float)."""
    monkeypatch.setattr(measure, "SENSITIVITY_AUTO_MACS", 1)
    result = _quantize(tiny, min_sqnr_db=200.0, accept_below_floor=True)
    assert len(result.accuracy["sensitivity"]) == 8 and result.accuracy["sensitivity_skipped"] is None
    assert result.accuracy["floor"]["kept_float"]
