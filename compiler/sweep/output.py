"""What a sweep writes into DIR and prints: sweep.json (every point), sweep.csv (one row a
point), pareto.svg/.png (latency against area, energy as colour, the front marked) and
effect_<param>.svg/.png (each parameter's value against the median latency and energy of
the points with it), and the table of the front and the best points (docs/sweep.md).
"""

from __future__ import annotations

import csv
import json
import statistics
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from vpuc.compiler.sweep.pareto import OBJECTIVES

SCALARS = (
    "cycles",
    "latency_us",
    "vpu_cycles",
    "link_cycles",
    "dram_read_bytes",
    "dram_write_bytes",
    "sram_accessed_bytes",
    "host_link_bytes",
    "sram_peak_bytes",
    "macs",
    "mac_utilization",
    "host_ops",
    "host_mac_share",
    "area_mm2",
    "energy_uj",
)
PLOTS_MISSING = "plots need matplotlib, an optional extra of vpuc: pip install 'vpuc[sweep]'"


def write_json(result: dict, folder: Path) -> None:
    _atomic(folder / "sweep.json", json.dumps(result, indent=2, allow_nan=False))


def write_csv(result: dict, folder: Path) -> None:
    params = result["params"]
    partial = folder / "sweep.csv.partial"
    with partial.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["model", "point", *params, "status", "pareto", *SCALARS, "reason"])
        for r in result["points"]:
            figures = r["figures"] or {}
            writer.writerow(
                [
                    r["model"],
                    r["id"],
                    *(r["point"][p] for p in params),
                    r["status"],
                    r.get("pareto", False),
                    *(figures.get(k, "") for k in SCALARS),
                    r["reason"] or "",
                ]
            )
    partial.replace(folder / "sweep.csv")


def _atomic(path: Path, text: str) -> None:
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    partial.replace(path)


def write_plots(result: dict, folder: Path) -> list[str]:
    """The Pareto scatter and one effect plot per parameter, per model; the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker
    except ImportError:
        return []
    written = []
    for model in result["models"]:
        ok = [r for r in result["points"] if r["model"] == model and r["status"] == "ok"]
        if not ok:
            continue
        stem = "" if len(result["models"]) == 1 else f"{model}_"
        fig, ax = plt.subplots(figsize=(6.4, 4.8))
        area = [r["figures"]["area_mm2"] for r in ok]
        latency = [r["figures"]["latency_us"] for r in ok]
        energy = [r["figures"]["energy_uj"] for r in ok]
        dots = ax.scatter(area, latency, c=energy, cmap="viridis", s=28)
        fig.colorbar(dots, ax=ax, label="energy proxy (uJ per inference)")
        best = sorted((r for r in ok if r.get("pareto")), key=lambda r: r["figures"]["area_mm2"])
        ax.plot(
            [r["figures"]["area_mm2"] for r in best],
            [r["figures"]["latency_us"] for r in best],
            "o",
            mfc="none",
            mec="red",
            ms=10,
            label="Pareto front (latency, area, energy)",
        )
        ax.set(
            xlabel="area proxy (mm^2, 45 nm)",
            ylabel="latency (us)",
            xscale="log",
            title=f"{model}: {len(ok)} points",
        )
        ticks = [
            t
            for t in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50, 100)
            if min(area) / 1.5 <= t <= max(area) * 1.5
        ]
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
        ax.legend(loc="upper right")
        written += _save(fig, folder / f"{stem}pareto", plt)
        for param in result["params"]:
            written += _effect(plt, ok, param, folder / f"{stem}effect_{param.replace('.', '_')}", model)
    return written


def _effect(plt, ok: list[dict], param: str, stem: Path, model: str) -> list[str]:
    values = sorted({r["point"][param] for r in ok})
    fig, left = plt.subplots(figsize=(6.4, 4.0))
    right = left.twinx()
    for axis, key, colour in ((left, "latency_us", "tab:blue"), (right, "energy_uj", "tab:orange")):
        medians = [statistics.median(r["figures"][key] for r in ok if r["point"][param] == v) for v in values]
        axis.plot([str(v) for v in values], medians, "o-", color=colour)
        axis.set_ylabel(f"median {key}", color=colour)
    left.set(xlabel=param, title=f"{model}: {param} (median over the other parameters)")
    return _save(fig, stem, plt)


def _save(fig, stem: Path, plt) -> list[str]:
    fig.tight_layout()
    names = []
    for suffix in (".svg", ".png"):
        fig.savefig(stem.with_suffix(suffix), dpi=110)
        names.append(stem.with_suffix(suffix).name)
    plt.close(fig)
    return names


def print_table(result: dict, best: int = 5) -> None:
    console = Console(highlight=False, soft_wrap=True, width=None if sys.stdout.isatty() else 200)
    params = result["params"]
    for model in result["models"]:
        rows = [r for r in result["points"] if r["model"] == model]
        ok = [r for r in rows if r["status"] == "ok"]
        shown = [r for r in ok if r.get("pareto")]
        for key in OBJECTIVES:
            shown += sorted(ok, key=lambda r: r["figures"][key])[:best]
        seen, table = (
            set(),
            Table(
                title=f"{model}: the Pareto front, then the best {best} by each objective",
                title_justify="left",
            ),
        )
        for column in (
            "point",
            *params,
            "front",
            "latency us",
            "cycles",
            "area mm2",
            "energy uJ",
            "SRAM peak B",
            "DRAM B",
            "MAC util",
            "host ops",
            "host MACs",
        ):
            table.add_column(column, justify="left" if column == "point" else "right")
        for r in shown:
            if r["id"] in seen:
                continue
            seen.add(r["id"])
            f = r["figures"]
            table.add_row(
                r["id"],
                *(str(r["point"][p]) for p in params),
                "*" if r.get("pareto") else "",
                f"{f['latency_us']:.2f}",
                str(f["cycles"]),
                f"{f['area_mm2']:.3f}",
                f"{f['energy_uj']:.2f}",
                str(f["sram_peak_bytes"]),
                str(f["dram_read_bytes"] + f["dram_write_bytes"]),
                f"{f['mac_utilization']:.1%}",
                str(f["host_ops"]),
                f"{f['host_mac_share']:.1%}",
            )
        console.print(table)
        bad = [r for r in rows if r["status"] != "ok"]
        for r in bad[:10]:
            console.print(f"{r['status']}: {r['id']} {r['point']}: {r['reason']}")
        if len(bad) > 10:
            console.print(f"... and {len(bad) - 10} more not feasible (sweep.json has every reason)")
    s = result["summary"]
    console.print(
        f"{s['points']} points: {s['ok']} ok, {s['infeasible']} infeasible, {s['failed']} failed; "
        f"{s['computed']} computed, {s['reused']} from the store; {result['wall_s']:.1f} s"
    )
