"""The figures of the HTML report, read from the artifact's report.json and a run JSON:
the summary rows (each the JSON's own value, named by its key path) and the per-layer rows
(the code generator's estimate joined with the simulated run). docs/report.md defines the
two figures computed here: per-layer MAC utilisation and the distance from the roofline."""

from __future__ import annotations

from typing import Any

from vpuc.runtime.report_html.keys import get


def summary_rows(report: dict, run: dict | None) -> list[tuple[str, str, Any]]:
    """(label, key path, value) for the network summary, every value as the JSON holds it."""
    rows: list[tuple[str, str, Any]] = [("model", "report.model", report.get("model"))]
    totals = report.get("totals", {})
    rows += [
        (f"ONNX ops on the {d}", f"report.totals.{d}_ops", totals.get(f"{d}_ops")) for d in ("vpu", "cpu")
    ]
    partition = report.get("partition")
    if partition:
        for key in ("subgraphs", "boundaries", "bytes"):
            rows.append((f"partition {key}", f"report.partition.totals.{key}", partition["totals"][key]))
    vpu = report.get("vpu")
    if vpu:
        total = vpu["total"]
        for name in ("cycles", "macs", "mac_utilization", "dram_read_bytes", "dram_write_bytes",
                     "weight_bytes", "sram_peak_bytes"):  # fmt: skip
            rows.append((f"estimate: {name.replace('_', ' ')}", f"report.vpu.total.{name}", get(total, name)))
    for output in (report.get("accuracy") or {}).get("outputs", []):
        rows.append((f"SQNR of {output['name']} (dB, QDQ vs float)", "report.accuracy.outputs.sqnr_db",
                     get(output, "sqnr_db")))  # fmt: skip
    if run:
        for key in ("total", "vpu", "link"):
            rows.append((f"run: {key} cycles", f"run.cycles.{key}", run["cycles"][key]))
        for key in ("to_vpu", "from_vpu"):
            rows.append((f"run: bytes {key.replace('_', ' ')}", f"run.transfer_bytes.{key}",
                         run["transfer_bytes"][key]))  # fmt: skip
        rows.append(("run: host ms", "run.host_ms", run["host_ms"]))
        if run.get("check"):
            rows.append(("check passed", "run.check.passed", run["check"]["passed"]))
    return rows


def layer_rows(report: dict, run: dict | None, hardware: dict) -> list[dict[str, Any]]:
    """One row per VPU layer: estimate, simulated cycles, MACs, utilisation, DRAM bytes,
    the roofline bound (the compiler's, report.json `vpu.layers[].roofline`, defined in
    targets/roofline.py) and how far the layer is from it."""
    simulated = {(r["subgraph"], r["name"]): r["cycles"] for r in (run or {}).get("layers", [])}
    peak = hardware.get("mac_rows", 0) * hardware.get("mac_cols", 0)
    rows = []
    for layer in (report.get("vpu") or {}).get("layers", []):
        estimate = get(layer, "estimate_cycles")
        cycles = simulated.get((layer["subgraph"], layer["name"]))
        measured = cycles if cycles is not None else estimate
        dram = get(layer, "dram_read_bytes", 0) + get(layer, "dram_write_bytes", 0)
        roofline = layer.get("roofline") or {}  # none in an artifact compiled before it
        bound = roofline.get("bound_cycles")
        rows.append({
            "subgraph": layer["subgraph"], "name": layer["name"], "op": layer["op"],
            "estimate_cycles": estimate, "simulated_cycles": cycles, "macs": layer["macs"],
            "utilization": layer["macs"] / (measured * peak) if measured and peak else 0.0,
            "dram_read_bytes": get(layer, "dram_read_bytes", 0),
            "dram_write_bytes": get(layer, "dram_write_bytes", 0),
            "bound_cycles": bound, "from_bound": measured / bound if bound and measured else None,
            "bound_by": roofline.get("bound_by"),
            "intensity": layer["macs"] / dram if dram else 0.0,
            "achieved": layer["macs"] / measured if measured else 0.0,
        })  # fmt: skip
    return rows


def check_rows(check: dict | None) -> list[dict[str, Any]]:
    """The check's rows as `vpuc run --check` reports them: one per output per reference."""
    rows = []
    for reference in ("float", "qdq"):
        part = (check or {}).get(reference)
        for output in (part or {}).get("outputs", []):
            rows.append({"reference": part.get("reference", reference), **output})
    return rows
