"""Human-readable reports printed by the CLI (rich tables); JSON output bypasses this."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from vpuc.runtime.artifact import Artifact


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def print_compile_report(artifact: Artifact, output: Path) -> None:
    console = _console()
    report, manifest = artifact.report, artifact.manifest
    target = manifest["target"]
    console.print(f"[bold]{report['model']}[/] -> {output}  (target {target['name']}, {target['kind']})")
    table = Table(title="Tensors", title_justify="left")
    for column in ("", "name", "shape", "dtype"):
        table.add_column(column)
    for kind in ("inputs", "outputs"):
        for spec in manifest[kind]:
            table.add_row(kind[:-1], spec["name"], "x".join(map(str, spec["shape"])), spec["dtype"])
    console.print(table)
    totals = report["totals"]
    console.print(
        f"ops: {totals['nodes']} ONNX nodes, {totals['vpu_ops']} on the VPU, {totals['cpu_ops']} on the CPU; "
        f"{len(report['folded_shape_nodes'])} shape-arithmetic nodes folded at import"
    )
    timings = ", ".join(f"{k.removesuffix('_s')} {v:.2f} s" for k, v in report["timings_s"].items())
    console.print(f"compile time: {timings}")


def print_run_report(executable, result: dict[str, Any]) -> None:
    console = _console()
    console.print(f"[bold]{result['artifact']}[/]  inputs: {result['inputs']}")
    table = Table(title="Outputs", title_justify="left")
    for column in ("name", "shape", "dtype", "min", "max", "mean"):
        table.add_column(column)
    for out in result["outputs"]:
        stats = [f"{out[k]:.6g}" if k in out else "-" for k in ("min", "max", "mean")]
        table.add_row(out["name"], "x".join(map(str, out["shape"])), out["dtype"], *stats)
    console.print(table)
    check = result["check"]
    if check is None:
        return
    table = Table(title=f"Check against onnxruntime ({check['model']})", title_justify="left")
    for column in ("output", "max abs err", "rel err", ""):
        table.add_column(column)
    for out in check["outputs"]:
        ok = out["rel_err"] <= check["tolerance"]
        table.add_row(
            out["name"],
            f"{out['max_abs_err']:.3g}",
            f"{out['rel_err']:.3g}",
            "[green]ok[/]" if ok else "[red]FAIL[/]",
        )
    console.print(table)
    verdict = "[green]PASS[/]" if check["passed"] else "[red]FAIL[/]"
    console.print(f"check: {verdict} (tolerance: rel err <= {check['tolerance']:g})")
