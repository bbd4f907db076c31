"""`vpuc run --check QDQ_MODEL`'s end-to-end part: the artifact's outputs against
onnxruntime on the QDQ model itself (optimisations off: the ONNX QDQ semantics), in LSB.

An int8 (or uint8) output is compared as integers; a float output produced by a
DequantizeLinear with a constant per-tensor scale is compared in that scale's steps,
|ours - ort| / scale; other outputs have no LSB and are reported with `lsb: null`, not
judged. An output past the tolerance still passes when onnxruntime, with some roundings of
values at exact ties taken the other way, gives our answer (ties.py; the row says so).
runtime/check.py composes this with the per-subgraph and the float parts.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from vpuc.runtime.check import compare, model_feeds, reference_outputs


@lru_cache(maxsize=8)
def _load(path: str):
    import onnx

    return onnx.load(path, load_external_data=False)


def is_qdq_model(path: str) -> bool:
    """Does the ONNX model quantise activations (a QuantizeLinear of a non-constant)?"""
    model = _load(str(path))
    constants = {t.name for t in model.graph.initializer}
    return any(n.op_type == "QuantizeLinear" and n.input[0] not in constants for n in model.graph.node)


def has_integer_kernels(path: str) -> bool:
    """Is it a QOperator model (onnxruntime's QLinear* and QGemm nodes: int8 in, int8 out,
    computed by onnxruntime's integer kernels)?"""
    return any(n.op_type.startswith("QLinear") or n.op_type == "QGemm" for n in _load(str(path)).graph.node)


def output_steps(path: str) -> dict[str, float | None]:
    """Each graph output's LSB in its own units: 1 for an integer output, the scale of the
    DequantizeLinear producing a float one, None when it has no single step."""
    from onnx import TensorProto, numpy_helper

    model = _load(str(path))
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    producers = {out: node for node in model.graph.node for out in node.output}
    steps: dict[str, float | None] = {}
    for out in model.graph.output:
        elem = out.type.tensor_type.elem_type
        node = producers.get(out.name)
        if elem in (TensorProto.INT8, TensorProto.UINT8):
            steps[out.name] = 1.0
        elif node is not None and node.op_type == "DequantizeLinear":
            scale = constants.get(node.input[1])
            steps[out.name] = float(scale) if scale is not None and scale.size == 1 else None
        else:
            steps[out.name] = None
    return steps


PASS_THROUGH = {"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


def quantization(path: str) -> tuple[dict, dict]:
    """({int8 graph input: (scale, zero) of the DequantizeLinear reading it, through layout
    ops}, {int8 graph output: (scale, zero) of the QuantizeLinear writing it}), per-tensor
    constants only: what turns the QDQ model's int8 edges into the float model's values."""
    from onnx import TensorProto, numpy_helper

    model = _load(str(path))
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    consumers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    producers = {out: node for node in model.graph.node for out in node.output}

    def params(node):
        scale = constants.get(node.input[1])
        has_zero = len(node.input) > 2 and node.input[2]
        zero = constants.get(node.input[2]) if has_zero else np.zeros((), np.int8)
        if scale is None or zero is None or scale.size != 1:
            return None
        return float(scale), int(zero)

    inputs = {}
    for value in model.graph.input:
        if value.type.tensor_type.elem_type not in (TensorProto.INT8, TensorProto.UINT8):
            continue
        frontier = [value.name]
        while frontier:
            name = frontier.pop()
            for node in consumers.get(name, []):
                if node.op_type == "DequantizeLinear" and node.input[0] == name and params(node):
                    inputs[value.name] = params(node)
                    frontier = []
                    break
                if node.op_type in PASS_THROUGH:
                    frontier.append(node.output[0])
    outputs = {}
    for value in model.graph.output:
        node = producers.get(value.name)
        if node is not None and node.op_type == "QuantizeLinear" and params(node):
            outputs[value.name] = params(node)
    return inputs, outputs


def qdq_model_check(path: str, inputs, outputs, tolerance: float, bound=None) -> dict:
    reference = reference_outputs(path, inputs, bound)
    steps = output_steps(path)
    rows = []
    for error in compare(outputs, reference, path):
        step = steps.get(error.name)
        if step is None or step <= 0:
            rows.append({"name": error.name, "lsb": None, "max_lsb": None, "exact_share": None,
                         "passed": True})  # fmt: skip
            continue
        ours, ref = outputs[error.name].astype(np.float64), reference[error.name].astype(np.float64)
        lsb = np.rint(np.abs(ours - ref) / step)
        rows.append(
            {
                "name": error.name,
                "lsb": step,
                "max_lsb": int(lsb.max()) if lsb.size else 0,
                "exact_share": float(np.mean(lsb == 0)) if lsb.size else 1.0,
                "passed": bool(lsb.size == 0 or lsb.max() <= tolerance),
            }
        )
    part = {
        "reference": "onnxruntime, QDQ model",
        "model": path,
        "tolerance_lsb": tolerance,
        "outputs": rows,
        "ties_flipped": None,
    }
    failed = [r for r in rows if not r["passed"]]
    if failed:
        flips = _explained_by_ties(path, inputs, outputs, steps, tolerance, bound)
        if flips is not None:  # onnxruntime itself, some near-tie roundings the other way
            part["ties_flipped"] = flips
            for row in failed:
                row["passed"] = True
                row["explained_by_ties"] = True
    part["passed"] = all(r["passed"] for r in rows)
    return part


def _explained_by_ties(path: str, inputs, outputs, steps, tolerance: float, bound) -> int | None:
    """How many roundings of values within ties.TIE_STEPS of k + 0.5 steps, at the model's
    QuantizeLinears, taken the other way make onnxruntime's answer within `tolerance` LSB of
    ours (runtime/ties.py); None when no choice it tries does. Every number is still
    onnxruntime's: an engine that rounds a tie the other way is not wrong, however much a
    later layer's gain carries that step (docs/metrics.md)."""
    import onnx

    from vpuc.runtime.ties import explained_by_ties

    judged = {name: step for name, step in steps.items() if step is not None and step > 0}

    def within(ours, reference) -> str | None:
        for name, step in judged.items():
            off = np.abs(ours[name].astype(np.float64) - reference[name].astype(np.float64)) / step
            if off.size and np.rint(off).max() > tolerance:
                return name
        return None

    model = onnx.load(str(path))
    feeds = model_feeds({i.name for i in model.graph.input}, inputs, bound)
    return explained_by_ties(model, feeds, outputs, within, judged)
