"""`vpuc run --check` against a model whose onnxruntime kernels quantise activations as they
run (issue 26 item 4): a tolerance relative to a reference is only as good as the reference.

onnxruntime's `quantize_dynamic` makes an LSTM com.microsoft.DynamicQuantizeLSTM: int8 weights
with their scales (what the node means: the LSTM on the weights dequantised, which vpuc
computes), and a kernel that also quantises X and h to uint8 for each product, an error the
model does not ask for. So the check measures the reference's own error, with onnxruntime on
the model with each such node replaced by the standard LSTM on its dequantised weights
(W' = (W - zw) * sw, transposed to ONNX's [D, 4H, input]; R' alike):

    own = |exact - reference|  per output (OutputError: max_abs_err, sqnr_db)

and widens each output's bound by it, by the triangle inequality |ours - reference| <=
|ours - exact| + |exact - reference|:
    float artifacts  max_abs(ours, reference) <= tolerance x max|reference| + own.max_abs_err
    int8 artifacts   noise(ours) <= noise at the floor + own noise, as amplitudes:
                     floor' = -20 log10(10^(-floor/20) + 10^(-own.sqnr_db/20))
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

MS_DOMAIN = "com.microsoft"
LOSSY_OPS = {(MS_DOMAIN, "DynamicQuantizeLSTM")}


def has_lossy_kernels(model: onnx.ModelProto) -> bool:
    return any((n.domain, n.op_type) in LOSSY_OPS for n in model.graph.node)


def exact_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with every DynamicQuantizeLSTM replaced by an LSTM on its dequantised weights."""
    exact = onnx.ModelProto()
    exact.CopyFrom(model)
    constants = {t.name: numpy_helper.to_array(t) for t in exact.graph.initializer}
    nodes = []
    for node in exact.graph.node:
        if (node.domain, node.op_type) not in LOSSY_OPS:
            nodes.append(node)
            continue
        inputs = list(node.input) + [""] * (12 - len(node.input))
        weight = _dequantised(constants, inputs[1], inputs[8], inputs[9])
        recurrent = _dequantised(constants, inputs[2], inputs[10], inputs[11])
        prefix = node.name or node.output[0]
        names = (f"{prefix}/W_dequantised", f"{prefix}/R_dequantised")
        exact.graph.initializer.extend(
            numpy_helper.from_array(a, n) for a, n in zip((weight, recurrent), names, strict=True)
        )
        lstm = helper.make_node("LSTM", [inputs[0], *names, *inputs[3:8]], list(node.output), name=node.name)
        lstm.attribute.extend(node.attribute)
        nodes.append(lstm)
    del exact.graph.node[:]
    exact.graph.node.extend(nodes)
    if not any(o.domain in ("", "ai.onnx") and o.version >= 14 for o in exact.opset_import):
        exact.opset_import.append(helper.make_opsetid("", 14))
    return exact


def _dequantised(constants: dict[str, np.ndarray], q: str, scale: str, zero: str) -> np.ndarray:
    """(q - zero) * scale per direction (and per column when the scale is per column), as
    [D, 4H, K] (the node's are [D, K, 4H])."""
    if q not in constants or scale not in constants:
        raise ValueError(f"'{q}': the reference's exact form needs constant weights and scales")
    values = constants[q].astype(np.float64)
    directions = values.shape[0]
    s = constants[scale].astype(np.float64).reshape(directions, 1, -1)
    z = constants[zero].astype(np.float64).reshape(directions, 1, -1) if zero in constants else 0.0
    return ((values - z) * s).astype(np.float32).transpose(0, 2, 1)


def reference_own_error(model_path: str | Path, inputs, bound=None) -> dict:
    """{output: OutputError of the exact model's outputs against onnxruntime's on the model},
    or {} when the model has no kernel that quantises its activations."""
    from vpuc.runtime.check import compare, reference_outputs

    try:
        model = onnx.load(str(model_path))
    except Exception:  # onnxruntime ran it; a model onnx cannot parse has no such kernel we know
        return {}
    if not has_lossy_kernels(model):
        return {}
    reference = reference_outputs(model_path, inputs, bound)
    try:
        exact = exact_model(model)
    except ValueError:
        return {}  # no exact form: the bound stays as it is
    with tempfile.TemporaryDirectory(prefix="vpuc-check-") as folder:
        path = Path(folder) / f"{Path(model_path).stem}.exact.onnx"
        onnx.save(exact, str(path))
        outputs = reference_outputs(path, inputs, bound)
    return {e.name: e for e in compare(outputs, reference, f"{model_path} (exact form)")}


def widened_floor(floor: float | None, own) -> float | None:
    """The SQNR floor against a reference whose own error is `own` (module docstring)."""
    if floor is None or own is None or math.isinf(own.sqnr_db):
        return floor
    return round(-20 * math.log10(10 ** (-floor / 20) + 10 ** (-own.sqnr_db / 20)), 2)
