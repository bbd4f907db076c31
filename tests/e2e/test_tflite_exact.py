"""u55-256's requantisation is TFLite's fixed point: vpuc's simulation of the anchors' ONNX
QDQ form is held against TFLite's int8 reference kernels (the LiteRT interpreter with
OpResolverType.BUILTIN_REF) on the anchors' .tflite originals, fed the same int8 input
(issue 22, docs/metrics.md, "Bit-exact where integer semantics are defined outside vpuc").

Two comparisons per layer, the layers matched by tensor name (tf2onnx keeps TFLite's):
  isolated  each VPU op of the op list run by the numpy integer reference (which the
            simulator equals bit for bit: test_check_layers.py) on TFLite's own values of
            its inputs, against TFLite's value of its output: where the op semantics are
            the same, 100% exact;
  chained   the simulated program's tensors from the model input, against TFLite's.
The exceptions are the average pools: u55-256's vector unit computes a pool's average in
float32 (rne(f32(sum * scale / count)), as on vpu), where TFLite has two integer rules.
resnet8's AvgPool keeps its scale, and TFLite rounds sum / count half away from zero: a
sum exactly halfway (sum % count == count / 2) differs by 1. tinyconv's MEAN rescales, and
TFLite multiplies in fixed point (the count folded into the multiplier): 1 LSB where the
two roundings part. The test recomputes TFLite's rule by hand, asserts it equals TFLite's
output, and that vpuc differs from it by at most 1 (at ties only, for the AvgPool)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from ai_edge_litert import interpreter as litert  # the test extra

from vpuc import runtime
from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower import vpu_functions
from vpuc.compiler.lower.reader.extract import extract_subgraph
from vpuc.sim.numerics import requant_fixed_point
from vpuc.targets.isa.params import quantize_multiplier

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from lower import int8_reference  # noqa: E402

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
MODELS = ("tinyconv", "resnet8")
SEEDS = range(4)
pytestmark = pytest.mark.skipif(
    not (ANCHORS / "resnet8").is_dir(), reason="the anchors are not beside the repo"
)


def _interpreter(model: str):
    interpreter = litert.Interpreter(
        str(ANCHORS / model / f"{model}_int8.tflite"),
        experimental_op_resolver_type=litert.OpResolverType.BUILTIN_REF,
        experimental_preserve_all_tensors=True,
    )
    interpreter.allocate_tensors()
    return interpreter


def _tflite_values(interpreter, subgraph: vops.Subgraph, layers: list[dict], x: np.ndarray) -> dict:
    """TFLite's value of every op-list tensor it has, in vpuc's shapes: by the ONNX tensor
    name the layer writes (tf2onnx keeps TFLite's names); the model's output by TFLite's
    output; a view or a pool with no TFLite tensor of its own by the view's (tinyconv's
    MEAN is the pool and the Squeeze after it)."""
    by_name = {d["name"]: d["index"] for d in interpreter.get_tensor_details()}
    output = interpreter.get_output_details()[0]["index"]
    onnx_tensor = {layer["output"]: layer.get("onnx_tensor") for layer in layers}
    values = {subgraph.inputs[0]: x}
    ops = list(subgraph.ops)
    for k, op in enumerate(ops):
        name = onnx_tensor.get(op.output)
        index = by_name.get(name, output if name == "output" else None)
        if index is None and op.kind == "reshape" and op.inputs[0] in values:
            values[op.output] = values[op.inputs[0]]
            continue
        if index is None and op.kind == "pool" and k + 1 < len(ops) and ops[k + 1].kind == "reshape":
            index = by_name.get(onnx_tensor.get(ops[k + 1].output)) or by_name.get(_squeezed_mean(ops[k + 1]))
        if index is not None:
            values[op.output] = interpreter.get_tensor(index)
    return {k: v.reshape(subgraph.tensors[k].shape) for k, v in values.items()}


def _squeezed_mean(view: vops.Op) -> str | None:
    """tinyconv: tf2onnx's GlobalAveragePool + Squeeze of TFLite's MEAN 'x/Mean'."""
    return view.name.split("_prequant")[0] if "_prequant" in view.name else None


def _tflite_pool(x: np.ndarray, op: vops.Pool) -> np.ndarray:
    """TFLite's int8 reference kernel for a global average pool, by hand. In and out scales
    equal (AVERAGE_POOL_2D): the raw sum divided by the count, rounded half away from zero.
    Rescaled (MEAN over H, W: reference_integer_ops::Mean): the sum of (x - zp_in) times
    TFLite's fixed-point multiplier of s_in / s_out with the count folded into it
    ((m << k) // count, shift - k, k = min(floor(log2 count), 32, 31 + shift)), + zp_out."""
    count = op.kernel[0] * op.kernel[1]
    raw = x.astype(np.int64).reshape(x.shape[0], -1, x.shape[-1]).sum(axis=1)
    if op.in_q[0] == op.out_q:
        rounded = np.where(raw >= 0, (raw + count // 2) // count, -((-raw + count // 2) // count))
        return np.clip(rounded, -128, 127).astype(np.int8)
    multiplier, shift = quantize_multiplier(op.in_q[0].scale / op.out_q.scale)
    k = min(count.bit_length() - 1, 32, 31 + shift)
    acc = raw - count * op.in_q[0].zero_point
    return requant_fixed_point(acc, np.int64((multiplier << k) // count), np.int64(shift - k), op.out_q.zero_point,
                               -128, 127)  # fmt: skip


def _compiled(model: str, tmp_path):
    path = ANCHORS / model / f"{model}_int8_qdq.onnx"
    prepared = prepare_model(path, "u55-256", CompileOptions())
    executable = runtime.load(build_artifact(path, prepared).save(tmp_path / f"{model}.vpub"))
    executable.record_outputs(True)
    (func,), (program,) = [f for _, f in vpu_functions(prepared.partition.mod)], prepared.programs
    subgraph = extract_subgraph(func, program.symbol, prepared.quantized.provenance, program.index)
    return path, executable, subgraph


@pytest.mark.parametrize("model", MODELS)
def test_u55_256_is_bit_exact_with_tflite_reference_kernels(model, tmp_path):
    onnx_path, executable, subgraph = _compiled(model, tmp_path)
    interpreter = _interpreter(model)
    layers = executable.vpu_calls[0].entry["checkpoints"]["layers"]
    feed = interpreter.get_input_details()[0]
    assert executable.inputs[0]["dtype"] == "int8"  # the QDQ form takes TFLite's int8 input
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    exact = {"isolated": [0, 0], "chained": [0, 0]}
    for seed in SEEDS:
        x = np.random.default_rng(seed).integers(-128, 128, feed["shape"]).astype(np.int8)
        interpreter.set_tensor(feed["index"], x)
        interpreter.invoke()
        outputs = executable.run({executable.inputs[0]["name"]: x})
        (call,) = executable.last_run.calls
        tflite = _tflite_values(interpreter, subgraph, layers, x)
        compared = [op for op in subgraph.ops if op.output in tflite]
        assert {op.kind for op in compared} >= {"conv2d", "dense", "pool"}, [op.kind for op in subgraph.ops]
        upstream_exact = True
        for op in compared:
            args = [tflite.get(a, subgraph.constants.get(a)) for a in op.inputs]
            ours = int8_reference._run(op, args, subgraph, "fixed_point").reshape(tflite[op.output].shape)
            differs = ours != tflite[op.output]
            chained = call.tensors[op.output] != tflite[op.output]
            for key, diff in (("isolated", differs), ("chained", chained)):
                exact[key][0] += int((~diff).sum())
                exact[key][1] += diff.size
            if isinstance(op, vops.Pool) and op.mode == "avg":  # the exception (module docstring)
                window = tflite[op.inputs[0]]
                assert op.kernel == window.shape[1:3], "the hand calculation covers a global pool"
                np.testing.assert_array_equal(_tflite_pool(window, op).reshape(ours.shape), tflite[op.output])
                assert not differs.any() or np.abs(ours.astype(int) - tflite[op.output]).max() == 1
                if op.in_q[0] == op.out_q:  # rounding half to even against half away from zero
                    count = op.kernel[0] * op.kernel[1]
                    sums = (
                        window.astype(np.int64).reshape(-1, window.shape[-1]).sum(axis=0).reshape(ours.shape)
                    )
                    assert (sums[differs] % count == count // 2).all(), f"{op.name}: a difference off a tie"
            else:
                assert not differs.any(), (
                    f"{model} seed {seed} {op.kind} '{op.name}': {int(differs.sum())} differ"
                )
            # from the input on, the simulation leaves TFLite only where an op's own rule does
            assert not (upstream_exact and chained.any()) or differs.any(), f"{op.name}: chained only"
            upstream_exact = upstream_exact and not chained.any()
        tflite_out = interpreter.get_tensor(interpreter.get_output_details()[0]["index"]).astype(int)
        vpuc_lsb = int(np.abs(outputs["output"].astype(int) - tflite_out).max())
        ort_lsb = int(
            np.abs(session.run(None, {session.get_inputs()[0].name: x})[0].astype(int) - tflite_out).max()
        )
        print(
            f"{model} seed {seed}: output vs TFLite: vpuc {vpuc_lsb} LSB, onnxruntime on the QDQ form {ort_lsb} LSB"
        )
    for key, (equal, total) in exact.items():
        print(f"{model}: {key} {equal}/{total} elements exact ({equal / total:.4%})")
