"""`vpuc run --check MODEL`: is the result right?

Float artifacts: the same inputs through onnxruntime on the original model (graph
optimisations disabled, so its numbers are the ONNX semantics, not a fused approximation).
For each output, max_abs_err = max |ours - ort|, rel_err = max_abs_err / max |ort| (when
the reference is all zeros, rel_err = max_abs_err), sqnr_db = 10 log10(sum ref^2 / sum
(ours - ref)^2). Passes when every rel_err <= the tolerance (1e-4, or --tolerance).

int8 artifacts, two checks (both must pass):
  qdq    every int8 output of every VPU subgraph against the artifact's QDQ reference (the
         same graph with that subgraph evaluated on the host in float QDQ semantics by
         TVM, which equals onnxruntime on the QDQ graph with optimisations off):
         max_lsb = max |ours - reference| in quantisation steps, exact_share = the share
         of elements equal. Passes when max_lsb <= the tolerance (1 LSB, or --tolerance).
  float  against onnxruntime on the float model: each output's SQNR must reach a floor,
         the compile report's held-out SQNR for that output minus SQNR_MARGIN_DB (the
         quantisation error the compile measured, with room for other inputs; never above
         FLOAT_ROUNDING_DB, where only float rounding is left), or, when the
         QDQ reference on these very inputs is itself further from the float model, its
         SQNR minus REFERENCE_MARGIN_DB (one input can be harder than the held-out set: the
         VPU must then be no worse than the QDQ semantics it implements). Without either
         figure the SQNR is reported and not judged.
Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

SQNR_MARGIN_DB = 10.0
FLOAT_ROUNDING_DB = 80.0  # floors never ask more: float32 paths differ from onnxruntime by ~1e-7
REFERENCE_MARGIN_DB = 1.0
FLOAT_TOLERANCE = 1e-4
LSB_TOLERANCE = 1


class CheckError(ValueError):
    """The reference model cannot be run on these inputs."""


@dataclass(frozen=True)
class OutputError:
    name: str
    max_abs_err: float
    rel_err: float
    sqnr_db: float  # 10 log10(sum ref^2 / sum (ours - ref)^2); inf when equal

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "max_abs_err": self.max_abs_err,
            "rel_err": self.rel_err,
            "sqnr_db": self.sqnr_db if np.isfinite(self.sqnr_db) else None,
        }


def reference_outputs(model_path: str | Path, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run onnxruntime (CPU, optimisations off) on the original model."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, inputs), strict=True))
    except Exception as exc:  # onnxruntime raises its own exception classes
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckError(f"{model_path}: onnxruntime cannot run it on these inputs: {first}") from None


def compare(ours: dict[str, np.ndarray], reference: dict[str, np.ndarray], source: str) -> list[OutputError]:
    errors = []
    for name, ref in reference.items():
        if name not in ours:
            raise CheckError(f"{source}: the reference has output '{name}', the artifact does not")
        got = ours[name]
        if got.shape != ref.shape:
            raise CheckError(
                f"{source}: output '{name}' has shape {list(got.shape)}, reference {list(ref.shape)}"
            )
        diff = np.abs(got.astype(np.float64) - ref.astype(np.float64))
        max_abs = float(diff.max()) if diff.size else 0.0
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        noise = float(np.sum(diff**2))
        signal = float(np.sum(ref.astype(np.float64) ** 2))
        sqnr = 10 * np.log10(signal / noise) if noise > 0 else float("inf")
        errors.append(OutputError(name, max_abs, max_abs / scale if scale > 0 else max_abs, sqnr))
    return errors


def check_run(executable, inputs, outputs, model_path: str, tolerance: float | None) -> dict:
    """The check's report (docs/metrics.md); `passed` says whether every part passed."""
    numerics = executable.artifact.manifest.get("numerics", "float32")
    float_outputs = reference_outputs(model_path, inputs)
    errors = compare(outputs, float_outputs, model_path)
    if numerics != "int8":
        limit = FLOAT_TOLERANCE if tolerance is None else tolerance
        rows = [{**e.to_json(), "passed": bool(e.rel_err <= limit)} for e in errors]
        part = {"reference": "onnxruntime, float model", "tolerance_rel_err": limit, "outputs": rows}
        part["passed"] = all(r["passed"] for r in rows)
        return {
            "model": model_path,
            "numerics": numerics,
            "float": part,
            "qdq": None,
            "passed": part["passed"],
        }
    captured, qdq_outputs = executable.reference_run(inputs) if executable.has_reference else ({}, {})
    floors = _sqnr_floors(executable.artifact.report)
    for e in compare(qdq_outputs, float_outputs, model_path) if qdq_outputs else []:
        if np.isfinite(e.sqnr_db):
            by_reference = round(e.sqnr_db - REFERENCE_MARGIN_DB, 2)
            floors[e.name] = min(floors.get(e.name, by_reference), by_reference)
    rows = []
    for e in errors:
        floor = floors.get(e.name)
        rows.append(
            {**e.to_json(), "sqnr_floor_db": floor, "passed": bool(floor is None or e.sqnr_db >= floor)}
        )
    part = {
        "reference": "onnxruntime, float model",
        "outputs": rows,
        "passed": all(r["passed"] for r in rows),
    }
    qdq = _qdq_check(executable, captured, LSB_TOLERANCE if tolerance is None else tolerance)
    passed = part["passed"] and (qdq is None or qdq["passed"])
    return {"model": model_path, "numerics": numerics, "float": part, "qdq": qdq, "passed": passed}


def _sqnr_floors(report: dict) -> dict[str, float]:
    accuracy = (report or {}).get("accuracy") or {}
    floors = {}
    for out in accuracy.get("outputs", []):
        if out.get("sqnr_db") is not None:
            floors[out["name"]] = round(min(float(out["sqnr_db"]) - SQNR_MARGIN_DB, FLOAT_ROUNDING_DB), 2)
    return floors


def _qdq_check(executable, reference: dict, tolerance: float) -> dict | None:
    """Every VPU subgraph's int8 outputs against the QDQ reference, or None without one."""
    if not executable.has_reference or not executable.vpu_calls:
        return None
    calls = executable.last_run.calls if executable.last_run else []
    rows = []
    for call in calls:
        expected = reference.get(call.subgraph, [])
        entry = next(c for c in executable.vpu_calls if c.subgraph == call.subgraph)
        for k, (ours, ref) in enumerate(zip(call.outputs, expected, strict=False)):
            diff = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
            rows.append(
                {
                    "subgraph": call.subgraph,
                    "output": entry.outputs[k]["name"],
                    "elements": int(diff.size),
                    "max_lsb": int(diff.max()) if diff.size else 0,
                    "exact_share": float(np.mean(diff == 0)) if diff.size else 1.0,
                    "passed": bool(diff.size == 0 or diff.max() <= tolerance),
                }
            )
    return {
        "reference": "QDQ reference (TVM, float QDQ semantics)",
        "tolerance_lsb": tolerance,
        "outputs": rows,
        "passed": all(r["passed"] for r in rows),
    }
