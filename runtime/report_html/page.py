"""The HTML page of `vpuc report`: sections in order, inline style and script, nothing
fetched when it opens. Every section reads the dictionaries tables.py and svg.py make."""

from __future__ import annotations

import json
from html import escape
from typing import Any

from vpuc.runtime.report_html import svg
from vpuc.runtime.report_html.tables import check_rows, layer_rows, summary_rows

STYLE = """
body{font:14px system-ui,sans-serif;margin:20px;color:#222;max-width:1400px}
h1{font-size:20px}h2{font-size:16px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12px}td,th{border:1px solid #ddd;padding:2px 6px;text-align:left}
th.sortable{cursor:pointer;background:#f3f3f3}td.num{text-align:right;font-variant-numeric:tabular-nums}
.missing{color:#a40;font-style:italic}.scroll{overflow:auto;max-height:640px;border:1px solid #eee}
#graph text{font-size:10px;text-anchor:middle;fill:#fff;pointer-events:none}
#graph .node{cursor:pointer}#graph .node.selected rect{stroke:#000;stroke-width:3}
#graph .edge{stroke:#999;stroke-width:1}#graph .edge.crossing{stroke:#d33;stroke-width:2}
#graph text.bytes{fill:#d33;text-anchor:start}
#details{position:sticky;top:0;background:#fffbe6;border:1px solid #e0c060;padding:6px;min-height:2em}
.legend span{display:inline-block;padding:1px 8px;margin-right:6px;color:#fff;border-radius:3px}
svg text{font-size:11px}.roof{fill:none;stroke:#d33;stroke-width:2}circle{fill:#2f6fdf}.bar{fill:#2f6fdf}
.slice.p1{fill:#e0a100}.slice.p2{fill:#d33}.slice.p3{fill:#2f6fdf}
"""

SCRIPT = """
const OPS = JSON.parse(document.getElementById('ops-data').textContent);
function show(g){
  document.querySelectorAll('#graph .node.selected').forEach(n=>n.classList.remove('selected'));
  g.classList.add('selected');
  const op = OPS[+g.dataset.index];
  const d = document.getElementById('details');
  d.textContent = '';
  for (const [k, v] of [['node', op.name], ['op', op.op], ['device', op.device],
                        ['subgraph', op.subgraph], ['reason', op.reason], ['figures', op.figures]]) {
    if (k === 'figures' && !v) continue;
    const line = document.createElement('div'); line.className = 'detail-' + k;
    line.textContent = k + ': ' + (v === null ? '-' : v); d.appendChild(line);
  }
}
document.querySelectorAll('#graph .node').forEach(g => {
  g.addEventListener('click', () => show(g));
  g.addEventListener('keydown', e => { if (e.key === 'Enter') show(g); });
});
document.querySelectorAll('table.sortable').forEach(table => {
  table.querySelectorAll('th').forEach((th, col) => th.addEventListener('click', () => {
    const body = table.tBodies[0], rows = Array.from(body.rows);
    const dir = th.dataset.dir === 'asc' ? -1 : 1; th.dataset.dir = dir === 1 ? 'asc' : 'desc';
    const key = r => { const c = r.cells[col]; const v = c.dataset.value;
                       return v !== undefined && v !== '' && !isNaN(+v) ? +v : c.textContent; };
    rows.sort((a, b) => { const x = key(a), y = key(b); return (x > y ? 1 : x < y ? -1 : 0) * dir; });
    rows.forEach(r => body.appendChild(r));
  }));
});
const link = document.getElementById('trace-link');
if (link) {
  const text = document.getElementById('trace-data').textContent;
  link.href = URL.createObjectURL(new Blob([text], {type: 'application/json'}));
}
"""


def render(report: dict, manifest: dict, run: dict | None, trace: dict | None, notes: list[str]) -> str:
    target = manifest["target"]
    hardware = target.get("hardware") or {}
    is_vpu = bool(report.get("vpu"))
    ops = (report.get("partition") or {}).get("ops") or report.get("ops", [])
    body = [
        f"<h1>{escape(str(report.get('model')))} on {escape(target['name'])} ({escape(target['kind'])})</h1>"
    ]
    body += [f'<p class="missing">{escape(n)}</p>' for n in notes]
    body.append("<h2>Summary</h2>" + _summary(summary_rows(report, run)))
    if report.get("partition"):
        body.append(_graph_section(report["partition"], ops))
    else:
        body.append(f"<h2>Where each op runs</h2><p>all {len(ops)} ONNX ops run on the host CPU "
                    f"(target {escape(target['name'])} has no VPU).</p>")  # fmt: skip
    if is_vpu:
        layers = layer_rows(report, run, hardware)
        body.append(_layer_section(layers, run))
        body.append(_charts(layers, hardware, run))
    body.append(_timeline_section(trace, run))
    body.append(_accuracy_section(report.get("accuracy"), run))
    figures = _layer_figures(report, layer_rows(report, run, hardware) if is_vpu else [])
    data = json.dumps(
        [
            {
                **{k: op.get(k) for k in ("name", "op", "device", "subgraph", "reason")},
                "figures": figures.get(op["name"]),
            }
            for op in ops
        ]
    )
    trace_data = ""
    if trace:
        trace_data = (
            f'<script type="application/json" id="trace-data">{_script_safe(json.dumps(trace))}</script>'
        )
    return (
        '<!DOCTYPE html><html><head><meta charset="utf-8">'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; script-src 'unsafe-inline'; img-src data: blob:\">"
        f"<title>vpuc report: {escape(str(report.get('model')))}</title><style>{STYLE}</style></head><body>"
        + "".join(body)
        + f'<script type="application/json" id="ops-data">{_script_safe(data)}</script>{trace_data}'
        + f"<script>{SCRIPT}</script></body></html>"
    )


def _layer_figures(report: dict, layers: list[dict]) -> dict[str, str]:
    """ONNX node -> the VPU layer it is part of, with that layer's cycles and MACs."""
    vpu_layers = (report.get("vpu") or {}).get("layers", [])
    nodes = {(layer["subgraph"], layer["name"]): layer.get("nodes", []) for layer in vpu_layers}
    figures = {}
    for row in layers:
        simulated = "-" if row["simulated_cycles"] is None else row["simulated_cycles"]
        text = (f"layer {row['op']} (sg{row['subgraph']}): {row['estimate_cycles']} estimated cycles, "
                f"{simulated} simulated, {row['macs']} MACs, {row['bound_by']}-bound")  # fmt: skip
        for node in nodes.get((row["subgraph"], row["name"]), []):
            figures[node] = text
    return figures


def _script_safe(text: str) -> str:
    return text.replace("</", "<\\/")


def _cell(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        text = "-" if value is None else ("yes" if value else "no")
    elif isinstance(value, float):
        text = f"{value:.4g}"
    else:
        text = str(value)
    raw = "" if value is None else json.dumps(value)
    numeric = isinstance(value, int | float) and not isinstance(value, bool)
    return f'<td{" class=num" if numeric else ""} data-value="{escape(raw)}">{escape(text)}</td>'


def _summary(rows) -> str:
    cells = "".join(
        f'<tr data-key="{key}"><th>{escape(label)}</th>{_cell(value)}</tr>' for label, key, value in rows
    )
    return f'<table id="summary">{cells}</table>'


def _graph_section(partition: dict, ops: list[dict]) -> str:
    boundary_bytes = {b["tensor"]: b["bytes"] for b in partition.get("boundaries", [])}
    subgraphs = sorted({op["subgraph"] for op in ops if op["device"] == "vpu"})
    legend = "".join(
        f'<span style="background:{svg.subgraph_colour(s)}">VPU subgraph {s}</span>' for s in subgraphs
    ) + (f'<span style="background:{svg.HOST_COLOUR}">host CPU</span>'
         f'<span style="background:{svg.NONE_COLOUR}">removed by the passes</span>'
         '<span style="background:#d33">red edge: crosses host/VPU, bytes per inference</span>')  # fmt: skip
    boundaries = "".join(
        f"<tr><td>{escape(b['direction'])}</td><td>{escape(b['tensor'])}</td>{_cell(b['bytes'])}</tr>"
        for b in partition.get("boundaries", [])
    )
    return (
        f'<h2>Where each op runs</h2><div class="legend">{legend}</div>'
        '<p>Click a node (or hover) for its reason.</p><div id="details">no node selected</div>'
        f'<div class="scroll">{svg.graph_svg(ops, boundary_bytes)}</div>'
        f"<h3>Boundaries</h3><table><tr><th>direction</th><th>tensor</th><th>bytes</th></tr>{boundaries}</table>"
    )


LAYER_COLUMNS = [
    ("subgraph", "sg"), ("op", "op"), ("name", "layer"), ("estimate_cycles", "estimated cycles"),
    ("simulated_cycles", "simulated cycles"), ("macs", "MACs"), ("utilization", "MAC utilisation"),
    ("dram_read_bytes", "DRAM read B"), ("dram_write_bytes", "DRAM written B"),
    ("bound_cycles", "roofline bound (cycles)"), ("from_bound", "x bound"), ("bound_by", "bound by"),
]  # fmt: skip


def _layer_section(layers: list[dict], run: dict | None) -> str:
    head = "".join(f'<th class="sortable">{escape(title)}</th>' for _, title in LAYER_COLUMNS)
    rows = "".join(
        "<tr>"
        + "".join(_cell(row[key] if key != "name" else row[key][:60]) for key, _ in LAYER_COLUMNS)
        + "</tr>"
        for row in layers
    )
    note = "" if run else '<p class="missing">no run given: simulated cycles are missing</p>'
    table = f'<table id="layers" class="sortable"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
    return f'<h2>VPU layers</h2>{note}<div class="scroll">{table}</div>'


def _charts(layers: list[dict], hardware: dict, run: dict | None) -> str:
    peak = hardware.get("mac_rows", 0) * hardware.get("mac_cols", 0)
    points = [{"label": f"{r['op']} {r['name'][:50]}", "intensity": r["intensity"], "achieved": r["achieved"]}
              for r in layers]  # fmt: skip
    which = "simulated" if run else "estimated"
    key = "simulated_cycles" if run else "estimate_cycles"
    bars = [(f"sg{r['subgraph']} {r['op']} {r['name'][-24:]}", r[key]) for r in layers]
    bars = [(label, cycles) for label, cycles in bars if cycles is not None]  # a layer the run has no span of
    if run:
        bars.append(("host <-> VPU link", run["cycles"]["link"]))
    roof = svg.roofline_svg(points, peak, hardware.get("dram_bytes_per_cycle", 1)) if points and peak else ""
    return (
        f"<h2>Roofline ({which} cycles)</h2>{roof}<h2>Where the cycles go ({which})</h2>{svg.bars_svg(bars)}"
    )


def _timeline_section(trace: dict | None, run: dict | None) -> str:
    if not trace:
        what = "no run given" if not run else "the run's trace was not given"
        return (
            f'<h2>Timeline</h2><p class="missing" id="timeline-missing">{what}: vpuc run ARTIFACT '
            "--trace trace.json --json > run.json; vpuc report ARTIFACT --run run.json --trace trace.json</p>"
        )
    return (
        f'<h2>Timeline</h2><div class="scroll">{svg.timeline_svg(trace)}</div>'
        '<p><a id="trace-link" download="trace.json">the Perfetto trace (open in ui.perfetto.dev)</a></p>'
    )


def _accuracy_section(accuracy: dict | None, run: dict | None) -> str:
    parts = ["<h2>Accuracy</h2>"]
    if accuracy:
        rows = "".join(
            f"<tr><td>{escape(r['name'])}</td>{_cell(r.get('sqnr_db'))}</tr>"
            for r in accuracy.get("layers", [])
        )
        parts.append(
            "<h3>SQNR per layer (compile, QDQ vs float)</h3>"
            f'<table id="sqnr"><tr><th>layer</th><th>SQNR dB</th></tr>{rows}</table>'
        )
    else:
        parts.append(
            '<p class="missing">no accuracy figures in the artifact (a float compile measures none)</p>'
        )
    checks = check_rows((run or {}).get("check"))
    if checks:
        keys = [k for k in checks[0] if k != "reference"]
        keys += sorted({k for r in checks for k in r} - set(keys) - {"reference"})
        head = "".join(f"<th>{escape(k)}</th>" for k in ["reference", *keys])
        rows = "".join(
            "<tr>" + _cell(r["reference"]) + "".join(_cell(r.get(k)) for k in keys) + "</tr>" for r in checks
        )
        parts.append(f'<h3>The check</h3><table id="check"><tr>{head}</tr>{rows}</table>')
    else:
        parts.append('<p class="missing">no check: run with --check MODEL --json and pass --run</p>')
    return "".join(parts)
