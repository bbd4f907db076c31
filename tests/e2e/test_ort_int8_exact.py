"""vpu and vpu-plus requantise in float32 as onnxruntime's int8 kernels do: the anchors' QDQ
form simulated on them is held, layer by layer, against onnxruntime with its graph
optimisations on (the QDQ groups fused into QLinearAdd, QGemm, QLinearAveragePool, ...),
each layer's int8 output exposed as a graph output (issue 22, docs/metrics.md
"Bit-exact where integer semantics are defined outside vpuc").

Per layer, as in test_tflite_exact.py: `isolated` runs the VPU op (the numpy integer
reference, which the simulator equals bit for bit) on onnxruntime's values of its inputs;
`chained` is the simulation from the model input. Where onnxruntime ran an int8 kernel the
isolated layer is asserted 100% exact. The exception is measured, not assumed: onnxruntime
fuses none of tf2onnx's convolutions (they stay DequantizeLinear -> float Conv ->
QuantizeLinear: float accumulation), so a conv is asserted within 1 LSB only; and on vpu
the global average pool is lowered to the MAC array (a depthwise sum, then a requantise),
not to onnxruntime's average pool, whose rounding differs on a few channels."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vpuc import runtime
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower import vpu_functions
from vpuc.compiler.lower.reader.extract import extract_subgraph

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lower import int8_reference  # noqa: E402

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
pytestmark = pytest.mark.skipif(
    not (ANCHORS / "resnet8").is_dir(), reason="the anchors are not beside the repo"
)
INT8_KERNELS = {"QLinearAdd", "QGemm", "QLinearAveragePool", "QLinearGlobalAveragePool", "QLinearConv",
                "QLinearMatMul", "MaxPool", "QLinearMul", "QLinearSoftmax"}  # fmt: skip
SEEDS = range(2)


def _session(path: Path, tensors: list[str]):
    """onnxruntime, optimisations on, with `tensors` (int8: QuantizeLinear outputs) as
    graph outputs (a float tensor as an output would keep its group from fusing)."""
    model = onnx.load(path)
    quantized = {n.output[0] for n in model.graph.node if n.op_type == "QuantizeLinear"}
    present = {o.name for o in model.graph.output}
    for name in tensors:
        if name in quantized and name not in present:
            model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _producers(path: Path, tensors: list[str], tmp_path) -> dict[str, str]:
    """{tensor: the op type that writes it in onnxruntime's optimised graph}."""
    model = onnx.load(path)
    for name in tensors:
        model.graph.output.append(onnx.ValueInfoProto(name=name))
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(tmp_path / "optimised.onnx")
    options.log_severity_level = 3
    ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    optimised = onnx.load(tmp_path / "optimised.onnx")
    return {out: node.op_type for node in optimised.graph.node for out in node.output}


@pytest.mark.parametrize("target", ["vpu", "vpu-plus"])
@pytest.mark.parametrize("model", ["tinyconv", "resnet8"])
def test_float32_targets_are_bit_exact_with_onnxruntime_int8_kernels(model, target, tmp_path):
    path = ANCHORS / model / f"{model}_int8_qdq.onnx"
    prepared = prepare_model(path, target, CompileOptions(profitability=False))
    executable = runtime.load(build_artifact(path, prepared).save(tmp_path / "m.vpub"))
    executable.record_outputs(True)
    (func,), (program,) = [f for _, f in vpu_functions(prepared.partition.mod)], prepared.programs
    subgraph = extract_subgraph(func, program.symbol, prepared.quantized.provenance, program.index)
    layers = executable.vpu_calls[0].entry["checkpoints"]["layers"]
    onnx_tensor = {layer["output"]: layer["onnx_tensor"] for layer in layers if layer.get("onnx_tensor")}
    quantized = {n.output[0] for n in onnx.load(path).graph.node if n.op_type == "QuantizeLinear"}
    wanted = [t for t in onnx_tensor.values() if t in quantized]
    producers = _producers(path, wanted, tmp_path)
    session = _session(path, wanted)
    names = [o.name for o in session.get_outputs()]
    tally: dict[str, list[int]] = {}
    for seed in SEEDS:
        inputs = runtime.inputs.random_inputs(executable.inputs, seed)
        executable.run(inputs)
        (call,) = executable.last_run.calls
        got = dict(zip(names, session.run(names, inputs), strict=True))
        ours = {subgraph.inputs[0]: call.inputs[0]}
        for op in subgraph.ops:
            name = onnx_tensor.get(op.output)
            if name in got:
                value = got[name]  # tf2onnx's graph is NCHW inside; vpuc's tensors are NHWC
                ours[op.output] = (value.transpose(0, 2, 3, 1) if value.ndim == 4 else value).reshape(
                    subgraph.tensors[op.output].shape
                )
            elif op.kind == "reshape" and op.inputs[0] in ours:
                ours[op.output] = ours[op.inputs[0]].reshape(subgraph.tensors[op.output].shape)
        for op in subgraph.ops:
            if op.output not in ours or op.output == subgraph.inputs[0]:
                continue
            kernel = producers.get(onnx_tensor.get(op.output), "view")
            reference = ours[op.output]
            chained = call.tensors[op.output] != reference
            row = tally.setdefault(f"{op.kind} ({kernel})", [0, 0, 0, 0])
            row[2] += int((~chained).sum())
            row[3] += chained.size
            if not all(a in ours or a in subgraph.constants for a in op.inputs):
                continue
            args = [ours.get(a, subgraph.constants.get(a)) for a in op.inputs]
            mine = int8_reference._run(op, args, subgraph, "float32").reshape(reference.shape)
            lsb = np.abs(mine.astype(int) - reference.astype(int))
            row[0] += int((lsb == 0).sum())
            row[1] += lsb.size
            if kernel in INT8_KERNELS or kernel == "view":
                assert lsb.max() == 0, (
                    f"{model} {target} {op.kind} '{op.name}' ({kernel}): {int((lsb > 0).sum())} differ"
                )
            else:
                assert lsb.max() <= 1, f"{model} {target} {op.kind} '{op.name}' ({kernel}): {lsb.max()} LSB"
    for kind, (equal, total, chained_equal, chained_total) in tally.items():
        isolated = f"{equal}/{total} ({equal / total:.4%})" if total else "-"
        print(f"{model} {target} {kind}: isolated {isolated}, chained {chained_equal / chained_total:.4%}")
