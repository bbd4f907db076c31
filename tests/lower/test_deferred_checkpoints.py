"""A program's checkpoints (checkpoints.py) are worked out when first read, not when it is
lowered: the partitioner's estimates lower candidate subgraphs no artifact keeps (40 of
MobileNetV2-224's 41 lowerings), and working out their checkpoints was 10 s of its compile.
Deferring must not change them: nothing between the lowering and the read may change what
they are computed from."""

from __future__ import annotations

from pathlib import Path

import pytest

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import checkpoints, emit

MODEL = Path(__file__).resolve().parents[1] / "fixtures" / "tf2onnx" / "tflite_mobilenet.onnx"


class _Eager(checkpoints.Deferred):
    """As before the deferral: worked out at the lowering."""

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self()


def _checkpoints(target: str) -> tuple[list[dict], int]:
    prepared = prepare_model(MODEL, target, CompileOptions())
    artifact = build_artifact(MODEL, prepared, reference=False)
    return [entry["checkpoints"] for entry in artifact.manifest["vpu_programs"]], len(prepared.programs)


@pytest.mark.parametrize("target", ["vpu", "u55-256"])
def test_deferred_checkpoints_are_those_worked_out_at_the_lowering(target, monkeypatch):
    monkeypatch.setattr(memo, "_LOWERED", {})
    deferred, _ = _checkpoints(target)
    monkeypatch.setattr(memo, "_LOWERED", {})
    monkeypatch.setattr(emit, "Deferred", _Eager)
    eager, _ = _checkpoints(target)
    assert deferred == eager and any(c["tensors"] for c in deferred)


def test_only_the_written_programs_work_out_their_checkpoints(monkeypatch):
    monkeypatch.setattr(memo, "_LOWERED", {})
    emitted, worked = [], []
    real = checkpoints.checkpoints

    class Counted(checkpoints.Deferred):
        def __init__(self, *args) -> None:
            emitted.append(1)
            super().__init__(*args)

    monkeypatch.setattr(emit, "Deferred", Counted)
    monkeypatch.setattr(checkpoints, "checkpoints", lambda *a: worked.append(1) or real(*a))
    _, programs = _checkpoints("vpu")
    assert len(worked) == programs < len(emitted)  # the partitioner's estimates emitted 4
