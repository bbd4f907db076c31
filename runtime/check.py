"""`vpuc run --check MODEL`: the same inputs through onnxruntime on the original model.

Definitions (docs/metrics.md): for each output, max_abs_err = max |ours - ort|, and
rel_err = max_abs_err / max |ort| (the error relative to the output's magnitude; when the
reference is all zeros, rel_err = max_abs_err), and sqnr_db = 10 log10(sum ref^2 /
sum (ours - ref)^2). The check passes when every output's rel_err is at most the tolerance
(1e-4 by default; 0.1 for an int8 artifact, whose outputs carry quantisation error; or
--tolerance). onnxruntime runs with graph optimisations disabled, so its numbers
are the ONNX semantics and not a fused approximation.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np


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
