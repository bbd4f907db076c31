"""The graph pipeline's memo (compiler/pipeline.py): a model optimised again in one process
with the same options and passes runs no pass and gets the result a cold run gives, in a
copy of its own; other options, other passes or a changed module run the passes again."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import tvm

from vpuc.compiler import pipeline
from vpuc.compiler.frontend import import_model
from vpuc.compiler.pipeline import PassSelection, optimize_imported

MODEL = Path(__file__).resolve().parent.parent / "fixtures" / "tf2onnx" / "tflite_dscnn.onnx"


@pytest.fixture
def runs(monkeypatch) -> list:
    """Each call of pipeline.optimize (the passes proper) from now on."""
    calls = []
    real = pipeline.optimize
    monkeypatch.setattr(pipeline, "optimize", lambda *a, **k: calls.append(a) or real(*a, **k))
    return calls


def _same(a, b) -> None:
    tvm.ir.assert_structural_equal(a.mod, b.mod)
    assert (a.audit, a.layout, a.provenance) == (b.audit, b.layout, b.provenance)
    assert (a.ops_before, a.ops_after, a.dump) == (b.ops_before, b.ops_after, b.dump)


def test_a_repeated_optimisation_runs_no_pass(runs, monkeypatch):
    first = optimize_imported(import_model(MODEL), "vpu")
    first.provenance.clear()  # a caller writes into its result
    first.mod["main"] = first.mod["main"].with_attr("written", 1)
    again = optimize_imported(import_model(MODEL), "vpu")
    assert len(runs) == 1
    assert set(again.timings) == set(first.timings) and not any(again.timings.values())
    monkeypatch.setattr(pipeline, "_OPTIMIZED", {})
    cold = optimize_imported(import_model(MODEL), "vpu")
    assert len(runs) == 2
    _same(again, cold)


def test_other_options_passes_or_modules_run_again(runs, monkeypatch):
    optimize_imported(import_model(MODEL), "vpu")
    optimize_imported(import_model(MODEL), "cpu")  # other pass options (the layout pass's target)
    optimize_imported(import_model(MODEL), "vpu", selection=PassSelection(opt_level=2))
    optimize_imported(import_model(MODEL), "vpu", dump_after="dce")
    changed = import_model(MODEL)
    changed.mod["main"] = changed.mod["main"].with_attr("changed", 1)
    optimize_imported(changed, "vpu")
    steps = tuple(dataclasses.replace(s, why=s.why + ".") for s in pipeline.PIPELINE)
    monkeypatch.setattr(pipeline, "PIPELINE", steps)  # patched passes (tests/fuzz/test_bisect.py)
    optimize_imported(import_model(MODEL), "vpu")
    assert len(runs) == 6
    optimize_imported(import_model(MODEL), "vpu")
    assert len(runs) == 6
