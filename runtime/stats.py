"""What one run cost: VPU cycles per subgraph and layer, host <-> VPU transfers, host time.

Definitions (docs/metrics.md):
    cycles.vpu        sum over VPU calls of the simulated program's total cycles
    cycles.link       sum over VPU calls of the host link's cycles: one transfer per
                      direction per call, host_link_latency_cycles + ceil(bytes / host_link_bytes_per_cycle)
    cycles.total      cycles.vpu + cycles.link (VPU clock cycles; host time is apart)
    subgraphs[i]      per VPU subgraph: its cycles, DMA bytes read and written, SRAM peak,
                      MAC utilisation = MACs / (MAC busy cycles * rows * cols)
    layers[j]         per layer of a subgraph: cycles = end - start of its instructions
                      (layers overlap in a pipelined program), MACs
    transfer_bytes    int8 bytes the host sent to the VPU and received from it
    host_ms           wall time of the run minus the time inside VPU calls (simulation):
                      the host graph's ops and the VM between them
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpuc.targets import Target
from vpuc.targets.isa.attribution import charge_layers


@dataclass(frozen=True)
class HostOp:
    """One VM call instruction, timed by the VM's instrument hook."""

    name: str
    start_s: float
    end_s: float

    @property
    def ms(self) -> float:
        return (self.end_s - self.start_s) * 1e3


@dataclass
class RunStats:
    cycles: dict[str, int]
    subgraphs: list[dict[str, Any]]
    layers: list[dict[str, Any]]
    transfer_bytes: dict[str, int]
    host_ms: float
    host_ops: list[HostOp] = field(default_factory=list)
    calls: list[Any] = field(default_factory=list)  # CallRecords, in call order
    started_s: float = 0.0
    clock_mhz: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "cycles": self.cycles,
            "subgraphs": self.subgraphs,
            "layers": self.layers,
            "transfer_bytes": self.transfer_bytes,
            "host_ms": round(self.host_ms, 4),
        }


def run_stats(
    target: Target, vpu_calls, calls, host_ops: list[HostOp], started: float, wall_s: float
) -> RunStats:
    symbols = {c.symbol for c in vpu_calls}
    ops_of = {
        c.subgraph: {layer["id"]: layer.get("op", "") for layer in c.entry.get("layers", [])}
        for c in vpu_calls
    }
    vpu = sum(c.stats.total_cycles for c in calls)
    link = sum(c.link_cycles for c in calls)
    subgraphs: dict[int, dict[str, Any]] = {}
    layers: list[dict[str, Any]] = []
    for call in calls:
        s = call.stats
        entry = subgraphs.setdefault(
            call.subgraph,
            {
                "id": call.subgraph,
                "cycles": 0,
                "dram_read_bytes": 0,
                "dram_write_bytes": 0,
                "sram_peak_bytes": 0,
                "mac_utilization": 0.0,
                "_macs": 0,
                "_mac_capacity": 0,
            },
        )
        entry["cycles"] += s.total_cycles
        entry["dram_read_bytes"] += s.dram_read_bytes
        entry["dram_write_bytes"] += s.dram_written_bytes
        entry["sram_peak_bytes"] = max(entry["sram_peak_bytes"], s.sram_peak_bytes)
        entry["_macs"] += s.macs
        entry["_mac_capacity"] += s.total_cycles * target.hardware.macs_per_cycle  # as compile: total
        real = [layer for layer in s.layers if layer.layer != 0]
        charges = charge_layers([(layer.start_cycle, layer.end_cycle) for layer in real])
        for layer, (charged, overlap) in zip(real, charges, strict=True):
            layers.append(
                {
                    "subgraph": call.subgraph,
                    "name": layer.name,
                    "op": ops_of.get(call.subgraph, {}).get(layer.layer, ""),
                    "cycles": charged,  # targets/isa/attribution.py, as the estimate
                    "overlap_cycles": overlap,
                    "macs": layer.macs,
                }
            )
    for entry in subgraphs.values():
        capacity = entry.pop("_mac_capacity")
        entry["mac_utilization"] = round(entry.pop("_macs") / capacity, 4) if capacity else 0.0
    in_vpu = sum(c.wall_s for c in calls)
    host = [op for op in host_ops if op.name not in symbols]
    return RunStats(
        cycles={"total": vpu + link, "vpu": vpu, "link": link},
        subgraphs=[subgraphs[k] for k in sorted(subgraphs)],
        layers=layers,
        transfer_bytes={
            "to_vpu": sum(c.to_vpu_bytes for c in calls),
            "from_vpu": sum(c.from_vpu_bytes for c in calls),
        },
        host_ms=max(0.0, wall_s - in_vpu) * 1e3,
        host_ops=host,
        calls=list(calls),
        started_s=started,
        clock_mhz=target.hardware.clock_mhz if target.hardware else 0,
    )


def end_to_end(stats: RunStats, target: Target, report: dict[str, Any]) -> dict[str, Any] | None:
    """The latency on the target system: the simulated VPU cycles and link cycles at the VPU
    clock, plus the target host's modelled time for the ops left on the host (the compile's
    partition report: `host_cycles_modelled` per op, from the target's [host] figures, at
    the host clock). Next to it, the host time measured on this machine (not the target's)."""
    ops = ((report or {}).get("partition") or {}).get("ops")
    if ops is None or not target.has_vpu:
        return None
    host = [op for op in ops if op.get("device") == "cpu"]
    clock, host_clock = target.hardware.clock_mhz, target.host.clock_mhz
    vpu_us, link_us = stats.cycles["vpu"] / clock, stats.cycles["link"] / clock
    known = all("host_cycles_modelled" in op for op in host)  # older artifacts lack it
    # every row's host part: a CPU node's, and the Q or DQ a VPU node left on the host
    host_cycles = sum(int(op.get("host_cycles_modelled", 0)) for op in ops) if known else None
    if known:  # an NCHW input's transpose the host does for a program (compiler/lower/reader/edges.py)
        programs = ((report or {}).get("vpu") or {}).get("subgraphs", [])
        host_cycles += sum(int(p.get("input_transpose_host_cycles", 0)) for p in programs)
    host_us = host_cycles / host_clock if known else None
    return {
        "vpu_us": round(vpu_us, 3),
        "link_us": round(link_us, 3),
        "host_modelled_us": round(host_us, 3) if known else None,
        "host_modelled_cycles": host_cycles,
        "total_modelled_us": round(vpu_us + link_us + host_us, 3) if known else None,
        "host_measured_here_ms": round(stats.host_ms, 4),
    }
