"""One timeline of a run (Chrome trace-event JSON, opens in Perfetto): host ops, host <-> VPU
transfers and every VPU unit, on one time axis.

The host's ops take the wall time they were measured at; each VPU call takes its simulated
time at the target's clock: the transfer of its inputs over the host link, the program
(each unit on its own track, token arrows between them), the transfer of its outputs. The
host waits for the VPU, so the axis is the run as a host with a real VPU would see it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from vpuc.runtime.stats import RunStats
from vpuc.sim.trace import to_chrome_trace

HOST_PID, LINK_PID, VPU_PID = 1, 2, 3


def run_trace(stats: RunStats) -> dict[str, Any]:
    us_per_cycle = 1.0 / stats.clock_mhz if stats.clock_mhz else 0.0
    events = [_meta("process_name", HOST_PID, 0, "host CPU"), _meta("thread_name", HOST_PID, 1, "host ops")]
    if stats.calls:
        events += [
            _meta("process_name", LINK_PID, 0, "host <-> VPU link"),
            _meta("thread_name", LINK_PID, 1, "link"),
        ]
        events.append(_meta("process_name", VPU_PID, 0, "VPU"))
    items = [(op.start_s, "host", op) for op in stats.host_ops] + [
        (c.started_s, "vpu", c) for c in stats.calls
    ]
    cursor, flow_base = 0.0, 0
    for _, kind, item in sorted(items, key=lambda x: x[0]):
        if kind == "host":
            duration = (item.end_s - item.start_s) * 1e6
            events.append(_slice(HOST_PID, 1, item.name, cursor, duration, {}))
            cursor += duration
            continue
        cursor, flow_base = _vpu_call(events, item, cursor, us_per_cycle, flow_base, stats)
    return {"traceEvents": events, "displayTimeUnit": "ns", "otherData": {"clock_mhz": stats.clock_mhz}}


def _vpu_call(events, call, cursor: float, us_per_cycle: float, flow_base: int, stats) -> tuple[float, int]:
    link_in = call.link_in_cycles * us_per_cycle
    link_out = call.link_out_cycles * us_per_cycle
    events.append(
        _slice(LINK_PID, 1, f"to VPU sg{call.subgraph}", cursor, link_in, {"bytes": call.to_vpu_bytes})
    )
    cursor += link_in
    if call.result is not None:
        sim = to_chrome_trace(call.result)["traceEvents"]
        flow_max = 0
        for event in sim:
            if event.get("ph") == "M":
                if event["name"] == "thread_name" and not any(
                    e.get("ph") == "M" and e.get("pid") == VPU_PID and e.get("tid") == event["tid"]
                    for e in events
                ):
                    events.append({**event, "pid": VPU_PID})
                continue
            moved = {**event, "pid": VPU_PID, "ts": cursor + event["ts"]}
            if "id" in event:
                moved["id"] = flow_base + event["id"]
                flow_max = max(flow_max, event["id"])
            if event.get("ph") == "X":
                moved["name"] = f"sg{call.subgraph} {event['name']}"
            events.append(moved)
        flow_base += flow_max
    else:
        events.append(
            _slice(
                VPU_PID, 9, f"subgraph {call.subgraph}", cursor, call.stats.total_cycles * us_per_cycle, {}
            )
        )
    cursor += call.stats.total_cycles * us_per_cycle
    events.append(
        _slice(LINK_PID, 1, f"from VPU sg{call.subgraph}", cursor, link_out, {"bytes": call.from_vpu_bytes})
    )
    return cursor + link_out, flow_base


def _slice(pid: int, tid: int, name: str, ts: float, dur: float, args: dict) -> dict[str, Any]:
    return {"name": name, "ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _meta(name: str, pid: int, tid: int, label: str) -> dict[str, Any]:
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {"name": label}}


def write_run_trace(stats: RunStats, path: str | Path) -> None:
    Path(path).write_text(json.dumps(run_trace(stats)))
