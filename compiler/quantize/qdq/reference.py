"""The accuracy of a QDQ input model, measured with onnxruntime on the ONNX graph itself.

    model.onnx (QDQ)  --run-->  outputs and every quantised tensor (int8, dequantised)
    reference.onnx    --run-->  the same, rounding taken out          -> accuracy figures

The reference is the definition of qdq_strip.py written in ONNX: every QuantizeLinear of
an activation becomes the clamp to the range it can represent, `max(min(x, hi), lo)` with
lo, hi = (qmin - zp) * s, (qmax - zp) * s, and every DequantizeLinear reading such a tensor
(directly or through int8 layout ops: Transpose, Reshape, ...) passes its float value on.
Weights keep their DequantizeLinear, so the reference uses the model's int8 weights, as the
VPU does. Both graphs run in onnxruntime with graph optimisations off (the ONNX semantics,
and what the QDQ cleanup is tested bit-exact against), which takes a fraction of a second
where building both modules with LLVM took seconds (docs/quantization.md).
"""

from __future__ import annotations

import copy
import hashlib

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.quantize.calibration.data import CalibrationData
from vpuc.compiler.quantize.calibration.drawn import DrawnStack
from vpuc.compiler.quantize.measurement.metrics import output_figures, sqnr_db

# Ops that move int8 values without computing on them: in the reference they move floats.
LAYOUT_OPS = {
    "Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "MaxPool", "Slice",
    "Concat", "Split", "Gather", "DepthToSpace", "SpaceToDepth", "Tile", "Expand",
}  # fmt: skip


class ReferenceUnavailable(ValueError):
    """The QDQ graph has a form the ONNX reference does not cover (the caller falls back)."""


def qdq_accuracy(model: onnx.ModelProto, held_out: CalibrationData, output_names: list[str]) -> dict:
    """The `accuracy` section of the compile report for a QDQ model (see the module docstring).
    Memoised within the process on the model's bytes, the samples and the outputs: a repeated
    compile of the same model (the regression runner, the sweep) gets the same figures."""
    key = _digest(model, held_out, output_names)
    if key not in _MEASURED:
        if len(_MEASURED) >= _MEASURED_MAX:
            _MEASURED.clear()
        _MEASURED[key] = _measure(model, held_out, output_names)
    return copy.deepcopy(_MEASURED[key])


_MEASURED: dict[str, dict] = {}
_MEASURED_MAX = 32


def _digest(model: onnx.ModelProto, held_out: CalibrationData, output_names: list[str]) -> str:
    digest = hashlib.sha256(model.SerializeToString())
    digest.update(repr((held_out.source, output_names)).encode())
    for name in sorted(held_out.samples):
        stack = held_out.samples[name]
        if isinstance(stack, DrawnStack):  # synthetic: its seed, not its samples (never all held)
            digest.update(repr((name, stack.identity())).encode())
            continue
        stack = np.ascontiguousarray(stack)
        digest.update(repr((name, stack.dtype.str, stack.shape)).encode())
        digest.update(stack.tobytes())
    return digest.hexdigest()


def _measure(model: onnx.ModelProto, held_out: CalibrationData, output_names: list[str]) -> dict:
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    probes = _probes(model, constants)
    test = _session(_exposed(model, [p.quantized for p in probes]))
    reference_model, clamped = _reference(model, constants, probes)
    reference = _session(_exposed(reference_model, [clamped[p.quantized] for p in probes]))
    test_runs, ref_runs = _run(test, held_out), _run(reference, held_out)
    outputs = []
    for name in output_names:
        got = np.stack([_as_float(run[name], _output_params(model, constants, name)) for run in test_runs])
        want = np.stack([run[name] for run in ref_runs])
        outputs.append(output_figures(name, want, got, want.shape[1:]))
    layers = []
    for probe in probes:
        got = np.concatenate([probe.dequantize(run[probe.quantized]).ravel() for run in test_runs])
        want = np.concatenate([run[clamped[probe.quantized]].ravel() for run in ref_runs])
        layers.append(
            {"name": probe.label, "sqnr_db": round(sqnr_db(want, got), 3), "tensor": probe.source,
             "nodes": [probe.label] if probe.label != probe.source else []}
        )  # fmt: skip
    return {"samples": held_out.count, "held_out": held_out.source, "outputs": outputs, "layers": layers}


class _Probe:
    """One QuantizeLinear of an activation: its float input and its int8 output."""

    def __init__(self, node: onnx.NodeProto, label: str, scale, zero, axis: int) -> None:
        self.source, self.quantized, self.label = node.input[0], node.output[0], label
        self.scale, self.zero, self.axis = scale.astype(np.float32), zero, axis

    def dequantize(self, values: np.ndarray) -> np.ndarray:
        scale, zero = self.scale, self.zero.astype(np.float32)
        if scale.size > 1:
            shape = [1] * values.ndim
            shape[self.axis % values.ndim] = -1
            scale, zero = scale.reshape(shape), zero.reshape(shape)
        return (values.astype(np.float32) - zero) * scale


def _probes(model: onnx.ModelProto, constants: dict) -> list[_Probe]:
    producers = {out: node for node in model.graph.node for out in node.output}
    probes = []
    for node in model.graph.node:
        if node.op_type != "QuantizeLinear" or node.input[0] in constants:
            continue
        scale, zero = _params(node, constants)
        producer = producers.get(node.input[0])
        label = (producer.name or node.input[0]) if producer is not None else node.input[0]
        probes.append(_Probe(node, label, scale, zero, _axis(node)))
    return probes


def _params(node: onnx.NodeProto, constants: dict) -> tuple[np.ndarray, np.ndarray]:
    scale = constants.get(node.input[1])
    if scale is None:
        raise ReferenceUnavailable(f"'{node.name}': scale is not a constant")
    zero_name = node.input[2] if len(node.input) > 2 else ""
    zero = constants.get(zero_name) if zero_name else np.zeros(scale.shape, np.uint8)
    if zero is None:
        raise ReferenceUnavailable(f"'{node.name}': zero point is not a constant")
    return scale, zero


def _axis(node: onnx.NodeProto) -> int:
    return next((a.i for a in node.attribute if a.name == "axis"), 1)


def _bounds(scale, zero, axis: int, rank: int) -> tuple[np.ndarray, np.ndarray]:
    info = np.iinfo(zero.dtype)
    lo = ((np.float32(info.min) - zero.astype(np.float32)) * scale.astype(np.float32)).astype(np.float32)
    hi = ((np.float32(info.max) - zero.astype(np.float32)) * scale.astype(np.float32)).astype(np.float32)
    if scale.size > 1:
        shape = [1] * rank
        shape[axis % rank] = -1
        lo, hi = lo.reshape(shape), hi.reshape(shape)
    return lo, hi


def _reference(model: onnx.ModelProto, constants: dict, probes: list[_Probe]):
    """(the reference model, {int8 tensor of a probe: its float twin in the reference})."""
    ranks = _ranks(model)
    floated: set[str] = set()  # tensors that are int8 in the model and float in the reference
    nodes, inits = [], []
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.input[0] not in constants:
            scale, zero = _params(node, constants)
            rank = ranks.get(node.input[0])
            if rank is None:
                raise ReferenceUnavailable(f"'{node.input[0]}' has no known rank")
            lo, hi = _bounds(scale, zero, _axis(node), rank)
            out = node.output[0]
            inits += [numpy_helper.from_array(lo, f"{out}__lo"), numpy_helper.from_array(hi, f"{out}__hi")]
            nodes.append(helper.make_node("Max", [node.input[0], f"{out}__lo"], [f"{out}__floor"]))
            nodes.append(helper.make_node("Min", [f"{out}__floor", f"{out}__hi"], [out]))
            floated.add(out)
        elif node.op_type == "DequantizeLinear" and node.input[0] in floated:
            nodes.append(helper.make_node("Identity", [node.input[0]], list(node.output)))
        elif any(i in floated for i in node.input):
            if node.op_type not in LAYOUT_OPS or any(i in floated for i in node.input[1:]):
                raise ReferenceUnavailable(f"'{node.name}' ({node.op_type}) computes on int8 values")
            nodes.append(node)
            floated.update(node.output)
        else:
            nodes.append(node)
    graph = helper.make_graph(
        nodes,
        model.graph.name,
        list(model.graph.input),
        [_float_output(o) if o.name in floated else o for o in model.graph.output],
        [*model.graph.initializer, *inits],
    )
    reference = helper.make_model(graph, opset_imports=list(model.opset_import))
    reference.ir_version = model.ir_version
    return reference, {p.quantized: p.quantized for p in probes}


def _float_output(value: onnx.ValueInfoProto) -> onnx.ValueInfoProto:
    dims = [d.dim_value for d in value.type.tensor_type.shape.dim]
    return helper.make_tensor_value_info(value.name, TensorProto.FLOAT, dims)


def _ranks(model: onnx.ModelProto) -> dict[str, int]:
    infos = [*model.graph.input, *model.graph.value_info, *model.graph.output]
    ranks = {v.name: len(v.type.tensor_type.shape.dim) for v in infos if v.type.HasField("tensor_type")}
    ranks.update({t.name: len(t.dims) for t in model.graph.initializer})
    return ranks


def _output_params(model: onnx.ModelProto, constants: dict, name: str):
    """The QuantizeLinear parameters of an int8 graph output (None for a float output)."""
    for node in model.graph.node:
        if node.op_type == "QuantizeLinear" and node.output[0] == name:
            scale, zero = _params(node, constants)
            return _Probe(node, name, scale, zero, _axis(node))
    return None


def _as_float(values: np.ndarray, params) -> np.ndarray:
    return params.dequantize(values) if params is not None and values.dtype != np.float32 else values


def _exposed(model: onnx.ModelProto, names: list[str]) -> onnx.ModelProto:
    """The model with `names` added as graph outputs (types left to onnxruntime)."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    present = {o.name for o in exposed.graph.output}
    for name in dict.fromkeys(names):
        if name not in present:
            exposed.graph.output.append(onnx.ValueInfoProto(name=name))
    del exposed.graph.value_info[:]
    return exposed


def _session(model: onnx.ModelProto):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    # its worker threads sleep between runs instead of spinning: beside the compile's own
    # threads and other jobs, spinning workers held the cores the next run waited for
    # (MobileNet's measurement 1.3-1.7 -> 0.4-0.6 s on a loaded 2-core machine); the same
    # threads split the same work, so the values are the same
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    try:
        return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types
        raise ReferenceUnavailable(f"onnxruntime cannot load it: {str(exc).splitlines()[0]}") from None


def _run(session, data: CalibrationData) -> list[dict[str, np.ndarray]]:
    names = [o.name for o in session.get_outputs()]
    runs = []
    for index in range(data.count):
        feed = {name: stack[index, ...] for name, stack in data.samples.items()}
        runs.append(dict(zip(names, session.run(names, feed), strict=True)))
    return runs
