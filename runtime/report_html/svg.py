"""The drawings of the HTML report, as inline SVG strings: the partition graph, the
roofline, the where-the-cycles-go bars and the run's timeline. Plain strings, no plotting
library: every figure drawn is one the caller hands in."""

from __future__ import annotations

import math
from html import escape

from vpuc.runtime.report_html.layout import layered_layout

NODE_W, NODE_H, GAP_X, GAP_Y = 120, 26, 14, 34
SUBGRAPH_COLOURS = ["#2f6fdf", "#1f9d8b", "#7a4fd0", "#c2417a", "#3d8b2f", "#b8741a"]
HOST_COLOUR, NONE_COLOUR = "#e0a100", "#b0b0b0"
MAX_TIMELINE_EVENTS = 4000


def subgraph_colour(subgraph: int) -> str:
    return SUBGRAPH_COLOURS[subgraph % len(SUBGRAPH_COLOURS)]


def graph_svg(ops: list[dict], boundary_bytes: dict[str, int]) -> str:
    layout = layered_layout(ops)
    width = max(1, layout.width) * (NODE_W + GAP_X) + GAP_X
    height = max(1, layout.depth) * (NODE_H + GAP_Y) + GAP_Y

    def centre(name: str) -> tuple[float, float]:
        row, col = layout.position[name]
        return GAP_X + col * (NODE_W + GAP_X) + NODE_W / 2, GAP_Y / 2 + row * (NODE_H + GAP_Y) + NODE_H / 2

    parts = [f'<svg id="graph" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">']
    placed, origin = _effective_placement(ops, layout.edges)
    for src, dst, tensor in layout.edges:
        (x1, y1), (x2, y2) = centre(src), centre(dst)
        crossing = placed[src] != placed[dst]  # the ends run in different places
        tensor = origin.get(tensor, tensor)
        parts.append(
            f'<line x1="{x1:.0f}" y1="{y1 + NODE_H / 2:.0f}" x2="{x2:.0f}" y2="{y2 - NODE_H / 2:.0f}" '
            f'class="edge{" crossing" if crossing else ""}"/>'
        )
        if crossing and tensor in boundary_bytes:
            parts.append(
                f'<text class="bytes" x="{(x1 + x2) / 2 + 4:.0f}" y="{(y1 + y2) / 2:.0f}">'
                f"{boundary_bytes[tensor]} B</text>"
            )
    for index, op in enumerate(ops):
        x, y = centre(op["name"])
        device = op["device"]
        fill = subgraph_colour(op["subgraph"]) if device == "vpu" else HOST_COLOUR
        fill = NONE_COLOUR if device == "none" else fill
        label = op["op"][:13] + (f" sg{op['subgraph']}" if device == "vpu" else "")
        title = f"{op['name']}: {op['reason']}"
        parts.append(
            f'<g class="node {device}" data-index="{index}" tabindex="0">'
            f"<title>{escape(title)}</title>"
            f'<rect x="{x - NODE_W / 2:.0f}" y="{y - NODE_H / 2:.0f}" width="{NODE_W}" height="{NODE_H}" '
            f'rx="4" fill="{fill}"/><text x="{x:.0f}" y="{y + 4:.0f}">{escape(label[:18])}</text></g>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _effective_placement(ops: list[dict], edges) -> tuple[dict, dict]:
    """Where each op's value lives: a removed op (a glue Transpose the passes folded) lives
    where its first input's producer does, and its output is that input's tensor (`origin`),
    so the edge that really crosses host/VPU is the one drawn red, with the boundary's bytes."""
    first_input = {}
    for src, dst, tensor in edges:
        first_input.setdefault(dst, (src, tensor))
    placed, origin = {}, {}
    for op in ops:  # topological order
        name = op["name"]
        if op["device"] == "none" and name in first_input:
            src, tensor = first_input[name]
            placed[name] = placed[src]
            for out in op.get("outputs", []):
                origin[out] = origin.get(tensor, tensor)
        else:
            placed[name] = (op["device"], op["subgraph"])
    return placed, origin


def roofline_svg(points: list[dict], peak_macs_per_cycle: float, bytes_per_cycle: float) -> str:
    """points: {label, intensity (MACs per DRAM byte), achieved (MACs per cycle)}; log axes."""
    w, h, pad = 520, 320, 46
    xs = [p["intensity"] for p in points if p["intensity"] > 0] + [peak_macs_per_cycle / bytes_per_cycle]
    x_lo, x_hi = math.log10(min(xs)) - 0.5, math.log10(max(xs)) + 0.5
    ys = [p["achieved"] for p in points if p["achieved"] > 0] + [peak_macs_per_cycle]
    y_lo, y_hi = math.log10(min(ys)) - 0.5, math.log10(peak_macs_per_cycle) + 0.3

    def sx(v: float) -> float:
        return pad + (math.log10(v) - x_lo) / (x_hi - x_lo) * (w - 2 * pad)

    def sy(v: float) -> float:
        return h - pad - (math.log10(v) - y_lo) / (y_hi - y_lo) * (h - 2 * pad)

    ridge = peak_macs_per_cycle / bytes_per_cycle
    left = 10**x_lo
    parts = [f'<svg id="roofline" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}">']
    parts.append(
        f'<polyline class="roof" points="{sx(left):.1f},{sy(max(left * bytes_per_cycle, 10**y_lo)):.1f} '
        f'{sx(ridge):.1f},{sy(peak_macs_per_cycle):.1f} {sx(10**x_hi):.1f},{sy(peak_macs_per_cycle):.1f}"/>'
    )
    for p in points:
        if p["intensity"] > 0 and p["achieved"] > 0:
            parts.append(
                f'<circle cx="{sx(p["intensity"]):.1f}" cy="{sy(p["achieved"]):.1f}" r="4">'
                f"<title>{escape(p['label'])}</title></circle>"
            )
    parts.append(f'<text x="{w / 2:.0f}" y="{h - 8}" text-anchor="middle">MACs per DRAM byte (log)</text>')
    parts.append(f'<text x="12" y="{h / 2:.0f}" transform="rotate(-90 12 {h / 2:.0f})" '
                 'text-anchor="middle">MACs per cycle (log)</text>')  # fmt: skip
    parts.append(f'<text x="{sx(ridge) + 6:.0f}" y="{sy(peak_macs_per_cycle) - 6:.0f}">'
                 f"peak {peak_macs_per_cycle:g} MACs/cycle</text></svg>")  # fmt: skip
    return "".join(parts)


def bars_svg(rows: list[tuple[str, int]]) -> str:
    """Horizontal bars, one per (label, cycles), longest first."""
    rows = sorted(rows, key=lambda r: -r[1])
    top = max((c for _, c in rows), default=1) or 1
    w, bar, label_w = 640, 16, 230
    parts = [
        f'<svg id="bars" xmlns="http://www.w3.org/2000/svg" width="{w}" height="{len(rows) * (bar + 4) + 8}">'
    ]
    for i, (label, cycles) in enumerate(rows):
        y = 4 + i * (bar + 4)
        length = (w - label_w - 90) * cycles / top
        parts.append(
            f'<text x="{label_w - 6}" y="{y + 12}" text-anchor="end">{escape(label[:34])}</text>'
            f'<rect x="{label_w}" y="{y}" width="{length:.1f}" height="{bar}" class="bar"/>'
            f'<text x="{label_w + length + 4:.0f}" y="{y + 12}">{cycles}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def timeline_svg(trace: dict) -> str:
    """The run's Chrome trace events (ph X) drawn as one row per (process, thread)."""
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    names = {}
    for e in trace.get("traceEvents", []):
        if e.get("ph") == "M":
            key = (e["pid"], e.get("tid", 0)) if e["name"] == "thread_name" else (e["pid"], None)
            names[key] = e.get("args", {}).get("name", "")
    tracks = sorted({(e["pid"], e["tid"]) for e in events})
    end = max((e["ts"] + e.get("dur", 0) for e in events), default=0.0) or 1.0
    w, row, label_w = 900, 20, 170
    parts = [
        f'<svg id="timeline" xmlns="http://www.w3.org/2000/svg" width="{w}" '
        f'height="{len(tracks) * row + 24}">'
    ]
    for i, (pid, tid) in enumerate(tracks):
        label = f"{names.get((pid, None), pid)}: {names.get((pid, tid), tid)}"
        parts.append(f'<text x="4" y="{i * row + 14}">{escape(label[:28])}</text>')
    index = {track: i for i, track in enumerate(tracks)}
    for e in events[:MAX_TIMELINE_EVENTS]:
        x = label_w + e["ts"] / end * (w - label_w - 10)
        width = max(0.5, e.get("dur", 0) / end * (w - label_w - 10))
        y = index[(e["pid"], e["tid"])] * row + 3
        title = f"{escape(str(e['name']))} {e.get('dur', 0):.2f} us"
        parts.append(
            f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{row - 6}" '
            f'class="slice p{e["pid"]}"><title>{title}</title></rect>'
        )
    axis = len(tracks) * row + 18
    parts.append(f'<text x="{label_w}" y="{axis}">0 us</text>'
                 f'<text x="{w - 10}" y="{axis}" text-anchor="end">{end:.1f} us</text></svg>')  # fmt: skip
    return "".join(parts)
