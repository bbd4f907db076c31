"""`vpuc partition` on a QDQ model runs nothing on samples (issue 23 item 3): a QDQ model keeps
its own scales, so its placement cannot depend on an accuracy measurement; the placements it
prints are the ones `vpuc compile` builds."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest
from test_one_oracle import _qdq_chain  # noqa: I001

from vpuc.compiler import cli, compile_model
from vpuc.compiler.driver import CompileOptions
from vpuc.compiler.quantize import api
from vpuc.compiler.quantize.calibration import observe
from vpuc.compiler.quantize.qdq import model as qdq_model

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
TINYCONV = ANCHORS / "tinyconv" / "tinyconv_int8_qdq.onnx"


def _placements(ops: list[dict]) -> list[tuple]:
    return [(op["name"], op["device"], op["subgraph"], op["reason"]) for op in ops]


def _refuse(*args, **kwargs):
    raise AssertionError("vpuc partition ran the model on samples")


@pytest.mark.parametrize("which", ["chain", "tinyconv"])
def test_partition_of_a_qdq_model_measures_nothing_and_places_as_compile_does(which, tmp_path, monkeypatch, capsys):
    if which == "chain":
        path, flags = tmp_path / "chain.onnx", ["--no-profitability"]
        onnx.save(_qdq_chain([0, 3, 0, 0]), path)  # conv1's weights have a zero point: it stays on the CPU
    else:
        if not TINYCONV.is_file():
            pytest.skip("the anchors are not beside the repo")
        path, flags = TINYCONV, []
    options = CompileOptions(profitability=not flags)
    compiled = compile_model(str(path), target="vpu", options=options).report["partition"]["ops"]
    devices = {op["device"] for op in compiled}
    assert "vpu" in devices and (which != "chain" or "cpu" in devices)  # something to get wrong
    monkeypatch.setattr(qdq_model, "qdq_accuracy", _refuse)  # onnxruntime on the samples
    monkeypatch.setattr(observe.Observer, "__init__", _refuse)  # TVM's VM on them
    monkeypatch.setattr(api, "synthetic_calibration", _refuse)  # drawing them
    assert cli.main(["partition", str(path), "--target", "vpu", "--json", *flags]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert _placements(printed["ops"]) == _placements(compiled)


def test_partition_help_says_where_placement_depends_on_calibration(capsys):
    with pytest.raises(SystemExit):
        cli.main(["partition", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "QDQ model is partitioned without running it" in text
    assert "float model is calibrated first" in text and "--min-sqnr" in text
