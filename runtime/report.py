"""What `vpuc run` prints (rich tables); `--json` prints the same figures as JSON instead.

Tables never cut a number: every column folds rather than truncates, and when stdout is
not a terminal the width is wide enough for any row (docs/metrics.md defines each figure).
"""

from __future__ import annotations

import sys
from typing import Any

from rich.console import Console
from rich.table import Table

WIDE = 200  # columns when stdout is a file or a pipe


def _console() -> Console:
    width = None if sys.stdout.isatty() else WIDE
    return Console(highlight=False, soft_wrap=True, width=width)


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in columns:
        table.add_column(
            column,
            overflow="fold",
            justify="left" if column in ("name", "layer", "output", "op") else "right",
        )
    return table


def print_run_report(executable, result: dict[str, Any], source: str, stats) -> None:
    console = _console()
    console.print(f"[bold]{executable.source}[/]  inputs: {source}")
    table = _table("Outputs", "name", "shape", "dtype", "min", "max", "mean")
    for out in result["outputs"]:
        values = [f"{out[k]:.6g}" if k in out else "-" for k in ("min", "max", "mean")]
        table.add_row(out["name"], "x".join(map(str, out["shape"])), out["dtype"], *values)
    console.print(table)
    for out in result["outputs"]:
        if out.get("nonfinite"):
            console.print(
                f"[yellow]warning[/]: output '{out['name']}' has {out['nonfinite']} NaN or infinite value(s)"
            )
    if stats is not None and stats.calls:
        _print_cost(console, executable, result, stats)
    elif stats is not None:
        console.print(f"host: {stats.host_ms:.3f} ms (no VPU subgraph)")
    if stats is not None and stats.host_ops:
        _print_host_ops(console, stats)
    if result["check"] is not None:
        _print_check(console, result["check"])


def _print_cost(console: Console, executable, result: dict[str, Any], stats) -> None:
    clock = executable.target.hardware.clock_mhz
    table = _table(
        f"VPU subgraphs ({executable.target.name}, {clock} MHz)",
        "id",
        "cycles",
        "us",
        "DRAM read B",
        "DRAM written B",
        "SRAM peak B",
        "MAC util",
    )
    for sg in result["subgraphs"]:
        table.add_row(
            str(sg["id"]),
            f"{sg['cycles']}",
            f"{sg['cycles'] / clock:.2f}",
            f"{sg['dram_read_bytes']}",
            f"{sg['dram_write_bytes']}",
            f"{sg['sram_peak_bytes']}",
            f"{sg['mac_utilization']:.1%}",
        )
    console.print(table)
    table = _table(
        "VPU layers (cycles charged as the estimate charges them; overlap: run beside earlier layers)",
        "sg", "layer", "op", "cycles", "overlap", "MACs",
    )  # fmt: skip
    for layer in result["layers"]:
        table.add_row(
            str(layer["subgraph"]), layer["name"], layer["op"], f"{layer['cycles']}",
            f"{layer.get('overlap_cycles', 0)}", f"{layer['macs']}",
        )  # fmt: skip
    console.print(table)
    cycles, transfer = result["cycles"], result["transfer_bytes"]
    console.print(
        f"host <-> VPU: {transfer['to_vpu']} B to the VPU, {transfer['from_vpu']} B back, "
        f"{cycles['link']} link cycles"
    )
    console.print(
        f"total: {cycles['total']} cycles = VPU {cycles['vpu']} + link {cycles['link']} "
        f"({cycles['total'] / clock:.2f} us at {clock} MHz); host {result['host_ms']:.3f} ms"
    )
    e2e = result.get("end_to_end")
    if e2e and e2e["total_modelled_us"] is None:
        console.print(
            "end to end on the target system: not modelled (artifact compiled before vpuc recorded it)"
        )
    elif e2e:
        console.print(
            f"end to end on the target system: {e2e['total_modelled_us']:.2f} us = VPU {e2e['vpu_us']:.2f} "
            f"+ link {e2e['link_us']:.2f} + host ops {e2e['host_modelled_us']:.2f} (modelled from the "
            f"target's \\[host] figures); host measured on this machine {e2e['host_measured_here_ms']:.3f} ms"
        )


def _print_host_ops(console: Console, stats, top: int = 8) -> None:
    """The host's most expensive ops of this run (wall time, measured by the VM's hook)."""
    totals: dict[str, list[float]] = {}
    for op in stats.host_ops:
        entry = totals.setdefault(op.name, [0.0, 0])
        entry[0] += op.ms
        entry[1] += 1
    title = f"Host ops (the {top} slowest of {len(totals)})" if len(totals) > top else "Host ops"
    table = _table(title, "name", "calls", "ms")
    for name, (ms, calls) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]:
        table.add_row(name, str(calls), f"{ms:.4f}")
    console.print(table)


def _print_check(console: Console, check: dict[str, Any]) -> None:
    if check["numerics"] == "int8":
        _print_subgraphs(console, check["qdq"])
    part = check["float"]
    if part.get("skipped"):
        console.print(f"End to end against {part['reference']}: not run ({part['skipped']})")
    else:
        where = part.get("model", check["model"])
        title = f"End to end against {part['reference']} ({where})"
        table = _table(title, "output", "max abs err", "rel err", "SQNR dB", "floor dB", "")
        for out in part["outputs"]:
            sqnr = f"{out['sqnr_db']:.1f}" if out["sqnr_db"] is not None else "nan"
            if out["sqnr_db"] is None and out["max_abs_err"] == 0:  # NaN is never "exact"
                sqnr = "exact"
            floor = out.get("sqnr_floor_db")
            table.add_row(
                out["name"],
                f"{out['max_abs_err']:.3g}",
                f"{out['rel_err']:.3g}",
                sqnr,
                "-" if floor is None else f"{floor:.1f}",
                _verdict(out["passed"]),
            )
        console.print(table)
    model = check.get("qdq_model")
    if model is not None:
        title = f"End to end against {model['reference']} ({model['model']})"
        table = _table(title, "output", "LSB", "max LSB", "exact", "")
        for out in model["outputs"]:
            none = out["max_lsb"] is None
            table.add_row(
                out["name"],
                "-" if none else f"{out['lsb']:.3g}",
                "-" if none else str(out["max_lsb"]),
                "-" if none else f"{out['exact_share']:.2%}",
                _verdict(out["passed"]) + (" (ties)" if out.get("explained_by_ties") else ""),
            )
        console.print(table)
        if model.get("ties_flipped") is not None:
            console.print(
                f"  past {model['tolerance_lsb']} LSB, but onnxruntime gives this answer with "
                f"{model['ties_flipped']} rounding(s) of values at a tie (k + 0.5 steps, within "
                "float noise) taken the other way: a later layer's gain carried them "
                "(docs/metrics.md)"
            )
    if check["numerics"] != "int8" and model is not None:
        rule = f"QOperator model <= {model['tolerance_lsb']} LSB"
    elif check["numerics"] != "int8":
        rule = "rel err <= " + str(part.get("tolerance_rel_err"))
    else:
        rule = f"each VPU layer <= {check['qdq']['tolerance_lsb']} LSB; SQNR >= floor"
        if model is not None:
            rule += f"; QDQ model <= {model['tolerance_lsb']} LSB"
    console.print(
        f"check: {_verdict(check['passed'], 'PASS', 'FAIL')} ({check['numerics']} artifact; {rule})"
    )


def _print_subgraphs(console: Console, qdq: dict[str, Any]) -> None:
    table = _table(f"Each VPU subgraph against the {qdq['reference']}", "subgraph", "layer", "elements",
                   "max LSB", "exact", "")  # fmt: skip
    for out in qdq["outputs"]:
        missing = out.get("missing")
        table.add_row(
            str(out["subgraph"]),
            out.get("layer") or out["output"] or "-",
            str(out["elements"]),
            "-" if missing else str(out["max_lsb"]),
            missing or f"{out['exact_share']:.2%}",
            _verdict(out["passed"]),
        )
    console.print(table)


def _verdict(ok: bool, yes: str = "ok", no: str = "FAIL") -> str:
    return f"[green]{yes}[/]" if ok else f"[red]{no}[/]"
