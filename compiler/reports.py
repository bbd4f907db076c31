"""What the compiler's commands print for people (rich tables): the compile summary, the
fusion audit (`vpuc optimize`) and the partition report (`vpuc partition`). `--json`
output bypasses this module and prints the report dictionaries as they are."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

WIDE = 200  # columns when stdout is a file or a pipe: rows are never cut


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else WIDE)


def _table(title: str, *columns: str) -> Table:
    """Columns fold (wrap) rather than truncate: a table never cuts a number."""
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(column, overflow="fold")
    return table


def print_compile_report(report: dict[str, Any], manifest: dict[str, Any], output: Path) -> None:
    console = _console()
    target = manifest["target"]
    console.print(f"[bold]{report['model']}[/] -> {output}  (target {target['name']}, {target['kind']})")
    table = _table("Tensors", "", "name", "shape", "dtype")
    for kind in ("inputs", "outputs"):
        for spec in manifest[kind]:
            table.add_row(kind[:-1], spec["name"], "x".join(map(str, spec["shape"])), spec["dtype"])
    console.print(table)
    fusion = report.get("fusion") or {"fused": []}
    console.print(
        f"graph: {len(report['ops'])} ONNX ops; {len(fusion['fused'])} fusions; "
        f"{len(report['folded_shape_nodes'])} shape-arithmetic nodes folded at import"
    )
    if report.get("partition"):
        console.print(partition_totals_line(report["partition"]))
    if report.get("vpu"):
        _print_vpu_estimate(console, report["vpu"], target)
    if report.get("accuracy"):
        from vpuc.compiler.quantize import accuracy_tables

        for table in accuracy_tables(report["accuracy"]):
            console.print(table)
    if report.get("execution"):
        console.print(f"[yellow]note:[/] {report['execution']}")
    if report.get("host_build"):
        console.print(host_build_line(report["host_build"]))
    timings = report["timings_s"]
    stages = {k: v for k, v in timings.items() if not k.startswith("pass_")}
    passes = sum(v for k, v in timings.items() if k.startswith("pass_"))
    parts = [f"{k.removesuffix('_s')} {v:.2f} s" for k, v in stages.items()] + [f"passes {passes:.2f} s"]
    console.print(f"compile time: {', '.join(parts)}")
    if report.get("summary"):
        from vpuc.compiler.summary import summary_lines

        console.print("\n".join(summary_lines(report["summary"])))


def _print_vpu_estimate(console: Console, vpu: dict[str, Any], target: dict[str, Any]) -> None:
    """The code generator's estimate (docs/metrics.md), as Vela prints its summary."""
    clock = target["hardware"]["clock_mhz"]
    table = _table(
        "VPU programs (compile-time estimate)", "subgraph", "instructions", "cycles", "us", "MAC util",
        "DRAM read B", "DRAM written B", "weights B", "SRAM peak B",
    )  # fmt: skip
    for sg in vpu["subgraphs"]:
        table.add_row(
            str(sg["id"]), str(sg["instructions"]), str(sg["cycles"]), f"{sg['cycles'] / clock:.2f}",
            f"{sg['mac_utilization']:.1%}", str(sg["dram_read_bytes"]), str(sg["dram_write_bytes"]),
            str(sg["weight_bytes"]), str(sg["sram_peak_bytes"]),
        )  # fmt: skip
    console.print(table)
    table = _table("VPU layers (estimate)", "sg", "layer", "op", "cycles", "MACs", "tiling")
    for layer in vpu["layers"]:
        tiling = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in layer["tiling"].items())
        table.add_row(str(layer["subgraph"]), layer["name"], layer["op"], str(layer["estimate_cycles"]),
                      str(layer["macs"]), tiling)  # fmt: skip
    console.print(table)
    total = vpu["total"]
    console.print(
        f"VPU estimate: {total['cycles']} cycles ({total['cycles'] / clock:.2f} us at {clock} MHz), "
        f"MAC utilisation {total['mac_utilization']:.1%}, DRAM {total['dram_read_bytes']} B read + "
        f"{total['dram_write_bytes']} B written, weights {total['weight_bytes']} B, "
        f"SRAM peak {total['sram_peak_bytes']} B"
    )


def host_build_line(host: dict[str, Any]) -> str:
    """'host: znver3 x86_64, 2 cores; 7 of 9 kernels tuned (vpuc-tuning/cpu), ...'."""
    if "skipped" in host:  # no host code (compiler/host/calls.py)
        return f"host: nothing to build ({host['skipped']})"
    target = host["target"]
    arch = str(target.get("mtriple", "")).split("-")[0]
    where = f"host: {target.get('mcpu')} {arch}, {target.get('num-cores')} cores"
    if host.get("tuning_database"):
        return (
            f"{where}; {host['tuned_tasks']} of {host['tasks']} kernels tuned ({host['tuning_database']}), "
            "the rest default-scheduled"
        )
    return f"{where}; {host['tasks']} kernels, default-scheduled (no tuning database)"


def print_tune_report(result) -> None:
    """The outcome of `vpuc tune` per task: default vs tuned latency, stored or why not."""
    console = _console()
    table = _table(
        f"Tuning: {result.trials} candidates measured in {result.elapsed_s:.0f} s -> {result.database}",
        "task", "kernels", "default (us)", "tuned (us)", "speed-up", "stored",
    )  # fmt: skip
    for task in result.tasks:
        speedup = f"{task.default_us / task.tuned_us:.2f}x" if task.default_us and task.tuned_us else "-"
        table.add_row(
            task.name, str(task.kernels), _us(task.default_us), _us(task.tuned_us), speedup,
            f"yes: {task.reason}" if task.stored else f"no: {task.reason}",
        )  # fmt: skip
    console.print(table)
    resumed = f" ({result.resumed} from an earlier run)" if result.resumed else ""
    console.print(
        f"{result.stored} of {len(result.tasks)} tasks have a tuned record in {result.database}{resumed}"
    )


def print_calibration(calibration) -> None:
    """Measured vs fitted latency per probe, then the [host] table to paste."""
    console = _console()
    table = _table("Host kernels: measured vs the fitted cost model", "probe", "MACs", "bytes",
                   "measured (us)", "model (us)")  # fmt: skip
    for row in calibration.rows:
        table.add_row(row["probe"], str(row["macs"]), str(row["bytes"]), f"{row['measured_us']:.1f}",
                      f"{row['predicted_us']:.1f}")  # fmt: skip
    console.print(table)
    console.print(f"median relative error {calibration.median_error:.0%}; paste into the target's TOML:")
    console.print(calibration.toml(), markup=False)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def partition_totals_line(partition: dict[str, Any]) -> str:
    final, raw = partition["totals"], partition["raw_totals"]
    return (
        f"partition ({partition['target']}): {final['vpu_ops']} VPU ops, {final['cpu_ops']} CPU ops, "
        f"{final['subgraphs']} VPU subgraphs, {final['boundaries']} boundaries, {final['bytes']} B per "
        f"inference (op list alone: {raw['vpu_ops']} VPU ops, {raw['subgraphs']} subgraphs, "
        f"{raw['boundaries']} boundaries, {raw['bytes']} B)"
    )


def print_partition_report(model: str, partition: dict[str, Any]) -> None:
    console = _console()
    console.print(f"[bold]{model}[/] on target {partition['target']}")
    table = _table("Ops", "ONNX node", "op", "device", "subgraph", "reason")
    for op in partition["ops"]:
        colour = {"vpu": "blue", "cpu": "yellow"}.get(op["device"], "dim")
        subgraph = "" if op["subgraph"] is None else str(op["subgraph"])
        table.add_row(op["name"], op["op"], f"[{colour}]{op['device']}[/]", subgraph, op["reason"])
    console.print(table)
    table = _table("VPU subgraphs", "id", "ONNX nodes")
    for subgraph in partition["subgraphs"]:
        table.add_row(str(subgraph["id"]), ", ".join(subgraph["ops"]))
    console.print(table)
    table = _table("Boundaries", "direction", "tensor", "producer", "consumer", "shape", "dtype", "bytes")
    for b in partition["boundaries"]:
        shape = "x".join(map(str, b["shape"]))
        table.add_row(
            b["direction"], b["tensor"], b["producer"], b["consumer"], shape, b["dtype"], str(b["bytes"])
        )
    console.print(table)
    table = _table(
        "Profitability (each subgraph of the op-list cut)",
        "subgraph",
        "ops",
        "VPU us",
        "transfers us",
        "CPU us",
        "decision",
    )
    for v in partition["profitability"]:
        table.add_row(
            str(v["subgraph"]), str(v["onnx_ops"]), f"{v['vpu_us']:.2f}", f"{v['transfer_us']:.2f}",
            f"{v['cpu_us']:.2f}", v["decision"],
        )  # fmt: skip
    console.print(table)
    console.print(partition_totals_line(partition))


def print_audit(model: str, target: str, result) -> None:
    """The fusion audit of `vpuc optimize` (result: pipeline.OptimizeResult)."""
    console = _console()
    before, after = result.ops_before, result.ops_after
    console.print(
        f"[bold]{model}[/] (target {target}): {before['compute']} -> {after['compute']} compute ops, "
        f"{before['transposes']} -> {after['transposes']} transposes; layout {result.layout['choice']}"
    )
    for key, title in (("fused", "Fused"), ("not_fused", "Not fused (near misses)")):
        table = _table(
            f"{title}: {len(result.audit[key])}",
            "pattern",
            "ONNX nodes",
            "fused into" if key == "fused" else "reason",
        )
        for entry in result.audit[key]:
            table.add_row(entry["pattern"], ", ".join(entry["nodes"]), entry["reason"])
        console.print(table)
    total_ms = 1e3 * sum(result.timings.values())
    each = ", ".join(f"{k} {1e3 * v:.1f}" for k, v in result.timings.items())
    console.print(f"passes: {total_ms:.1f} ms ({each})")
