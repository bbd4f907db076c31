"""What a DMA instruction costs on a given Hardware (cost.py's DMA paragraph gives the
formula; cost.instruction_cycles dispatches here): the DRAM-side bursts, the SRAM side,
flash for the constant region, interleaving loads, and the DMA ports' outstanding
transfers (DmaPorts)."""

from __future__ import annotations

from dataclasses import replace

from vpuc.targets.isa.formats import Dma
from vpuc.targets.model import Hardware


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


# --- DMA -----------------------------------------------------------------------------------


def dram_runs(
    row_bytes: int, rows: int = 1, planes: int = 1, row_stride: int = 0, plane_stride: int = 0
) -> tuple[int, int]:
    """(number of runs, bytes per run): the contiguous pieces of a block on one side.
    Rows merge when they are adjacent, and planes when they are too."""
    if rows > 1 and row_stride != row_bytes:
        return rows * planes, row_bytes
    plane_bytes = rows * row_bytes
    if planes > 1 and plane_stride != plane_bytes:
        return planes, plane_bytes
    return 1, planes * plane_bytes


def dma_cycles(
    hw: Hardware,
    row_bytes: int,
    rows: int = 1,
    planes: int = 1,
    dram_strides: tuple[int, int] = (0, 0),
    sram_strides: tuple[int, int] | None = None,
) -> int:
    """Cycles of one DRAM<->SRAM block: the descriptor's latency, then the longer of its two
    sides. DRAM moves every DRAM-side contiguous run's bytes, at least a whole burst (a 1-byte
    run costs a whole burst; a longer run's last, partial burst is a shorter burst and moves
    only its bytes: Vela's `_estimate_memory_transfer_efficiency`); the SRAM side moves
    dram_bytes_per_cycle a cycle, at least one cycle for every SRAM-side run (a scatter of
    single bytes takes a cycle per byte). Strides are (row, plane); sram_strides None:
    contiguous in SRAM."""
    runs, run_bytes = dram_runs(row_bytes, rows, planes, *dram_strides)
    dram = ceil_div(runs * max(run_bytes, hw.dram_burst_bytes), hw.dram_bytes_per_cycle)
    sram_runs, sram_run_bytes = dram_runs(
        row_bytes, rows, planes, *(sram_strides or (row_bytes, rows * row_bytes))
    )
    port = min(hw.dram_bytes_per_cycle, hw.sram_bytes_per_cycle or hw.dram_bytes_per_cycle)
    sram = sram_runs * ceil_div(sram_run_bytes, port)
    return hw.dram_latency_cycles + max(dram, sram)


def flash_view(hw: Hardware) -> Hardware:
    """The figures a constant-region transfer sees: flash's bandwidth, latency and burst when
    the target keeps its weights there (weights_in = "flash"), else DRAM's own."""
    if hw.weights_in != "flash":
        return hw
    return replace(
        hw,
        dram_bytes_per_cycle=hw.flash_bytes_per_cycle,
        dram_latency_cycles=hw.flash_latency_cycles,
        dram_burst_bytes=hw.flash_burst_bytes or hw.flash_bytes_per_cycle,
    )


def _dma(i: Dma, hw: Hardware) -> int:
    port = flash_view(hw) if i.region else hw
    size, dram_strides = (i.row_bytes, i.rows, i.planes), (i.dram_row_stride, i.dram_plane_stride)
    if i.interleave:  # the SRAM side writes whole interleaved rows (docs/isa.md)
        return interleave_cycles(port, *size, dram_strides, i.sram_row_stride)
    return dma_cycles(port, *size, dram_strides, (i.sram_row_stride, i.sram_plane_stride))


def interleave_cycles(
    hw: Hardware, row_bytes: int, rows: int, planes: int, dram_strides: tuple[int, int], sram_row_stride: int
) -> int:
    """Cycles of an interleaving load (Dma.interleave): the DRAM side as any load's (whole
    bursts per contiguous run of each plane); the engine holds a burst of every plane in a
    line buffer (planes x dram_burst_bytes) and writes their interleave as contiguous SRAM
    runs, a row of row_bytes x planes bytes each (adjacent rows merge), at the port's rate."""
    runs, run_bytes = dram_runs(row_bytes, rows, planes, *dram_strides)
    bursts = runs * ceil_div(run_bytes, hw.dram_burst_bytes)
    dram = ceil_div(bursts * hw.dram_burst_bytes, hw.dram_bytes_per_cycle)
    sram_runs, sram_run_bytes = dram_runs(row_bytes * planes, rows, 1, sram_row_stride, 0)
    port = min(hw.dram_bytes_per_cycle, hw.sram_bytes_per_cycle or hw.dram_bytes_per_cycle)
    return hw.dram_latency_cycles + max(dram, sram_runs * ceil_div(sram_run_bytes, port))


def dma_port(i: Dma, hw: Hardware) -> str:
    """The memory port a transfer uses: "flash" for the constant region (region = 1) on a
    target whose weights live in flash (its own AXI port beside DRAM's), else "dram"."""
    return "flash" if getattr(i, "region", 0) and hw.weights_in == "flash" else "dram"


def dma_latency(port: str, hw: Hardware) -> int:
    return hw.flash_latency_cycles if port == "flash" else hw.dram_latency_cycles


class DmaPorts:
    """When the DMA unit's transfers run: the one rule the simulator's schedule
    (vpuc.sim.timing) and the compile-time estimate (codegen/estimate.py) both follow.

    The DMA unit takes its transfers in program order; taking one holds it issue_cycles.
    Each transfer then uses its region's port (`dma_port`): its first byte arrives the
    port's latency after issue, and its data (the transfer's cycles past issue and latency)
    streams once the port has finished the transfer before it, so a port moves one
    transfer's data at a time while up to `<port>_outstanding` transfers are in flight
    (their latencies overlap). A transfer is taken only when fewer than that many earlier
    transfers on its port are still in flight. With 1 outstanding and one port this is the
    plain sequence: every transfer issue + latency + data after the one before."""

    def __init__(self, hw: Hardware) -> None:
        self.hw = hw
        self.taken = 0  # when the unit can take its next transfer
        self.port_free = {"dram": 0, "flash": 0}
        self.ends: dict[str, list[int]] = {"dram": [], "flash": []}  # per port, non-decreasing

    def outstanding(self, port: str) -> int:
        return self.hw.flash_outstanding if port == "flash" else self.hw.dram_outstanding

    def earliest(self, port: str, ready: int) -> int:
        """When a transfer ready at `ready` can be taken: the unit free and a slot on its port."""
        start = max(ready, self.taken)
        ends, limit = self.ends[port], self.outstanding(port)
        if len(ends) >= limit:
            start = max(start, ends[-limit])
        return start

    def run(self, port: str, start: int, cycles: int) -> int:
        """Take a transfer of `cycles` (instruction_cycles) at `start` (>= earliest); its end."""
        hw = self.hw
        latency = dma_latency(port, hw)
        data = cycles - hw.issue_cycles - latency
        end = max(start + hw.issue_cycles + latency, self.port_free[port]) + data
        self.taken = start + hw.issue_cycles
        self.port_free[port] = end
        ends = self.ends[port]
        ends.append(end)
        if len(ends) > 64:
            del ends[:-64]
        return end

    def copy(self) -> DmaPorts:
        """An independent copy of this state (the estimate tries schedules from a point on)."""
        other = DmaPorts(self.hw)
        other.taken, other.port_free = self.taken, dict(self.port_free)
        other.ends = {port: list(ends) for port, ends in self.ends.items()}
        return other

    @property
    def drained(self) -> int:
        """When every transfer taken so far has ended."""
        return max(self.taken, *self.port_free.values())
