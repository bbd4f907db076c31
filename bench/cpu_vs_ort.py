"""CPU path latency against onnxruntime, untuned and tuned, per model, each runtime in its own process.

Models: every zoo model and the real-export fixtures of tests/fixtures/exports (their
stored inputs). For each:

    untuned  `vpuc compile --target cpu` (default schedules, compiler/host/defaults.py)
    tuned    `vpuc tune --time-budget MIN` (its own process) into DB_ROOT/<model>, then
             `vpuc compile --db DB_ROOT/<model>` (skipped with --no-tune; with
             --reuse-db the databases already there are used and nothing is tuned)

and onnxruntime (CPU provider, full graph optimisation) on the same inputs, twice: with
the machine's cores as intra_op_num_threads (what a user of its defaults gets), and with
one thread.

Each runtime is timed alone in a fresh process (bench/_cpu_worker.py): the artifact or the
session loaded, WARMUP calls, then CALLS calls back to back, their median. A process
never holds both runtimes nor times one between calls of the other: with TVM loaded beside
it and its calls spaced, onnxruntime's two-thread session ran 1.7x slower than alone
(docs/tuning.md), which flatters vpuc. The processes run one after another, ROUNDS rounds,
the order rotated each round so a change of the shared machine's load hits all alike. A
runtime's figure is the median of its rounds' medians, with their range; the load average
(1 min) is recorded before and after each process. vpuc's process sizes its thread pool as
`vpuc run` does (targets/host_cores.py: the threads a run uses follow the load); nothing
here sets TVM_NUM_THREADS. vpuc_calls_per_threads counts vpuc's timed calls by the threads
they ran on.

latency_ratio_untuned = untuned / onnxruntime with the machine's cores (lower is better;
1.0 = parity), latency_ratio_untuned_1thread = untuned / onnxruntime with one thread,
tuned_over_untuned = tuned / untuned; *_range = the lowest and highest ratio of one round's
medians. Goals (issues 14, 26): untuned <= 3x on every model; tuned <= 1.25x, and never
slower than untuned. Compile time is the wall time of compile_model without and with the
database; `tune` is what `vpuc tune --json` reported (trials, records stored, seconds).

    python bench/cpu_vs_ort.py [--rounds 5] [--calls 500] [--tune-minutes 10] [--models a,b]
                               [--no-tune] [--reuse-db]
writes bench/out/cpu_vs_ort.json: {"threads", "rounds", "calls", "warmup", "tune_minutes",
    "load_min", "load_max", "models": {name: {"latency_ratio_untuned", "latency_ratio_tuned",
    "tuned_over_untuned", "latency_ratio_untuned_1thread", "<ratio>_range", "untuned_ms",
    "tuned_ms", "ort_ms", "ort_1thread_ms", "<runtime>_ms_range", "compile_s_untuned",
    "compile_s_tuned", "tuned_tasks", "tasks", "tune_s", "tune", "vpuc_calls_per_threads"}}}
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import OUT_DIR, console, write_json  # noqa: E402

from vpuc.compiler import compile_model  # noqa: E402
from vpuc.compiler.host.database import META  # noqa: E402
from vpuc.examples import zoo  # noqa: E402
from vpuc.targets.host_cores import available_cores  # noqa: E402

THREADS = available_cores()  # onnxruntime's default session uses every core
WORKER = Path(__file__).resolve().parent / "_cpu_worker.py"

EXPORTS = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "exports"
FIXTURES = ["torch_small_cnn", "torch_upsample_pad", "torch_transformer_block", "tf2onnx_style",
            "paddle_style", "constant_weights"]  # fmt: skip
ROUNDS = 5
CALLS = 500
WARMUP = 50


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


def measure(name: str, args, work: Path) -> dict:
    model, inputs = load(name)
    (work / "model.onnx").write_bytes(model.SerializeToString())
    np.savez(work / "inputs.npz", **inputs)
    untuned, compile_untuned = timed_compile(model, inputs, None)
    untuned.save(work / "untuned.vpub")
    row = {
        "compile_s_untuned": compile_untuned,
        "tasks": untuned.report["host_build"]["tasks"],
        "latency_ratio_tuned": None,
    }  # None: not tuned in this run (--no-tune, or no database)
    runs = {"ort": ["ort", "model.onnx", "--threads", str(THREADS)], "ort_1thread": ["ort", "model.onnx"],
            "untuned": ["vpuc", "untuned.vpub"]}  # fmt: skip
    db = Path(args.db_root) / name
    if not args.no_tune and not (args.reuse_db and not (db / META).is_file()):
        if not args.reuse_db:
            row["tune_s"], row["tune"] = tune(model, inputs, db, args)
        tuned, row["compile_s_tuned"] = timed_compile(model, inputs, db)
        row["tuned_tasks"] = tuned.report["host_build"]["tuned_tasks"]
        tuned.save(work / "tuned.vpub")
        runs["tuned"] = ["vpuc", "tuned.vpub"]
    rounds = alternated_rounds(runs, work, args)
    median = {kind: statistics.median(r[kind]["median_s"] for r in rounds) for kind in runs}
    for kind in runs:
        ms = [r[kind]["median_s"] * 1e3 for r in rounds]
        row[f"{kind}_ms"], row[f"{kind}_ms_range"] = median[kind] * 1e3, [min(ms), max(ms)]
    ratios = {"latency_ratio_untuned": ("untuned", "ort"), "tuned_over_untuned": ("tuned", "untuned"),
              "latency_ratio_untuned_1thread": ("untuned", "ort_1thread"),
              "latency_ratio_tuned": ("tuned", "ort")}  # fmt: skip
    for key, (ours, theirs) in ratios.items():
        if ours in runs:
            row[key] = median[ours] / median[theirs]
            per_round = [r[ours]["median_s"] / r[theirs]["median_s"] for r in rounds]
            row[f"{key}_range"] = [min(per_round), max(per_round)]
    loads = [r[kind][when] for r in rounds for kind in runs for when in ("load_before", "load_after")]
    row["load_range"] = [min(loads), max(loads)]
    vpuc = [
        r[kind].get("calls_per_thread_count", {})
        for r in rounds
        for kind in ("untuned", "tuned")
        if kind in r
    ]
    row["vpuc_calls_per_threads"] = {
        n: sum(c.get(n, 0) for c in vpuc) for n in sorted({n for c in vpuc for n in c})
    }
    return row


def alternated_rounds(runs: dict[str, list[str]], work: Path, args) -> list[dict[str, dict]]:
    """args.rounds rounds of one fresh worker process per runtime, one after another, the
    order rotated each round; per round and runtime what the worker printed."""
    kinds = list(runs)
    rounds = []
    for index in range(args.rounds):
        order = kinds[index % len(kinds) :] + kinds[: index % len(kinds)]
        found = {}
        for kind in order:
            runtime, model, *options = runs[kind]
            command = [sys.executable, str(WORKER), runtime, str(work / model), str(work / "inputs.npz"),
                       "--calls", str(args.calls), "--warmup", str(args.warmup), *options]  # fmt: skip
            result = subprocess.run(command, capture_output=True, text=True)
            if result.returncode != 0:
                raise SystemExit(f"{kind} worker failed: {(result.stderr.strip().splitlines() or ['?'])[-1]}")
            found[kind] = json.loads(result.stdout.strip().splitlines()[-1])
        rounds.append(found)
    return rounds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="processes per runtime, alternated")
    parser.add_argument("--calls", type=int, default=CALLS, help="timed calls per process, back to back")
    parser.add_argument("--warmup", type=int, default=WARMUP, help="untimed calls per process first")
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
    names = args.models.split(",") if args.models else [*zoo.MODELS, *FIXTURES]
    budget = None if args.no_tune else args.tune_minutes
    figures = {"rounds": args.rounds, "calls": args.calls, "warmup": args.warmup, "threads": THREADS,
               "models": {}, "tune_minutes": budget, "trials_cap": args.trials,
               "reused_databases": args.reuse_db}  # fmt: skip
    for name in names:
        with tempfile.TemporaryDirectory(prefix="vpuc-bench-") as work:
            figures["models"][name] = measure(name, args, Path(work))
    loads = [value for row in figures["models"].values() for value in row["load_range"]]
    figures["load_min"], figures["load_max"] = min(loads), max(loads)
    print_table(figures)
    print(f"wrote {write_json('cpu_vs_ort', figures)}")
    return 0


def print_table(figures: dict) -> None:
    minutes = figures["tune_minutes"]
    budget = "not tuned" if minutes is None else f"{minutes:g} min tuning per model"
    title = (f"CPU path vs onnxruntime ({figures['threads']} threads and 1; each alone in its process, "
             f"median of {figures['rounds']} rounds x {figures['calls']} calls, {budget}; "
             f"load average {figures['load_min']:.1f}-{figures['load_max']:.1f})")  # fmt: skip
    table = Table(title=title)
    columns = ("model", "ort (ms)", "untuned (ms)", "ratio", "ort 1 thread", "ratio", "tuned (ms)", "ratio",
               "tuned/untuned", "tuned tasks", "compile (s)", "with db (s)")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "model" else "right")
    for name, row in figures["models"].items():
        tuned = "tuned_ms" in row
        cells = [f"{row['ort_ms']:.3f}", f"{row['untuned_ms']:.3f}", _ratio(row, "latency_ratio_untuned"),
                 f"{row['ort_1thread_ms']:.3f}", _ratio(row, "latency_ratio_untuned_1thread")]  # fmt: skip
        if tuned:
            tasks = f"{row['tuned_tasks']}/{row['tasks']}"
            cells += [f"{row['tuned_ms']:.3f}", _ratio(row, "latency_ratio_tuned"),
                      _ratio(row, "tuned_over_untuned"), tasks]  # fmt: skip
        else:
            cells += ["-", "-", "-", "-"]
        cells += [f"{row['compile_s_untuned']:.1f}", f"{row['compile_s_tuned']:.1f}" if tuned else "-"]
        table.add_row(name, *cells)
    console().print(table)


def _ratio(row: dict, key: str) -> str:
    low, high = row[f"{key}_range"]
    return f"{row[key]:.2f}x ({low:.2f}-{high:.2f})"


if __name__ == "__main__":
    sys.exit(main())
