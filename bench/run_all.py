"""Every benchmark in one command, and one table of the ratios they measured.

Runs each bench/*.py that is a program (it has a `__main__` block; helpers such as
_common.py and resnet18_program.py are not) in a fresh Python process, one after the
other, each with its own defaults, then reads the JSON each wrote to bench/out/ and prints
one summary: per figure, its min, median and max over the models (and the worst one), and
the goal its bench states. Writes bench/out/summary.json.

    python bench/run_all.py [--only a,b] [--skip a,b] [--args NAME="--flag value"]...
    python bench/run_all.py --summary-only     (read bench/out/*.json, run nothing)

The summary reads the benches' JSON and nothing else, and tolerates keys it does not know
(and older or newer shapes of those it does): a figure whose bench did not run or did not
write it shows as "not measured". Exit 1 when a bench failed.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table

BENCH = Path(__file__).resolve().parent
OUT = BENCH / "out"


def programs() -> list[str]:
    """The bench scripts: every bench/*.py with a __main__ block, except this one and the
    helpers (_*.py: bench/_cpu_worker.py is a program cpu_vs_ort.py runs)."""
    names = []
    for path in sorted(BENCH.glob("[!_]*.py")):
        if path.name != Path(__file__).name and '__name__ == "__main__"' in path.read_text():
            names.append(path.stem)
    return names


def run(name: str, extra: list[str]) -> dict:
    start = time.perf_counter()
    print(f"\n=== bench/{name}.py {' '.join(extra)}", flush=True)
    code = subprocess.call([sys.executable, str(BENCH / f"{name}.py"), *extra], cwd=BENCH.parent)
    return {"exit": code, "wall_s": round(time.perf_counter() - start, 1), "args": extra}


# --- the summary: each row is a figure over labelled values, read from one bench's JSON ------


def _load(name: str) -> dict | None:
    path = OUT / f"{name}.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _first(row: dict, *keys: str):
    """The first of `keys` the row has (a bench's JSON may be older or newer than this)."""
    for key in keys:
        value = row
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if isinstance(value, int | float) and not isinstance(value, bool):
            return value
    return None


def _per_model(data: dict | None, key: Callable[[dict], float | None], section: str = "models") -> dict:
    if not data or not isinstance(data.get(section), dict):
        return {}
    values = {}
    for name, row in data[section].items():
        value = key(row) if isinstance(row, dict) else None
        if value is not None:
            values[name] = value
    return values


def _cpu(row, tuned: bool):
    if tuned:
        return _first(row, "latency_ratio_tuned")
    return _first(row, "latency_ratio_untuned", "latency_ratio")


def _quant_gain(row):
    """vpuc's SQNR minus onnxruntime's (dB), for the configuration `vpuc compile` uses."""
    ours = _first(row, "vpuc.default.sqnr_db", "ours_sqnr_db")
    best = row.get("ort_best")
    theirs = best[1] if isinstance(best, list) and len(best) == 2 else _first(row, "ort_sqnr_db")
    return None if ours is None or theirs is None else ours - theirs


def _ops_ratio(row):
    ours, theirs = _first(row, "ours_ops"), _first(row, "ort_ops")
    return ours / theirs if ours is not None and theirs else None


def _by_target(data: dict | None, key: str) -> dict:
    if not data:
        return {}
    targets = data.get("by_target") or {"vpu": data.get("models", {})}
    return {
        f"{name}@{target}": row[key]
        for target, models in targets.items()
        if isinstance(models, dict)
        for name, row in models.items()
        if isinstance(row, dict) and isinstance(row.get(key), int | float)
    }


def _sim_over_numpy() -> dict:
    values = {}
    resnet = _load("sim_speed")
    if resnet and isinstance(resnet.get("ratio_vs_numpy"), int | float):
        values["resnet18 program"] = resnet["ratio_vs_numpy"]
    e2e = _load("e2e") or {}
    for name, row in (e2e.get("runs") or {}).items():
        if isinstance(row, dict) and isinstance(row.get("sim_over_numpy"), int | float):
            values[name] = row["sim_over_numpy"]
    return values


def _e2e(key: str) -> dict:
    e2e = _load("e2e") or {}
    return {
        n: r[key]
        for n, r in (e2e.get("runs") or {}).items()
        if isinstance(r, dict) and r.get(key) is not None
    }


def _corpus(figure: Callable[[str, str, dict, dict], float | None]) -> dict:
    """One value per corpus model and target (bench/corpus.py), by `figure(name, target, row, data)`."""
    data = _load("corpus") or {}
    values = {}
    for name, targets in (data.get("models") or {}).items():
        for target, row in (targets or {}).items():
            value = figure(name, target, row, data) if isinstance(row, dict) and row.get("compiled") else None
            if isinstance(value, int | float):
                values[f"{name}@{target}"] = value
    return values


def _over_host_build(name, target, row, data):
    build = _first(row, "steps_s.host_build")
    return row["compile_s"] / build if build and isinstance(row.get("compile_s"), int | float) else None


def _over_budget(name, target, row, data):
    budgets = data.get("budgets_s") or {}
    key = "mlperf_tiny_vpu" if name.startswith("tflite_") else "vision_10mb_vpu" if "10mb" in name else None
    budget = budgets.get(key) if target == "vpu" else None
    return row["compile_s"] / budget if budget and isinstance(row.get("compile_s"), int | float) else None


HIGH, LOW = (lambda v: v), (lambda v: -v)  # how bad a value is: the worst is the largest
OFF_ONE = lambda v: abs(v - 1)  # noqa: E731


# (figure, bench, goal, how bad a value is, values by model)
def rows() -> list[tuple[str, str, str, Callable[[float], float], dict]]:
    cpu, fusion, quant = _load("cpu_vs_ort"), _load("fusion_vs_ort"), _load("quant_vs_ort")
    compile_time = _load("compile_time")
    roofline = _load("roofline")
    return [
        ("CPU path latency / onnxruntime, untuned", "cpu_vs_ort", "<= 3x", HIGH,
         _per_model(cpu, lambda r: _cpu(r, tuned=False))),
        ("CPU path latency / onnxruntime, tuned", "cpu_vs_ort", "<= 1.25x", HIGH,
         _per_model(cpu, lambda r: _cpu(r, tuned=True))),
        ("compute ops after fusion / onnxruntime's", "fusion_vs_ort", "<= 1", HIGH,
         _per_model(fusion, _ops_ratio)),
        ("graph passes time / relax.build time", "fusion_vs_ort", "< 1", HIGH,
         _per_model(fusion, lambda r: _first(r, "pass_over_build"))),
        ("int8 SQNR - onnxruntime quantize_static (dB)", "quant_vs_ort", ">= 0 dB", LOW,
         _per_model(quant, _quant_gain)),
        ("whole compile time / its relax.build (host build) time", "corpus", "-", HIGH,
         _corpus(_over_host_build)),
        ("compile time / budget (MLPerf-Tiny, 10 MB vision, vpu)", "corpus", "<= 1", HIGH,
         _corpus(_over_budget)),
        ("vpuc compile wall / goal (1.5 s QDQ, 3 s float)", "compile_time", "<= 1", HIGH,
         _per_model(compile_time, lambda r: _first(r, "ratio_cli_vs_goal"))),
        ("vpuc compile wall / Vela's CLI wall", "compile_time", "-", HIGH,
         _per_model(compile_time, lambda r: _first(r, "ratio_cli_vs_vela"))),
        ("simulator wall time / numpy floor", "sim_speed, e2e", "<= 2", HIGH, _sim_over_numpy()),
        ("compile-time estimate / simulated cycles", "e2e", "0.9 - 1.1", OFF_ONE,
         _e2e("estimate_over_simulated")),
        ("simulated cycles / roofline bound", "roofline", "<= 1.25 dense, <= 3 depthwise", HIGH,
         _by_target(roofline, "cycles_over_bound")),
        ("DRAM bytes / compulsory bytes", "roofline", "<= 1.3 dense", HIGH,
         _by_target(roofline, "dram_over_compulsory")),
    ]  # fmt: skip


def summary() -> dict:
    table = []
    for figure, bench, goal, badness, values in rows():
        row = {"figure": figure, "bench": bench, "goal": goal, "count": len(values), "values": values}
        if values:
            row.update(
                min=min(values.values()),
                median=statistics.median(values.values()),
                max=max(values.values()),
                worst=max(values, key=lambda name: badness(values[name]))
                if len(set(values.values())) > 1
                else "-",
            )
        table.append(row)
    return {"rows": table}


def print_summary(figures: dict, console: Console) -> None:
    table = Table(title="Benchmark summary (bench/out/summary.json)", title_justify="left")
    for column in ("figure", "bench", "min", "median", "max", "worst", "n", "goal"):
        table.add_column(column, justify="right" if column in ("min", "median", "max", "n") else "left")
    for row in figures["rows"]:
        if not row["count"]:
            table.add_row(row["figure"], row["bench"], "-", "-", "-", "not measured", "0", row["goal"])
            continue
        cells = [f"{row[k]:.3g}" for k in ("min", "median", "max")]
        table.add_row(row["figure"], row["bench"], *cells, row["worst"], str(row["count"]), row["goal"])
    console.print(table)
    for name, result in figures.get("benches", {}).items():
        if result["exit"] != 0:
            console.print(f"[red]bench/{name}.py failed (exit {result['exit']})[/]")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="comma-separated benches to run (default: all)")
    parser.add_argument("--skip", help="comma-separated benches not to run")
    parser.add_argument(
        "--args", action="append", default=[], metavar='NAME="ARGS"',
        help='extra arguments for one bench, e.g. --args cpu_vs_ort="--no-tune" (repeatable)',
    )  # fmt: skip
    parser.add_argument("--summary-only", action="store_true", help="run nothing: summarise bench/out/*.json")
    args = parser.parse_args(argv)
    known = programs()
    only = [n.strip() for n in args.only.split(",")] if args.only else known
    skip = {n.strip() for n in args.skip.split(",")} if args.skip else set()
    extra = dict(spec.split("=", 1) for spec in args.args if "=" in spec)
    unknown = sorted((set(only) | skip | set(extra)) - set(known))
    if unknown or any("=" not in spec for spec in args.args):
        parser.error(f"unknown bench(es) {', '.join(unknown) or args.args} (known: {', '.join(known)})")
    benches = {}
    if not args.summary_only:
        for name in only:
            if name not in skip:
                benches[name] = run(name, shlex.split(extra.get(name, "")))
    figures = {**summary(), "benches": benches}
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "summary.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")
    console = Console(width=160 if not sys.stdout.isatty() else None)
    console.print()
    print_summary(figures, console)
    return 1 if any(b["exit"] != 0 for b in benches.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
