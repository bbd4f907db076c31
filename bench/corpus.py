"""The real-model corpus through the compiler, per target, in one run: how much of each model
the VPU takes and how long the compile takes, against the budgets.

For every model of tests/fixtures/corpus.py and each target (cpu, vpu, vpu-plus):
  compiled        1 when the compile succeeded (compiled / total per target is the summary)
  vpu_ops         ONNX nodes on the VPU / all ONNX nodes with a device (the partition report)
  vpu_macs        multiply-accumulates of the nodes on the VPU / of all nodes: Conv, ConvInteger
                  (output elements x input channels per group x kernel area), MatMul, Gemm,
                  MatMulInteger (M x K x N), from onnx shape inference on the prepared model
  compile_s       prepare + host build, in this process (imports excluded), and each step
                  (report["timings_s"]: frontend, passes, decompose, quantize, partition,
                  host_build)
and one float vision model of ~10 MB (a ResNet-18 at half width, 112x112) for `vpu`.

Budgets (issue 11): <= 2 s per MLPerf-Tiny-class model (the tflite_* QDQ models) on vpu,
<= 20 s for the 10 MB vision model; printed as ratios compile_s / budget (<= 1 passes).

    python bench/corpus.py [--targets cpu,vpu,vpu-plus] [--models a,b]
writes bench/out/corpus.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
from rich.table import Table

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT.parent / "tests" / "fixtures"))
from _common import console as wide_console  # noqa: E402
from _common import write_json  # noqa: E402
from corpus import TFLITE_QDQ, CorpusModel, corpus_models  # noqa: E402

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model  # noqa: E402
from vpuc.examples.graph_builder import GraphBuilder  # noqa: E402

TINY_BUDGET_S, VISION_BUDGET_S = 2.0, 20.0
MAC_OPS = {"Conv", "ConvInteger", "MatMul", "Gemm", "MatMulInteger"}


def macs_per_node(model: onnx.ModelProto) -> dict[str, int]:
    """MACs of each Conv/MatMul-like node of a static-shaped ONNX model."""
    inferred = onnx.shape_inference.infer_shapes(model)
    shapes = {t.name: list(t.dims) for t in inferred.graph.initializer}
    for value in [*inferred.graph.input, *inferred.graph.value_info, *inferred.graph.output]:
        shapes[value.name] = [d.dim_value for d in value.type.tensor_type.shape.dim]
    macs = {}
    for node in inferred.graph.node:
        if node.op_type not in MAC_OPS:
            continue
        out, a, b = shapes.get(node.output[0]), shapes.get(node.input[0]), shapes.get(node.input[1])
        if not out or not a or not b:
            continue
        if node.op_type.startswith("Conv"):
            macs[node.name] = int(np.prod(out)) * int(np.prod(b[1:]))
        else:
            trans_b = any(attr.name == "transB" and attr.i for attr in node.attribute)
            k = b[-1] if trans_b else b[-2] if len(b) > 1 else b[0]
            macs[node.name] = int(np.prod(out)) * int(k)
    return macs


def vision_10mb() -> CorpusModel:
    """ResNet-18 at half width (2.8 M parameters, 11 MB float), 112x112, random weights."""
    g = GraphBuilder("resnet18_half", seed=0)
    x = g.op("Relu", [g.conv_bn("input", "stem", 3, 32, kernel=7, stride=2)], "stem/relu")
    x = g.op("MaxPool", [x], "stem/pool", kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 32
    for stage, width in enumerate((32, 64, 128, 256), start=1):
        for block in range(2):
            stride = 2 if block == 0 and stage > 1 else 1
            prefix = f"layer{stage}.{block}"
            y = g.op("Relu", [g.conv_bn(x, f"{prefix}/a", channels, width, 3, stride)], f"{prefix}/relu_a")
            y = g.conv_bn(y, f"{prefix}/b", width, width, 3, 1)
            shortcut = (
                x
                if stride == 1 and channels == width
                else g.conv_bn(x, f"{prefix}/down", channels, width, 1, stride)
            )
            x = g.op("Relu", [g.op("Add", [y, shortcut], f"{prefix}/add")], f"{prefix}/relu")
            channels = width
    g.global_pool_classifier(x, channels, 1000)
    model = g.model({"input": [1, 3, 112, 112]}, {"logits": [1, 1000]})
    x = np.random.default_rng(0).standard_normal((1, 3, 112, 112)).astype(np.float32)
    return CorpusModel(model, {"input": x})


def measure(name: str, entry: CorpusModel, target: str) -> dict:
    options = CompileOptions(**entry.options)
    start = time.perf_counter()
    try:
        prepared = prepare_model(entry.model, target, options)
        artifact = build_artifact(entry.model, prepared)
    except Exception as exc:  # a failed compile is a figure too
        return {"compiled": 0, "error": str(exc).splitlines()[0][:200]}
    elapsed = time.perf_counter() - start
    report = artifact.report
    rows = [op for op in report["ops"] if op["device"] in ("vpu", "cpu")]
    macs = macs_per_node(prepared.imported.onnx_model)
    total_macs = sum(macs.values())
    vpu_macs = sum(macs.get(op["name"], 0) for op in rows if op["device"] == "vpu")
    steps = {k.removesuffix("_s"): v for k, v in report["timings_s"].items() if not k.startswith("pass_")}
    steps["passes"] = round(sum(v for k, v in report["timings_s"].items() if k.startswith("pass_")), 4)
    return {
        "compiled": 1,
        "ops": len(rows),
        "vpu_ops": sum(op["device"] == "vpu" for op in rows),
        "cpu_compute_ops": sorted(
            {op["op"] for op in rows if op["device"] == "cpu" and "Quantize" not in op["op"]}
        ),
        "macs": total_macs,
        "vpu_mac_share": round(vpu_macs / total_macs, 4) if total_macs else None,
        "compile_s": round(elapsed, 3),
        "steps_s": steps,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="cpu,vpu,vpu-plus")
    parser.add_argument("--models", default=None, help="comma-separated subset (default: all)")
    args = parser.parse_args()
    targets = args.targets.split(",")
    models = dict(corpus_models())
    models["resnet18_half_10mb"] = vision_10mb()
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    figures: dict = {
        "models": {},
        "budgets_s": {"mlperf_tiny_vpu": TINY_BUDGET_S, "vision_10mb_vpu": VISION_BUDGET_S},
    }
    prepare_model(
        models[next(iter(models))].model, "cpu", CompileOptions(**models[next(iter(models))].options)
    )
    for name, entry in models.items():
        figures["models"][name] = {t: measure(name, entry, t) for t in targets}
    _print(figures, targets)
    path = write_json("corpus", figures)
    print(f"figures: {path}")


def _print(figures: dict, targets: list[str]) -> None:
    console = wide_console(highlight=False)
    table = Table(title="Corpus: VPU share and compile time", title_justify="left")
    for column in ("model", *[f"{t} ops / MACs / s" for t in targets], "budget ratio (vpu)"):
        table.add_column(column)
    for name, per_target in figures["models"].items():
        cells = []
        for target in targets:
            row = per_target[target]
            if not row["compiled"]:
                cells.append(f"FAILED: {row['error'][:40]}")
                continue
            share = "-" if row["vpu_mac_share"] is None else f"{100 * row['vpu_mac_share']:.0f}%"
            cells.append(f"{row['vpu_ops']}/{row['ops']} / {share} / {row['compile_s']:.2f}")
        budget = TINY_BUDGET_S if name in TFLITE_QDQ else VISION_BUDGET_S if "10mb" in name else None
        vpu = per_target.get("vpu", {})
        ratio = f"{vpu['compile_s'] / budget:.2f}" if budget and vpu.get("compiled") else "-"
        table.add_row(name, *cells, ratio)
    console.print(table)
    for target in targets:
        compiled = sum(m[target]["compiled"] for m in figures["models"].values())
        console.print(f"{target}: compiled {compiled} / {len(figures['models'])}")


if __name__ == "__main__":
    main()
