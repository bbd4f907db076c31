"""Human-readable reports printed by the CLI (rich tables); JSON output bypasses this."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


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
    for column in ("output", "max abs err", "rel err", "SQNR dB", ""):
        table.add_column(column)
    for out in check["outputs"]:
        ok = out["rel_err"] <= check["tolerance"]
        table.add_row(
            out["name"],
            f"{out['max_abs_err']:.3g}",
            f"{out['rel_err']:.3g}",
            "exact" if out["sqnr_db"] is None else f"{out['sqnr_db']:.1f}",
            "[green]ok[/]" if ok else "[red]FAIL[/]",
        )
    console.print(table)
    verdict = "[green]PASS[/]" if check["passed"] else "[red]FAIL[/]"
    console.print(
        f"check: {verdict} ({check['numerics']} artifact; tolerance: rel err <= {check['tolerance']:g})"
    )
