"""Repeated compiles in one process (the regression runner, the sweep) reuse the Relax
import, the graph passes' result, the host build, the lowered programs, the QDQ accuracy
measurement and the planner's choices: the artifact must be the one a cold process makes,
and another model must not get the first one's results."""

from __future__ import annotations

import json
from pathlib import Path

from vpuc.compiler import pipeline
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.frontend import importer
from vpuc.compiler.host import build
from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import emit, tile_mac
from vpuc.compiler.quantize.qdq import reference

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "tf2onnx"
DSCNN, MOBILENET = FIXTURES / "tflite_dscnn.onnx", FIXTURES / "tflite_mobilenet.onnx"


def _compiled(model: Path):
    artifact = build_artifact(model, prepare_model(model, "vpu", CompileOptions()))
    report = json.loads(artifact.members["report.json"])
    binaries = {k: v for k, v in artifact.members.items() if k.startswith("vpu/") or k == "host.so"}
    return binaries, report["accuracy"], report["summary"]


def _without_times(summary):
    if isinstance(summary, dict):
        return {k: _without_times(v) for k, v in summary.items() if not k.endswith("_s")}
    if isinstance(summary, list):
        return [_without_times(v) for v in summary]
    return summary


def _empty_caches(monkeypatch) -> None:
    memos = ((build, "_BUILT"), (reference, "_MEASURED"), (tile_mac, "_CHOSEN"))
    for module, name in (*memos, (memo, "_LOWERED"), (importer, "_IMPORTED"), (pipeline, "_OPTIMIZED")):
        monkeypatch.setattr(module, name, {})


def test_a_repeated_compile_equals_a_cold_one(monkeypatch):
    _empty_caches(monkeypatch)
    first = _compiled(DSCNN)
    other = _compiled(MOBILENET)
    built = len(build._BUILT)
    again = _compiled(DSCNN)
    assert len(build._BUILT) == built == 2  # the second DS-CNN compile reused its build
    _empty_caches(monkeypatch)
    cold = _compiled(DSCNN)
    for got in (first, again):
        assert got[0] == cold[0]  # VPU programs, weights and the host library, byte for byte
        assert got[1] == cold[1]  # the accuracy report
        assert _without_times(got[2]) == _without_times(cold[2])
    assert other[0]["host.so"] != first[0]["host.so"]
    assert other[1] != first[1]


def _members(model: Path) -> dict[str, bytes]:
    """Every member of the artifact, the report without its timings."""
    artifact = build_artifact(model, prepare_model(model, "vpu", CompileOptions()))
    members = {k: v if isinstance(v, bytes) else v.encode() for k, v in artifact.members.items()}
    members["report.json"] = json.dumps(
        _without_times(json.loads(members["report.json"])), sort_keys=True
    ).encode()
    return members


def test_a_second_compile_lowers_and_imports_nothing(monkeypatch):
    """The second compile of a model takes its programs from the lowering memo, its Relax
    module from the import memo and its optimised module from the pipeline's memo; the
    artifact is byte for byte a cold compile's."""
    _empty_caches(monkeypatch)
    calls = []
    real_lower, real_import = emit.lower_subgraph, importer.compat.relax_from_onnx
    monkeypatch.setattr(emit, "lower_subgraph", lambda *a: calls.append("lower") or real_lower(*a))
    monkeypatch.setattr(
        importer.compat, "relax_from_onnx", lambda *a: calls.append("import") or real_import(*a)
    )
    real_passes = pipeline.optimize
    monkeypatch.setattr(pipeline, "optimize", lambda *a: calls.append("passes") or real_passes(*a))
    first = _members(DSCNN)
    assert "lower" in calls and calls.count("import") == calls.count("passes") == 1
    calls.clear()
    again = _members(DSCNN)
    assert calls == []
    _empty_caches(monkeypatch)
    cold = _members(DSCNN)
    assert calls.count("import") == calls.count("passes") == 1 and "lower" in calls
    assert again.keys() == cold.keys() == first.keys()
    for name in cold:
        assert again[name] == cold[name] == first[name], name
