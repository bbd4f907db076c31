"""Chrome trace-event export of a run: one track per unit, one slice per instruction.

Reads a SimResult (simulator.py); the JSON opens in Perfetto (ui.perfetto.dev) and in
chrome://tracing. Times are microseconds at the target's clock; each slice carries its pc,
layer, cycles and disassembly; token hand-offs are flow arrows from signaller to waiter.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vpuc.sim.simulator import SimResult
from vpuc.sim.timing import QUEUED_UNITS
from vpuc.targets.isa.asm import format_instruction
from vpuc.targets.isa.formats import Unit

PROCESS_ID = 1
UNIT_TRACKS = {Unit.DMA: 1, Unit.MAC: 2, Unit.VEC: 3}


def to_chrome_trace(result: SimResult) -> dict[str, Any]:
    """The trace as a dict: {"traceEvents": [...], "displayTimeUnit": "ns", ...}."""
    us_per_cycle = 1.0 / result.stats.clock_mhz
    events: list[dict[str, Any]] = [_process_name(result)]
    for unit in QUEUED_UNITS:
        events.append(_meta("thread_name", UNIT_TRACKS[unit], {"name": unit.name}))
        events.append(_meta("thread_sort_index", UNIT_TRACKS[unit], {"sort_index": int(unit)}))
    program, timeline = result.program, result.timeline
    names = program.layer_names
    for pc, (instruction, plan) in enumerate(zip(program.instructions, result.plans, strict=True)):
        if plan.unit not in UNIT_TRACKS:
            continue
        layer = names.get(instruction.layer, f"layer{instruction.layer}")
        events.append(
            {
                "name": f"{instruction.mnemonic} {layer}",
                "cat": plan.unit.name,
                "ph": "X",
                "pid": PROCESS_ID,
                "tid": UNIT_TRACKS[plan.unit],
                "ts": timeline.start[pc] * us_per_cycle,
                "dur": plan.cycles * us_per_cycle,
                "args": {
                    "pc": pc,
                    "layer": layer,
                    "cycles": plan.cycles,
                    "macs": plan.macs,
                    "instruction": format_instruction(instruction),
                },
            }
        )
    events += _flows(result, us_per_cycle)
    return {
        "traceEvents": events,
        "displayTimeUnit": "ns",
        "otherData": {"target": result.target.name, "total_cycles": timeline.total_cycles},
    }


def _flows(result: SimResult, us_per_cycle: float) -> list[dict[str, Any]]:
    """A flow arrow per token hand-off, from the signalling slice to the waiting one. Each
    end sits in the middle of its slice: at a slice's edge a viewer may bind it to the
    neighbour that ends or starts at the same time."""
    flows = []
    timeline = result.timeline
    for flow_id, (producer, consumer, token) in enumerate(timeline.edges, start=1):
        common = {"name": f"token {token}", "cat": "token", "pid": PROCESS_ID, "id": flow_id, "bp": "e"}
        for phase, pc in (("s", producer), ("f", consumer)):
            middle = (timeline.start[pc] + timeline.end[pc]) / 2 * us_per_cycle
            flows.append({**common, "ph": phase, "tid": UNIT_TRACKS[result.plans[pc].unit], "ts": middle})
    return flows


def _process_name(result: SimResult) -> dict[str, Any]:
    return _meta("process_name", 0, {"name": f"VPU ({result.target.name})"})


def _meta(name: str, tid: int, args: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": PROCESS_ID, "tid": tid, "args": args}


def write_chrome_trace(result: SimResult, path: str | Path) -> None:
    """Write the trace JSON to `path`."""
    Path(path).write_text(json.dumps(to_chrome_trace(result)))
