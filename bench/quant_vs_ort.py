"""Post-training quantisation accuracy against onnxruntime's quantize_static, per zoo model.

For each zoo model, on the same calibration samples and the same held-out samples
(`--calib-synthetic 32` of docs/quantization.md: 32 seeded N(0, 1) samples to calibrate,
8 fresh ones held out), the SQNR in dB of the model output against the float model:

    ours          vpuc: graph passes, quantise what `--target vpu` runs on the VPU (the
                  profitability rule on), percentile 99.99; evaluated on Relax (QDQ semantics)
    ort           onnxruntime.quantization.quantize_static: QDQ, per-channel int8 weights,
                  int8 activations, the same calibration method (Percentile 99.99), after
                  quant_pre_process (BN folding); `nodes_to_quantize` = the ONNX nodes vpuc
                  put on the VPU, so both quantise the same ops; evaluated by onnxruntime with
                  graph optimisations disabled (its QDQ semantics)
    ours_all      vpuc with every op the VPU can run in int8 (target vpu-plus, rule off)
    ort_all       onnxruntime quantising every op it can (its default op list)

Goal: ours >= ort on every model (the same ops quantised); the *_all columns show both
quantisers with much more of the model in int8. Higher is better.

    python bench/quant_vs_ort.py [--method percentile|minmax|entropy]
writes bench/out/quant_vs_ort.json:
    {"models": {name: {"ours_sqnr_db", "ort_sqnr_db", "ours_all_sqnr_db", "ort_all_sqnr_db", ...}}}
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quant_pre_process,
    quantize_static,
)
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import write_json  # noqa: E402

from vpuc.compiler.frontend import import_model  # noqa: E402
from vpuc.compiler.pipeline import optimize_imported  # noqa: E402
from vpuc.compiler.quantize import quantize, synthetic_split  # noqa: E402
from vpuc.compiler.quantize.metrics import sqnr_db  # noqa: E402
from vpuc.examples import zoo  # noqa: E402
from vpuc.targets import load_target  # noqa: E402

CALIBRATION_SAMPLES = 32
ORT_METHODS = {
    "minmax": (CalibrationMethod.MinMax, {}),
    "percentile": (CalibrationMethod.Percentile, {"CalibPercentile": 99.99}),
    "entropy": (CalibrationMethod.Entropy, {}),
}


def optimised(model: onnx.ModelProto, target_name: str):
    """The graph-pass pipeline with its ONNX provenance (what the compile runs first)."""
    imported = import_model(model)
    result = optimize_imported(imported, load_target(target_name))
    return result.mod, result.provenance, imported


def ours(model, split, method: str, target_name: str, profitability: bool) -> tuple[float, set[str]]:
    """(output SQNR, the ONNX nodes quantised)."""
    mod, provenance, imported = optimised(model, target_name)
    result = quantize(
        mod, load_target(target_name), imported.onnx_model, provenance, split.calibration, method,
        held_out=split.held_out, profitability=profitability,
    )  # fmt: skip
    nodes = {
        n
        for op in result.summary["quantized_ops"]
        for b in op["bindings"]
        for n in result.provenance.get(b, [])
    }
    return result.accuracy["outputs"][0]["sqnr_db"], nodes


class _Reader(CalibrationDataReader):
    def __init__(self, data) -> None:
        self.samples = iter([data.sample(i) for i in range(data.count)])

    def get_next(self):
        return next(self.samples, None)


def ort_sqnr(model: onnx.ModelProto, split, method: str, nodes: list[str] | None) -> float:
    """onnxruntime's static QDQ quantisation of `model`, its output SQNR on the held-out set."""
    calibrate_method, extra = ORT_METHODS[method]
    with tempfile.TemporaryDirectory() as tmp:
        source, prepared, quantized = (Path(tmp) / n for n in ("model.onnx", "prep.onnx", "qdq.onnx"))
        onnx.save(model, source)
        quant_pre_process(str(source), str(prepared))
        if nodes is not None:
            nodes = _renamed(onnx.load(prepared), set(nodes))
        with contextlib.redirect_stdout(io.StringIO()):  # its calibrators print progress
            quantize_static(
                str(prepared), str(quantized), _Reader(split.calibration), quant_format=QuantFormat.QDQ,
                per_channel=True, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                nodes_to_quantize=nodes, calibrate_method=calibrate_method, extra_options=extra,
            )  # fmt: skip
        return _held_out_sqnr(model, onnx.load(quantized), split.held_out)


def _renamed(prepared: onnx.ModelProto, nodes: set[str]) -> list[str]:
    """The prepared model's names of `nodes`: quant_pre_process keeps a Conv's name when it
    folds a BatchNormalization into it, and names a MatMul+Add it fuses '<matmul>/MatMulAddFusion'."""
    return [
        n.name
        for n in prepared.graph.node
        if n.name in nodes or n.name.removesuffix("/MatMulAddFusion") in nodes
    ]


def _held_out_sqnr(model: onnx.ModelProto, quantized: onnx.ModelProto, held_out) -> float:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    reference = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    test = ort.InferenceSession(quantized.SerializeToString(), options, providers=["CPUExecutionProvider"])
    feeds = [held_out.sample(i) for i in range(held_out.count)]
    ref = np.stack([reference.run(None, f)[0] for f in feeds])
    out = np.stack([test.run(None, f)[0] for f in feeds])
    return sqnr_db(ref, out)


def measure(name: str, method: str, seed: int = 0) -> dict:
    model = zoo.build(name)
    split = synthetic_split(import_model(model).inputs, CALIBRATION_SAMPLES, seed=seed)
    ours_db, nodes = ours(model, split, method, "vpu", True)
    ours_all_db, _ = ours(model, split, method, "vpu-plus", False)
    return {
        "ours_sqnr_db": round(ours_db, 2),
        "ort_sqnr_db": round(ort_sqnr(model, split, method, sorted(nodes)), 2),
        "ours_all_sqnr_db": round(ours_all_db, 2),
        "ort_all_sqnr_db": round(ort_sqnr(model, split, method, None), 2),
        "quantized_nodes": len(nodes),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", choices=sorted(ORT_METHODS), default="percentile")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # onnxruntime's quantiser suggests pre-processing on every call
    figures = {"method": args.method, "calibration_samples": CALIBRATION_SAMPLES, "models": {}}
    for name in zoo.MODELS:
        figures["models"][name] = measure(name, args.method)
    table = Table(title=f"Output SQNR vs float, dB (higher is better), {args.method} calibration")
    columns = ("model", "VPU nodes", "vpuc", "onnxruntime", "vpuc - ort", "vpuc (all)", "ort (all)")
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        gap = row["ours_sqnr_db"] - row["ort_sqnr_db"]
        table.add_row(
            name, str(row["quantized_nodes"]), f"{row['ours_sqnr_db']:.1f}", f"{row['ort_sqnr_db']:.1f}",
            f"{gap:+.1f}", f"{row['ours_all_sqnr_db']:.1f}", f"{row['ort_all_sqnr_db']:.1f}",
        )  # fmt: skip
    Console().print(table)
    print(f"wrote {write_json('quant_vs_ort', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
