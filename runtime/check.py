"""`vpuc run --check MODEL`: is the result right?

Float artifacts: the same inputs through onnxruntime on the original model (graph
optimisations disabled, so its numbers are the ONNX semantics, not a fused approximation).
For each output, max_abs_err = max |ours - ort|, rel_err = max_abs_err / max |ort| (when
the reference is all zeros, rel_err = max_abs_err), sqnr_db = 10 log10(sum ref^2 / sum
(ours - ref)^2). Passes when every rel_err <= the tolerance (1e-4, or --tolerance).

int8 artifacts, three parts, each judged by its own tolerance (none waives another):
  qdq        each VPU subgraph on its own inputs, layer by layer: every layer's operands, as
             the simulator held them in this run (read from its memory at the instruction
             that completes them), are fed to that layer's QDQ reference (the artifact's
             host copy of the layer in float QDQ semantics, TVM), and its int8 output
             compared: max_lsb <= 1 (or --tolerance). A VPU program that did not run, or
             whose inputs, tensors or reference are missing, FAILS (a row with `missing`).
             Each subgraph's outputs against the whole subgraph's reference on the call's
             inputs are reported beside (`subgraph_outputs`), not judged: the layers chain.
  float      end to end against onnxruntime on the float model (the model given when it is
             float; --float-model F when it is QDQ, else the part is skipped and says so):
             each output's SQNR >= its floor = max(ABSOLUTE_SQNR_FLOOR_DB or --sqnr-floor,
             the compile report's held-out SQNR for it minus SQNR_MARGIN_DB, capped at
             FLOAT_ROUNDING_DB). For a QDQ model the quantisation is the model's, not
             vpuc's: its SQNR is judged only against --sqnr-floor when given (its int8
             edges are dequantised with the QDQ model's own scales to feed and compare).
  qdq_model  end to end against onnxruntime on the QDQ model (the model given, when it is
             QDQ), in LSB at the int8 outputs (a float output that a DequantizeLinear
             produces is compared in its steps): max_lsb <= END_TO_END_LSB_TOLERANCE, or
             onnxruntime gives our answer once some roundings at exact ties are taken the
             other way (check_qdq.py, ties.py: a later layer's gain carries a tie step).
Definitions: docs/metrics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vpuc.runtime.check_dynamic import reference_own_error, widened_floor
from vpuc.runtime.errors import CheckError

SQNR_MARGIN_DB = 10.0
ABSOLUTE_SQNR_FLOOR_DB = 20.0  # a quantised output this far from the float model is broken
FLOAT_ROUNDING_DB = 80.0  # floors never ask more: float32 paths differ from onnxruntime by ~1e-7
FLOAT_TOLERANCE = 1e-4
LSB_TOLERANCE = 1
END_TO_END_LSB_TOLERANCE = 2  # a chain of subgraphs and host layers: 1 LSB each may add up


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


def reference_outputs(
    model_path: str | Path, inputs: dict[str, np.ndarray], bound: dict[str, np.ndarray] | None = None
) -> dict[str, np.ndarray]:
    """Run onnxruntime (CPU, optimisations off) on an ONNX model. `bound`: the values the
    artifact's --bind-input gave, fed to the model where it declares them as inputs."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    try:
        session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        feeds = model_feeds({i.name for i in session.get_inputs()}, inputs, bound)
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, feeds), strict=True))
    except Exception as exc:  # onnxruntime raises its own exception classes
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckError(f"{model_path}: onnxruntime cannot run it on these inputs: {first}") from None


def model_feeds(declared: set[str], inputs: dict, bound: dict | None) -> dict:
    """The model's feeds: `inputs`, and the --bind-input values it declares as inputs."""
    return {**{k: v for k, v in (bound or {}).items() if k in declared}, **inputs}


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


def check_run(
    executable,
    inputs,
    outputs,
    model_path: str,
    tolerance: float | None,
    float_model: str | None = None,
    sqnr_floor: float | None = None,
) -> dict:
    """The check's report (docs/metrics.md); `passed` says whether every part passed.
    The executable must have run `inputs` with record_outputs(True)."""
    numerics = executable.artifact.manifest.get("numerics", "float32")
    bound = executable.artifact.bound_inputs  # --bind-input values: the reference needs them
    if numerics != "int8" and _integer_kernels(model_path):
        return _float_artifact_against_integer_kernels(model_path, inputs, outputs, tolerance, bound)
    if numerics != "int8":
        errors = compare(outputs, reference_outputs(model_path, inputs, bound), model_path)
        limit = FLOAT_TOLERANCE if tolerance is None else tolerance
        own = reference_own_error(model_path, inputs, bound)
        rows = [_float_row(e, limit, own.get(e.name)) for e in errors]
        part = {"reference": "onnxruntime, float model", "tolerance_rel_err": limit, "outputs": rows}
        part["passed"] = all(r["passed"] for r in rows)
        return {"model": model_path, "numerics": numerics, "float": part, "qdq": None,
                "passed": part["passed"]}  # fmt: skip
    from vpuc.runtime.check_qdq import is_qdq_model, qdq_model_check

    qdq_input = is_qdq_model(model_path)
    qdq = subgraph_check(executable, LSB_TOLERANCE if tolerance is None else tolerance)
    float_path = float_model or (None if qdq_input else model_path)
    # A QDQ model's quantisation is its own (qdq_model judges vpuc's fidelity to it): its SQNR
    # against the float model is judged only against a floor the user gives.
    floor = sqnr_floor if sqnr_floor is not None or qdq_input else ABSOLUTE_SQNR_FLOOR_DB
    if float_path is None:
        float_part = {
            "reference": "onnxruntime, float model",
            "skipped": f"{model_path} is a QDQ model; give the float model with --float-model F",
            "outputs": [],
            "passed": True,
        }
    else:
        float_part = _float_check(
            executable, inputs, outputs, float_path, floor, model_path if qdq_input else None, bound
        )
    model_part = (
        qdq_model_check(model_path, inputs, outputs, END_TO_END_LSB_TOLERANCE, bound) if qdq_input else None
    )
    if model_part is not None and _integer_kernels(model_path):
        model_part["reference"] = "onnxruntime's integer kernels, QOperator model"
    parts = [qdq, float_part, model_part]
    return {
        "model": model_path,
        "numerics": numerics,
        "qdq": qdq,
        "float": float_part,
        "qdq_model": model_part,
        "passed": all(p["passed"] for p in parts if p is not None),
    }


def _integer_kernels(model_path: str) -> bool:
    from vpuc.runtime.check_qdq import has_integer_kernels

    return has_integer_kernels(model_path)


def _float_artifact_against_integer_kernels(model_path: str, inputs, outputs, tolerance, bound) -> dict:
    """A float32 artifact of a QOperator model runs its QDQ form's float arithmetic; onnxruntime
    runs the model with integer kernels (an int32 accumulator, then the scale), which round
    a value near a step's edge the other way: judged in the output's steps, as an int8
    artifact's end-to-end part is, not by a float tolerance."""
    from vpuc.runtime.check_qdq import qdq_model_check

    limit = END_TO_END_LSB_TOLERANCE if tolerance is None else tolerance
    model_part = qdq_model_check(model_path, inputs, outputs, limit, bound)
    model_part["reference"] = "onnxruntime's integer kernels, QOperator model"
    float_part = {
        "reference": "onnxruntime, float model",
        "skipped": f"{model_path} is a QOperator model: its outputs are judged in LSB below",
        "outputs": [],
        "passed": True,
    }
    return {"model": model_path, "numerics": "float32", "float": float_part, "qdq": None,
            "qdq_model": model_part, "passed": model_part["passed"]}  # fmt: skip


def _float_check(
    executable, inputs, outputs, float_path: str, absolute: float | None, qdq_path=None, bound=None
) -> dict:
    if qdq_path is not None:  # int8 edges of the QDQ model become the float model's values
        from vpuc.runtime.check_qdq import quantization

        ins, outs = quantization(qdq_path)
        inputs = {k: _dequantize(v, ins.get(k)) for k, v in inputs.items()}
        outputs = {k: _dequantize(v, outs.get(k)) for k, v in outputs.items()}
    errors = compare(outputs, reference_outputs(float_path, inputs, bound), float_path)
    relative = {} if qdq_path is not None else _relative_floors(executable.artifact.report)
    own = reference_own_error(float_path, inputs, bound)
    rows = []
    for e in errors:
        rel = relative.get(e.name)
        floor = max(f for f in (absolute, rel, float("-inf")) if f is not None)
        floor = widened_floor(None if floor == float("-inf") else floor, own.get(e.name))
        rows.append(
            {
                **e.to_json(),
                **_own_error(own.get(e.name)),
                "sqnr_floor_db": floor,
                "sqnr_floor_absolute_db": absolute,
                "sqnr_floor_relative_db": rel,
                "passed": bool(floor is None or e.sqnr_db >= floor),
            }
        )
    return {
        "reference": "onnxruntime, float model",
        "model": float_path,
        "outputs": rows,
        "passed": all(r["passed"] for r in rows),
    }


def _float_row(error: OutputError, limit: float, own: OutputError | None) -> dict:
    """A float output within `limit` (relative) of the reference, plus the reference's own
    error when it has one (check_dynamic.py): max_abs <= limit x max|ref| + own max_abs."""
    row = {**error.to_json(), **_own_error(own)}
    if own is None:
        return {**row, "passed": bool(error.rel_err <= limit)}
    scale = error.max_abs_err / error.rel_err if error.rel_err > 0 else 0.0
    return {**row, "passed": bool(error.max_abs_err <= limit * scale + own.max_abs_err)}


def _own_error(own: OutputError | None) -> dict:
    """The reference's own error beside a row (its kernel quantises activations), else nothing."""
    if own is None:
        return {}
    return {"reference_own_max_abs_err": own.max_abs_err,
            "reference_own_sqnr_db": own.sqnr_db if np.isfinite(own.sqnr_db) else None}  # fmt: skip


def _dequantize(array: np.ndarray, params) -> np.ndarray:
    if params is None or array.dtype.kind == "f":
        return array
    scale, zero = params
    return ((array.astype(np.float32) - np.float32(zero)) * np.float32(scale)).astype(np.float32)


def _relative_floors(report: dict) -> dict[str, float]:
    """The compile's held-out SQNR of each output minus SQNR_MARGIN_DB."""
    accuracy = (report or {}).get("accuracy") or {}
    floors = {}
    for out in accuracy.get("outputs", []):
        if out.get("sqnr_db") is not None:
            floors[out["name"]] = round(min(float(out["sqnr_db"]) - SQNR_MARGIN_DB, FLOAT_ROUNDING_DB), 2)
    return floors


def subgraph_check(executable, tolerance: float) -> dict:
    """Every layer of every VPU subgraph against its QDQ reference, fed the layer's operands
    as the simulator held them in this run (the call's checkpoints); a program with no call,
    capture or reference is a failed row. Each subgraph's outputs against the whole
    subgraph's QDQ reference on the call's inputs are reported beside (`subgraph_outputs`),
    not judged: inside a subgraph the layers chain, and a 1-LSB rounding difference of one
    layer is an input difference for the next (docs/metrics.md)."""
    rows, chained = [], []
    calls = executable.last_run.calls if executable.last_run else []
    for entry in executable.vpu_calls:
        index = entry.subgraph
        mine = [c for c in calls if c.subgraph == index]
        missing = None
        if not executable.has_reference:
            missing = "the artifact has no QDQ reference (compiled with --no-reference)"
        elif not mine:
            missing = "the program did not run"
        elif any(len(c.inputs) != len(entry.inputs) or len(c.outputs) != len(entry.outputs) for c in mine):
            missing = "its inputs or outputs were not captured (record_outputs)"
        elif not (entry.entry.get("checkpoints") or {}).get("layers"):
            missing = "the artifact names no layer checkpoints (compiled by an older vpuc)"
        if missing:
            rows.append({"subgraph": index, "layer": None, "output": None, "elements": 0, "max_lsb": None,
                         "exact_share": 0.0, "missing": missing, "passed": False})  # fmt: skip
            continue
        for call in mine:
            rows += _layer_rows(executable, entry, call, tolerance)
            expected = executable.reference_subgraph(index, call.inputs)
            for k, spec in enumerate(entry.outputs):
                ref = expected[k] if k < len(expected) else None
                name = spec.get("onnx_tensor") or spec["name"]  # the ONNX tensor it holds
                row = _lsb_row(index, name, call.outputs[k], ref, tolerance)
                chained.append({key: value for key, value in row.items() if key != "passed"})
                written = call.tensors.get(spec["name"])
                if written is None or not np.array_equal(written.reshape(-1), call.outputs[k].reshape(-1)):
                    # the judged layers must be what the host received
                    why = "the output the host received is not what its layer wrote"
                    rows.append({"subgraph": index, "layer": None, "output": name, "elements": 0,
                                 "max_lsb": None, "exact_share": 0.0, "missing": why,
                                 "passed": False})  # fmt: skip
    return {
        "reference": "QDQ reference (TVM, float QDQ semantics), each layer on its inputs as the VPU had them",
        "tolerance_lsb": tolerance,
        "outputs": rows,
        "subgraph_outputs": chained,
        # an artifact with no VPU program has nothing to check here; one with programs but no
        # row cannot happen (each program gives a row, a missing one a failed row)
        "passed": all(r["passed"] for r in rows),
    }


def _layer_rows(executable, entry, call, tolerance: float) -> list[dict]:
    """One row per judged layer of one call: the simulator's value of the layer's output
    against the layer's QDQ reference on the simulator's values of its operands."""
    values = dict(call.tensors)
    for binding, array in zip(entry.inputs, call.inputs, strict=True):
        if binding.get("layout") == "NCHW" and array.ndim == 4:  # the reference reads NHWC
            array = np.ascontiguousarray(array.transpose(0, 2, 3, 1))
        values.setdefault(binding["name"], array)
    rows = []
    for layer in entry.entry["checkpoints"]["layers"]:
        if "reference" not in layer:
            continue  # not the last op of its composite: judged with the op that ends it
        name = layer.get("onnx_tensor") or layer["output"]
        lost = [t for t in (*layer["args"], layer["output"]) if t not in values]
        ref = (
            None
            if lost
            else executable.reference_layer(layer["reference"], [values[t] for t in layer["args"]])
        )
        if lost or ref is None:
            why = f"tensor '{lost[0]}' was not captured" if lost else f"no reference '{layer['reference']}'"
            rows.append({"subgraph": entry.subgraph, "layer": layer["name"], "output": name,
                         "elements": 0, "max_lsb": None, "exact_share": 0.0, "missing": why,
                         "passed": False})  # fmt: skip
            continue
        row = _lsb_row(entry.subgraph, name, values[layer["output"]], ref, tolerance)
        rows.append({"subgraph": row.pop("subgraph"), "layer": layer["name"], **row})
    return rows


def _lsb_row(index: int, name: str, ours: np.ndarray, ref: np.ndarray | None, tolerance: float) -> dict:
    if ref is None or ref.shape != ours.shape:
        why = "the reference gave no such output" if ref is None else f"reference shape {list(ref.shape)}"
        return {"subgraph": index, "output": name, "elements": int(ours.size), "max_lsb": None,
                "exact_share": 0.0, "missing": why, "passed": False}  # fmt: skip
    diff = np.abs(ours.astype(np.int32) - ref.astype(np.int32))
    return {
        "subgraph": index,
        "output": name,
        "elements": int(diff.size),
        "max_lsb": int(diff.max()) if diff.size else 0,
        "exact_share": float(np.mean(diff == 0)) if diff.size else 1.0,
        "passed": bool(diff.size == 0 or diff.max() <= tolerance),
    }
