"""CPU path latency against onnxruntime, untuned and tuned, per model, in one run.

Models: every zoo model and the real-export fixtures of tests/fixtures/exports (their
stored inputs). For each:

    untuned  `vpuc compile --target cpu` (default schedules, compiler/host/defaults.py)
    tuned    `vpuc tune --time-budget MIN` (its own process) into DB_ROOT/<model>, then
             `vpuc compile --db DB_ROOT/<model>` (skipped with --no-tune; with
             --reuse-db the databases already there are used and nothing is tuned)

and onnxruntime (CPU provider, full graph optimisation) on the same inputs, twice: with
the host target's num-cores as intra_op_num_threads (TVM_NUM_THREADS is the same), and with
one thread. vpuc runs a kernel in parallel only from PARALLEL_MIN_MACS (compiler/host/
defaults.py), which no zoo kernel reaches: on the zoo it computes on one core, so the
one-thread session is the like-for-like comparison and the num-cores one is what a user of
onnxruntime's defaults gets. Latency is the median of REPEATS calls (>= 20) after WARMUP
calls, of `Executable.run` (what `vpuc run` calls; without the per-op timing callbacks
behind `vpuc run`'s host-op table, `time_host_ops=False`) and of `InferenceSession.run`,
all timed in alternation (one call of each per repeat) so a change of the shared machine's
load hits them alike. The figure is latency_ratio = ours / onnxruntime with num-cores
threads (lower is better; 1.0 = parity), latency_ratio_untuned_1thread = untuned /
onnxruntime with one thread; tuned_over_untuned = tuned / untuned latency. Goals (issues
14, 26): untuned <= 3x on every model; tuned <= 1.25x, and never slower than untuned.
Compile time is the wall time of compile_model without and with the database; `tune` is
what `vpuc tune --json` reported (trials, records stored, seconds).

    python bench/cpu_vs_ort.py [--tune-minutes 10] [--models a,b] [--no-tune] [--reuse-db]
writes bench/out/cpu_vs_ort.json: {"tune_minutes", "threads", "models": {name: {
    "latency_ratio_untuned", "latency_ratio_tuned", "tuned_over_untuned", "untuned_ms",
    "tuned_ms", "ort_ms", "ort_1thread_ms", "latency_ratio_untuned_1thread",
    "compile_s_untuned", "compile_s_tuned", "tuned_tasks", "tasks",
    "tune_s", "tune"}}}
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vpuc.compiler.host.target import machine_cores

THREADS = machine_cores()
os.environ.setdefault("TVM_NUM_THREADS", str(THREADS))  # before TVM starts its thread pool

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from rich.table import Table  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT_DIR, console, write_json  # noqa: E402

from vpuc.compiler import compile_model  # noqa: E402
from vpuc.compiler.host.database import META  # noqa: E402
from vpuc.examples import zoo  # noqa: E402
from vpuc.runtime.executor import Executable  # noqa: E402

EXPORTS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "exports"
FIXTURES = ["torch_small_cnn", "torch_upsample_pad", "torch_transformer_block", "tf2onnx_style",
            "paddle_style", "constant_weights"]  # fmt: skip
MIN_REPEATS = 20
WARMUP = 3


def load(name: str) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    if name in zoo.MODELS:
        model = zoo.build(name)
        return model, zoo.sample_inputs(model, seed=0)
    model = onnx.load(EXPORTS / f"{name}.onnx")
    stored = np.load(EXPORTS / f"{name}.npz")
    names = [i.name for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    return model, {n: stored[n] for n in names}


def timed_compile(model, inputs, db):
    start = time.perf_counter()
    shapes = {name: array.shape for name, array in inputs.items()}  # fixtures have symbolic batch
    artifact = compile_model(model, target="cpu", input_shapes=shapes, tuning_db=db)
    return artifact, time.perf_counter() - start


def tune(model: onnx.ModelProto, inputs: dict[str, np.ndarray], db: Path, args) -> tuple[float, dict]:
    """`vpuc tune` in its own process, as a user runs it: its wall time and what it reported
    (trials, records stored, its search's seconds, per task the verdict)."""
    with tempfile.TemporaryDirectory(prefix="vpuc-bench-") as work:
        path = Path(work) / "model.onnx"
        onnx.save(model, path)
        command = [sys.executable, "-m", "vpuc.compiler.cli", "tune", str(path), "--db", str(db), "--json",
                   "--time-budget", str(args.tune_minutes * 60)]  # fmt: skip
        command += [f"--input-shape={n}={'x'.join(map(str, a.shape))}" for n, a in inputs.items()]
        if args.trials:
            command += ["--trials", str(args.trials)]
        start = time.perf_counter()
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SystemExit(f"vpuc tune failed: {result.stderr.strip().splitlines()[-1]}")
        report = json.loads(result.stdout)
        summary = {key: report.get(key) for key in ("trials", "stored", "elapsed_s", "first_call_s")}
        summary["reasons"] = {t["task"]: t["reason"] for t in report.get("tasks", [])}
        return time.perf_counter() - start, summary


def measure(name: str, args) -> dict:
    model, inputs = load(name)
    sessions = {}
    for kind, threads in (("ort", THREADS), ("ort_1thread", 1)):
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        sessions[kind] = ort.InferenceSession(
            model.SerializeToString(), options, providers=["CPUExecutionProvider"]
        )
    untuned, compile_untuned = timed_compile(model, inputs, None)
    row = {
        "compile_s_untuned": compile_untuned,
        "tasks": untuned.report["host_build"]["tasks"],
        "latency_ratio_tuned": None,
    }  # None: not tuned in this run (--no-tune, or no database)
    runs = {"untuned": Executable(untuned, time_host_ops=False)}
    db = Path(args.db_root) / name
    if not args.no_tune and not (args.reuse_db and not (db / META).is_file()):
        if not args.reuse_db:
            row["tune_s"], row["tune"] = tune(model, inputs, db, args)
        tuned, row["compile_s_tuned"] = timed_compile(model, inputs, db)
        row["tuned_tasks"] = tuned.report["host_build"]["tuned_tasks"]
        runs["tuned"] = Executable(tuned, time_host_ops=False)
    calls = {kind: (lambda s=session: s.run(None, inputs)) for kind, session in sessions.items()}
    calls.update({kind: (lambda e=executable: e.run(inputs)) for kind, executable in runs.items()})
    seconds = interleaved_medians(calls, args.repeats)
    for kind in runs:
        row[f"{kind}_ms"] = seconds[kind] * 1e3
        row[f"latency_ratio_{kind}"] = seconds[kind] / seconds["ort"]
    if "tuned" in seconds:
        row["tuned_over_untuned"] = seconds["tuned"] / seconds["untuned"]
    row["ort_ms"] = seconds["ort"] * 1e3
    row["ort_1thread_ms"] = seconds["ort_1thread"] * 1e3
    row["latency_ratio_untuned_1thread"] = seconds["untuned"] / seconds["ort_1thread"]
    return row


def interleaved_medians(calls: dict, repeats: int, warmup: int = WARMUP) -> dict[str, float]:
    """Median seconds of each call, timed in alternation: one call of each per repeat."""
    times: dict[str, list[float]] = {kind: [] for kind in calls}
    for repeat in range(warmup + repeats):
        for kind, call in calls.items():
            start = time.perf_counter()
            call()
            if repeat >= warmup:
                times[kind].append(time.perf_counter() - start)
    return {kind: statistics.median(values) for kind, values in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--models", help=f"comma-separated subset of: {', '.join([*zoo.MODELS, *FIXTURES])}")
    parser.add_argument("--tune-minutes", type=float, default=10.0, help="tuning budget per model")
    parser.add_argument("--trials", type=int, help="cap on tuning candidates per model (default: vpuc's)")
    parser.add_argument("--db-root", default=str(OUT_DIR / "tuning"), help="one tuning database per model")
    parser.add_argument("--no-tune", action="store_true", help="untuned figures only")
    parser.add_argument(
        "--reuse-db", action="store_true",
        help="use the databases already in --db-root, tune nothing (models without one: untuned only)",
    )  # fmt: skip
    args = parser.parse_args()
    args.repeats = max(args.repeats, MIN_REPEATS)
    names = args.models.split(",") if args.models else [*zoo.MODELS, *FIXTURES]
    budget = None if args.no_tune else args.tune_minutes
    figures = {"repeats": args.repeats, "threads": THREADS, "models": {}, "tune_minutes": budget,
               "trials_cap": args.trials, "reused_databases": args.reuse_db}  # fmt: skip
    for name in names:
        figures["models"][name] = measure(name, args)
    print_table(figures)
    print(f"wrote {write_json('cpu_vs_ort', figures)}")
    return 0


def print_table(figures: dict) -> None:
    minutes = figures["tune_minutes"]
    budget = "not tuned" if minutes is None else f"{minutes:g} min tuning per model"
    title = f"CPU path vs onnxruntime ({figures['threads']} threads and 1; median latency, {budget})"
    table = Table(title=title)
    columns = ("model", "ort (ms)", "untuned (ms)", "ratio", "ort 1 thread", "ratio", "tuned (ms)", "ratio",
               "tuned/untuned", "tuned tasks", "compile (s)", "with db (s)")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        tuned = "tuned_ms" in row
        cells = [f"{row['ort_ms']:.3f}", f"{row['untuned_ms']:.3f}", f"{row['latency_ratio_untuned']:.2f}x",
                 f"{row['ort_1thread_ms']:.3f}", f"{row['latency_ratio_untuned_1thread']:.2f}x"]  # fmt: skip
        if tuned:
            tasks = f"{row['tuned_tasks']}/{row['tasks']}"
            cells += [f"{row['tuned_ms']:.3f}", f"{row['latency_ratio_tuned']:.2f}x",
                      f"{row['tuned_over_untuned']:.2f}x", tasks]  # fmt: skip
        else:
            cells += ["-", "-", "-", "-"]
        cells += [f"{row['compile_s_untuned']:.1f}", f"{row['compile_s_tuned']:.1f}" if tuned else "-"]
        table.add_row(name, *cells)
    console().print(table)


if __name__ == "__main__":
    sys.exit(main())
