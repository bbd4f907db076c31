"""Graph optimisation against onnxruntime's, per zoo model, in one run.

For each zoo model:
  ours_ops         compute ops after our pipeline (compiler/pipeline.py, target cpu)
  ort_ops          compute ops in the model onnxruntime writes at its EXTENDED level
                   (SessionOptions.optimized_model_filepath, CPU provider)
  pass_over_build  the time our passes take (provenance included) / the time relax.build
                   takes on the optimised module (llvm), medians of REPEATS runs each
Both op counts use one rule, compiler/passes/opcount.py, on the Relax module and on the
ONNX graph alike: shape-only ops (reshape, flatten, squeeze, unsqueeze, identity,
constants) are not counted; transposes are counted apart (ours_transposes,
ort_transposes); every other op is a compute op, and a conv/matmul/Gemm (ORT's FusedConv,
FusedMatMul, FusedGemm included) absorbs a following constant bias add and then one
activation (relu, clip, leaky relu, sigmoid, tanh, hard sigmoid), each when it is the only
reader, as one kernel on either side. Goal: ours_ops <= ort_ops and pass_over_build < 1.

It also times the CPU layout choice the layout pass makes without measuring: each model
with convolutions built in NCHW and in NHWC (cpu_layout forced), median run time of each
(layout_ms); docs/passes.md keeps the figures behind the rule.

    python bench/fusion_vs_ort.py [--repeats N]
writes bench/out/fusion_vs_ort.json:
    {"models": {name: {"ours_ops", "ort_ops", "pass_over_build", ...}}, "counting": "..."}
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import onnx
import onnxruntime as ort
import tvm
from rich.console import Console
from rich.table import Table
from tvm import relax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_seconds, write_json  # noqa: E402

from vpuc.compiler.frontend import import_model  # noqa: E402
from vpuc.compiler.passes import PassOptions  # noqa: E402
from vpuc.compiler.passes.opcount import count_onnx_ops, count_relax_ops  # noqa: E402
from vpuc.compiler.pipeline import optimize_imported  # noqa: E402
from vpuc.examples import zoo  # noqa: E402

COUNTING = (
    "compute ops: every op but shape-only ones (reshape/flatten/squeeze/unsqueeze/identity/"
    "constant) and transposes (counted apart); a conv/matmul/Gemm absorbs a following constant "
    "bias add and then one activation (relu, clip, leaky relu, sigmoid, tanh, hard sigmoid) "
    "when each is the only reader; same rule on both sides (compiler/passes/opcount.py)"
)


def ort_extended(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model onnxruntime runs after its EXTENDED graph optimisations."""
    with tempfile.TemporaryDirectory() as workdir:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
        options.optimized_model_filepath = str(Path(workdir) / "optimized.onnx")
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return onnx.load(options.optimized_model_filepath)


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def layout_ms(model: onnx.ModelProto, repeats: int) -> dict[str, float]:
    """Median run time of the optimised model built in NCHW and in NHWC."""
    imported, feeds = import_model(model), zoo.sample_inputs(model)
    figures = {}
    for layout in ("NCHW", "NHWC"):
        mod = optimize_imported(imported, "cpu", PassOptions(cpu_layout=layout)).mod
        vm = relax.VirtualMachine(relax.build(mod, target="llvm"), tvm.cpu())
        args = [tvm.runtime.tensor(feeds[spec.name]) for spec in imported.inputs]
        figures[layout] = 1e3 * median_seconds(lambda vm=vm, args=args: vm["main"](*args), repeats * 10)
    return figures


def measure(name: str, repeats: int) -> dict:
    model = zoo.build(name)
    imported = import_model(model)
    runs = [optimize_imported(imported, "cpu") for _ in range(repeats)]
    passes_s = _median([sum(run.timings.values()) for run in runs])  # each pass's wall time
    result = runs[-1]
    build_times = []
    for _ in range(repeats):
        start = time.perf_counter()
        relax.build(result.mod, target="llvm")
        build_times.append(time.perf_counter() - start)
    build_s = _median(build_times)
    ours, theirs = count_relax_ops(result.mod), count_onnx_ops(ort_extended(model))
    row = {
        "ours_ops": ours["compute"],
        "ort_ops": theirs["compute"],
        "pass_over_build": passes_s / build_s,
        "ours_transposes": ours["transposes"],
        "ort_transposes": theirs["transposes"],
        "ours_relax_calls": ours["calls"],
        "passes_ms": 1e3 * passes_s,
        "build_ms": 1e3 * build_s,
        "layout": result.layout["choice"],
    }
    if result.layout.get("convs"):
        row["layout_ms"] = layout_ms(model, repeats)
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    figures = {"repeats": args.repeats, "counting": COUNTING, "models": {}}
    for name in zoo.MODELS:
        figures["models"][name] = measure(name, args.repeats)
    table = Table(title="Graph optimisation vs onnxruntime EXTENDED")
    columns = (
        "model",
        "ours ops",
        "ort ops",
        "ours T",
        "ort T",
        "pass/build",
        "cpu layout",
        "NCHW ms",
        "NHWC ms",
    )
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        timing = row.get("layout_ms", {})
        table.add_row(
            name, str(row["ours_ops"]), str(row["ort_ops"]), str(row["ours_transposes"]),
            str(row["ort_transposes"]), f"{row['pass_over_build']:.3f}", row["layout"].split(" ")[0],
            *(f"{timing[k]:.3f}" if k in timing else "-" for k in ("NCHW", "NHWC")),
        )  # fmt: skip
    Console(width=120).print(table)
    print("T: transposes. " + COUNTING)
    print(f"wrote {write_json('fusion_vs_ort', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
