"""Post-training quantisation accuracy against onnxruntime's quantize_static, per model and
per vpuc method, with the compile-time cost of each method.

For each zoo model (32 seeded synthetic calibration samples, 8 fresh held-out samples, as
`--calib-synthetic 32` draws them) and the MiniLM-class sentence encoder of
examples/sentence_encoder.py (40 realistic tokenised sentences: 32 to calibrate, 8 held
out), the output SQNR in dB against the float model on the held-out samples:

    vpuc configurations (target vpu, profitability rule on: what `vpuc compile` quantises;
    accuracy floor off so that every configuration quantises the same ops):
      default        the defaults of `vpuc compile` (docs/quantization.md)
      default -BC    the defaults with bias correction off
      plain          every method off: percentile 99.99 ranges, round-to-nearest, no BC
      +bc +equalize +absorb +smoothquant +adaround +mse +auto
                     plain with one method on (absorb runs after equalize, as designed)
    onnxruntime     quantize_static (QDQ, int8 activations and weights, after
                    quant_pre_process) on the same samples, `nodes_to_quantize` = the ONNX
                    nodes vpuc quantises, for per_channel in (True, False) x every calibration
                    method it offers (MinMax, Entropy, Percentile 99.99, Distribution); its
                    best configuration per model is the peer; evaluated by onnxruntime with
                    graph optimisations disabled (QDQ semantics)

Goal (issue 15): default and default -BC >= onnxruntime's best + 1 dB on every model.
The encoder row also reports the accuracy floor: `vpuc compile`'s default (--min-sqnr 25)
and which layers it kept in float.

    python bench/quant_vs_ort.py [--models a,b] [--skip-ort]
writes bench/out/quant_vs_ort.json:
    {"models": {name: {"vpuc": {config: {"sqnr_db", "seconds", "method_seconds"}},
                       "ort": {option: sqnr_db}, "ort_best": [option, sqnr_db], "nodes": n,
                       "ort_failed": {option: onnxruntime's error} (only when one failed),
                       "floor": {...} (encoder)}}}
"""

from __future__ import annotations

import argparse
import contextlib
import io
import logging
import sys
import tempfile
import time
from dataclasses import replace
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
from vpuc.compiler.quantize import (  # noqa: E402
    DEFAULT_METHOD,
    CalibrationData,
    QuantOptions,
    quantize,
    split_file_samples,
    synthetic_split,
)
from vpuc.compiler.quantize.measurement.metrics import sqnr_db  # noqa: E402
from vpuc.examples import sentence_encoder, zoo  # noqa: E402
from vpuc.targets import load_target  # noqa: E402

CALIBRATION_SAMPLES = 32
ENCODER = "sentence_encoder"
ORT_METHODS = {
    "minmax": (CalibrationMethod.MinMax, {}),
    "entropy": (CalibrationMethod.Entropy, {}),
    "percentile": (CalibrationMethod.Percentile, {"CalibPercentile": 99.99}),
    "distribution": (CalibrationMethod.Distribution, {}),
}
PLAIN = QuantOptions(smoothquant=False, equalize=False, absorb_bias=False, adaround=False)
# name: (method, bias correction, options); every configuration without the floor
CONFIGS = {
    "default": ("default", True, QuantOptions()),
    "default -BC": ("default", False, QuantOptions()),
    "plain": ("percentile", False, PLAIN),
    "+bc": ("percentile", True, PLAIN),
    "+equalize": ("percentile", False, replace(PLAIN, equalize=True)),
    "+absorb": ("percentile", False, replace(PLAIN, equalize=True, absorb_bias=True)),
    "+smoothquant": ("percentile", False, replace(PLAIN, smoothquant=True)),
    "+adaround": ("percentile", False, replace(PLAIN, adaround=True)),
    "+mse": ("mse", False, PLAIN),
    "+auto": ("auto", False, PLAIN),
}
METHOD_TIMINGS = ("equalize", "absorb_bias", "smoothquant", "adaround", "auto")


def _model_and_split(name: str):
    if name == ENCODER:
        model = sentence_encoder.sentence_encoder()
        feeds = sentence_encoder.realistic_feeds(CALIBRATION_SAMPLES + 8, seed=0)
        split = split_file_samples(CalibrationData(feeds, "realistic sentences (40, seed 0)"))
        return model, split
    model = zoo.build(name)
    imported = import_model(model)
    split = synthetic_split(imported.inputs, CALIBRATION_SAMPLES, seed=0, onnx_model=imported.onnx_model)
    return model, split


def ours(model, split, method: str, bias_correction: bool, options: QuantOptions):
    """(output SQNR, the ONNX nodes quantised, seconds, per-method seconds, result)."""
    imported = import_model(model)
    target = load_target("vpu")
    optimised = optimize_imported(imported, target)
    if method == "default":
        method = DEFAULT_METHOD
    start = time.perf_counter()
    result = quantize(
        optimised.mod, target, imported.onnx_model, optimised.provenance, split.calibration, method,
        held_out=split.held_out, bias_correction=bias_correction, options=options,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    bindings = [b for op in result.summary["quantized_ops"] for b in op["bindings"]]
    nodes = {n for b in bindings for n in result.provenance.get(b, [])}
    timings = result.summary.get("timings_s", {})
    method_seconds = sum(timings[k]["seconds"] for k in METHOD_TIMINGS if k in timings)
    figure = min(o["sqnr_db"] for o in result.accuracy["outputs"])
    return figure, nodes, seconds, method_seconds, result


class _Reader(CalibrationDataReader):
    def __init__(self, data) -> None:
        self.samples = iter([data.sample(i) for i in range(data.count)])

    def get_next(self):
        return next(self.samples, None)


def ort_sqnr(model: onnx.ModelProto, split, method: str, per_channel: bool, nodes: list[str]) -> float:
    """onnxruntime's static QDQ quantisation of `model`, its output SQNR on the held-out set."""
    calibrate_method, extra = ORT_METHODS[method]
    with tempfile.TemporaryDirectory() as tmp:
        source, prepared, quantized = (Path(tmp) / n for n in ("model.onnx", "prep.onnx", "qdq.onnx"))
        onnx.save(model, source)
        quant_pre_process(str(source), str(prepared))
        names = _renamed(onnx.load(prepared), set(nodes))
        with contextlib.redirect_stdout(io.StringIO()):  # its calibrators print progress
            quantize_static(
                str(prepared), str(quantized), _Reader(split.calibration), quant_format=QuantFormat.QDQ,
                per_channel=per_channel, activation_type=QuantType.QInt8, weight_type=QuantType.QInt8,
                nodes_to_quantize=names, calibrate_method=calibrate_method, extra_options=extra,
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


def measure(name: str, skip_ort: bool, console: Console) -> dict:
    model, split = _model_and_split(name)
    row: dict = {"vpuc": {}, "ort": {}}
    nodes: set[str] = set()
    for config, (method, bias_correction, options) in CONFIGS.items():
        options = replace(options, min_sqnr_db=None, sensitivity=False)
        figure, quantized, seconds, method_seconds, _ = ours(model, split, method, bias_correction, options)
        nodes = nodes or quantized
        row["vpuc"][config] = {
            "sqnr_db": round(figure, 2),
            "seconds": round(seconds, 2),
            "method_seconds": round(method_seconds, 2),
        }
        console.log(f"{name} {config}: {figure:.2f} dB, {seconds:.1f} s")
    row["nodes"] = len(nodes)
    if name == ENCODER:
        figure, _, seconds, _, result = ours(model, split, "default", True, QuantOptions())
        row["floor"] = {**result.accuracy["floor"], "seconds": round(seconds, 2)}
    if not skip_ort:
        for method in ORT_METHODS:
            for per_channel in (True, False):
                option = f"{method}{'' if per_channel else ' per-tensor'}"
                try:
                    row["ort"][option] = round(ort_sqnr(model, split, method, per_channel, sorted(nodes)), 2)
                except ValueError as exc:  # onnxruntime's histogram calibrators on a huge range
                    row.setdefault("ort_failed", {})[option] = str(exc)
                    console.log(f"{name} onnxruntime {option}: failed inside onnxruntime ({exc})")
                    continue
                console.log(f"{name} onnxruntime {option}: {row['ort'][option]:.2f} dB")
        if row["ort"]:
            best = max(row["ort"], key=row["ort"].get)
            row["ort_best"] = [best, row["ort"][best]]
    return row


def _table(figures: dict) -> Table:
    table = Table(title="Output SQNR vs float on held-out samples, dB (higher is better)")
    columns = ["model", "nodes", *CONFIGS, "ort best", "vs ort"]
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        cells = [f"{row['vpuc'][c]['sqnr_db']:.1f}" for c in CONFIGS]
        best = row.get("ort_best")
        peer = f"{best[1]:.1f} ({best[0]})" if best else "-"
        gap = f"{row['vpuc']['default']['sqnr_db'] - best[1]:+.1f}" if best else "-"
        table.add_row(name, str(row["nodes"]), *cells, peer, gap)
    return table


def _cost_table(figures: dict) -> Table:
    table = Table(title="Compile-time cost: quantize() seconds (the method's own stage in brackets)")
    for column in ["model", *CONFIGS]:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        cells = [f"{row['vpuc'][c]['seconds']:.1f} ({row['vpuc'][c]['method_seconds']:.1f})" for c in CONFIGS]
        table.add_row(name, *cells)
    return table


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated subset of {', '.join([*zoo.MODELS, ENCODER])}")
    parser.add_argument("--skip-ort", action="store_true", help="vpuc's configurations only")
    args = parser.parse_args()
    logging.disable(logging.WARNING)  # onnxruntime's quantiser suggests pre-processing on every call
    names = args.models.split(",") if args.models else [*zoo.MODELS, ENCODER]
    console = Console(stderr=True)
    figures = {"calibration_samples": CALIBRATION_SAMPLES, "configs": list(CONFIGS), "models": {}}
    for name in names:
        figures["models"][name] = measure(name, args.skip_ort, console)
        write_json("quant_vs_ort", figures)  # after every model: a long run keeps what it measured
    out = Console(width=220)
    out.print(_table(figures))
    out.print(_cost_table(figures))
    for name, row in figures["models"].items():
        if "floor" in row:
            floor = row["floor"]
            out.print(
                f"{name}: all int8 {floor['sqnr_db_all_int8']:.1f} dB; --min-sqnr {floor['min_sqnr_db']:g} "
                f"kept {len(floor['kept_float'])} layer(s) in float ({', '.join(floor['kept_float'])}): "
                f"{floor['sqnr_db']:.1f} dB, quantize() {floor['seconds']:.1f} s"
            )
    print(f"wrote {write_json('quant_vs_ort', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
