"""Statistics of one simulated run: cycles, unit utilisation, bytes, MACs, per layer, stalls.

Computed from the plans (work and bytes of every instruction) and the timeline (when it
ran); the simulator returns them in SimResult.stats, the CLI prints them, the runtime
folds them into its reports. `to_json()` is the stable, documented form (docs/isa.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from vpuc.sim.machine import Plan
from vpuc.sim.timing import QUEUED_UNITS, Timeline
from vpuc.targets import Target
from vpuc.targets.isa.formats import Instruction, Unit

STALL_CAUSES = {Unit.DMA: "wait_dma", Unit.MAC: "wait_mac", Unit.VEC: "wait_vec"}


@dataclass(frozen=True)
class UnitStats:
    """One unit: cycles busy, share of the run, instructions, cycles stalled by cause."""

    busy_cycles: int
    utilisation: float
    instructions: int
    stall_cycles: dict[str, int]


@dataclass(frozen=True)
class LayerStats:
    """The instructions that carry one layer id: their span, work, traffic and stalls."""

    layer: int
    name: str
    start_cycle: int
    end_cycle: int
    instructions: int
    busy_cycles: dict[str, int]
    macs: int
    dram_read_bytes: int
    dram_written_bytes: int
    stall_cycles: int


@dataclass(frozen=True)
class SimStats:
    """Everything a run reports. Cycles are VPU clock cycles; host link cycles are apart."""

    target: str
    clock_mhz: int
    total_cycles: int
    instructions: int
    macs: int
    mac_utilisation: float
    dram_read_bytes: int
    dram_written_bytes: int
    sram_peak_bytes: int
    sram_bytes: int
    host_to_vpu_bytes: int = 0
    vpu_to_host_bytes: int = 0
    host_link_cycles: int = 0
    units: dict[str, UnitStats] = field(default_factory=dict)
    layers: tuple[LayerStats, ...] = ()

    @property
    def time_us(self) -> float:
        return self.total_cycles / self.clock_mhz

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        # the names compile and run reports use for the same figures (docs/metrics.md)
        out = _renamed(out)
        out["mac_busy_utilization"] = out.pop("mac_utilisation")  # MACs over MAC-busy cycles
        out["time_us"] = self.time_us
        out["layers"] = [_renamed(asdict(layer)) for layer in self.layers]
        return out


def collect_stats(
    target: Target,
    instructions: Sequence[Instruction],
    plans: Sequence[Plan],
    timeline: Timeline,
    layer_names: Mapping[int, str],
    host_bytes: tuple[int, int] = (0, 0),
) -> SimStats:
    """SimStats of a finished run; host_bytes = (host -> VPU, VPU -> host) bytes to account."""
    hardware = target.hardware
    total = timeline.total_cycles
    units = {u.name: _unit_stats(u, plans, timeline, total) for u in QUEUED_UNITS}
    macs = sum(p.macs for p in plans)
    mac_capacity = units["MAC"].busy_cycles * hardware.macs_per_cycle
    regions = [r for p in plans for r in (*p.reads, *p.writes)]
    host_cycles = sum(hardware.host_link_cycles(b) for b in host_bytes if b)
    return SimStats(
        target=target.name,
        clock_mhz=hardware.clock_mhz,
        total_cycles=total,
        instructions=len(instructions),
        macs=macs,
        mac_utilisation=macs / mac_capacity if mac_capacity else 0.0,
        dram_read_bytes=sum(p.dram_read_bytes for p in plans),
        dram_written_bytes=sum(p.dram_written_bytes for p in plans),
        sram_peak_bytes=max((r.stop for r in regions), default=0),
        sram_bytes=hardware.sram_bytes,
        host_to_vpu_bytes=host_bytes[0],
        vpu_to_host_bytes=host_bytes[1],
        host_link_cycles=host_cycles,
        units=units,
        layers=_layer_stats(instructions, plans, timeline, layer_names),
    )


def _unit_stats(unit: Unit, plans: Sequence[Plan], timeline: Timeline, total: int) -> UnitStats:
    pcs = [pc for pc, p in enumerate(plans) if p.unit == unit]
    busy = sum(plans[pc].cycles for pc in pcs)
    stalls = dict.fromkeys(STALL_CAUSES.values(), 0)
    for pc in pcs:
        if timeline.stall[pc]:
            stalls[STALL_CAUSES[timeline.stall_cause[pc]]] += timeline.stall[pc]
    return UnitStats(busy, busy / total if total else 0.0, len(pcs), stalls)


def _layer_stats(instructions, plans, timeline: Timeline, names) -> tuple[LayerStats, ...]:
    by_layer: dict[int, list[int]] = {}
    for pc, instruction in enumerate(instructions):
        if plans[pc].unit != Unit.CTRL:
            by_layer.setdefault(instruction.layer, []).append(pc)
    layers = []
    for layer, pcs in sorted(by_layer.items()):
        busy = {u.name: sum(plans[pc].cycles for pc in pcs if plans[pc].unit == u) for u in QUEUED_UNITS}
        layers.append(
            LayerStats(
                layer=layer,
                name=names.get(layer, f"layer{layer}"),
                start_cycle=min(timeline.start[pc] for pc in pcs),
                end_cycle=max(timeline.end[pc] for pc in pcs),
                instructions=len(pcs),
                busy_cycles=busy,
                macs=sum(plans[pc].macs for pc in pcs),
                dram_read_bytes=sum(plans[pc].dram_read_bytes for pc in pcs),
                dram_written_bytes=sum(plans[pc].dram_written_bytes for pc in pcs),
                stall_cycles=sum(timeline.stall[pc] for pc in pcs),
            )
        )
    return tuple(layers)


def _renamed(record: dict[str, Any]) -> dict[str, Any]:
    """A record's JSON with the compile and run reports' name for the bytes written."""
    record["dram_write_bytes"] = record.pop("dram_written_bytes")
    return record
