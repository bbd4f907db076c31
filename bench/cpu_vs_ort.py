"""CPU path latency against onnxruntime, per zoo model, in one run.

For each zoo model: compile with --target cpu (relax.build, llvm, no tuning), load the
artifact, and time `Executable.run` on seeded inputs; time onnxruntime (default session
options, i.e. its full graph optimisation, CPU provider) on the same inputs in the same
process. Both are timed as the median of REPEATS calls after WARMUP calls. The figure is
latency_ratio = ours / onnxruntime (lower is better; 1.0 = parity). No goal yet: untuned
TVM host code is expected to be slower than onnxruntime's hand-written kernels.

    python bench/cpu_vs_ort.py [--repeats N]
writes bench/out/cpu_vs_ort.json: {"models": {name: {"latency_ratio", "ours_ms", "ort_ms"}}}
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import onnxruntime as ort
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import median_seconds, write_json  # noqa: E402

from vpuc.compiler import compile_model  # noqa: E402
from vpuc.examples import zoo  # noqa: E402
from vpuc.runtime.executor import Executable  # noqa: E402


def measure(name: str, repeats: int) -> dict:
    model = zoo.build(name)
    inputs = zoo.sample_inputs(model, seed=0)
    executable = Executable(compile_model(model, target="cpu"))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    ours_s = median_seconds(lambda: executable.run(inputs), repeats)
    ort_s = median_seconds(lambda: session.run(None, inputs), repeats)
    return {"latency_ratio": ours_s / ort_s, "ours_ms": ours_s * 1e3, "ort_ms": ort_s * 1e3}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=50)
    args = parser.parse_args()
    figures = {"repeats": args.repeats, "models": {}}
    for name in zoo.MODELS:
        figures["models"][name] = measure(name, args.repeats)
    table = Table(title="CPU path vs onnxruntime (median latency)")
    for column in ("model", "vpuc cpu (ms)", "onnxruntime (ms)", "ratio"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for name, row in figures["models"].items():
        table.add_row(name, f"{row['ours_ms']:.3f}", f"{row['ort_ms']:.3f}", f"{row['latency_ratio']:.2f}x")
    Console().print(table)
    print(f"wrote {write_json('cpu_vs_ort', figures)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
