"""The Target dataclasses: hardware settings, numerics options and host options.

Hardware and compiler options are separate objects (Vela's habit): the simulator reads
`Target.hardware`, the quantiser and the simulator read `Target.numerics`, the host build
reads `Target.host`. Every figure the product reports is derived from these numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class TargetError(ValueError):
    """A target name or file that cannot be used; the message names the file and key."""


VECTOR_RATES = (
    "vector_add_per_cycle",
    "vector_mul_per_cycle",
    "vector_clip_per_cycle",
    "vector_lut_per_cycle",
    "vector_pool_per_cycle",
    "vector_requant_per_cycle",
)


@dataclass(frozen=True)
class Hardware:
    """The VPU's hardware figures (units in the names)."""

    clock_mhz: int
    mac_rows: int
    mac_cols: int
    sram_bytes: int
    dram_bytes_per_cycle: int
    dram_latency_cycles: int
    host_link_bytes_per_cycle: int
    host_link_latency_cycles: int
    vector_lanes: int
    lut_entries: int = 0
    dram_burst_bytes: int = 0  # 0: one beat (dram_bytes_per_cycle); the loader fills it in
    mac_weight_load_cycles: int = 0  # 0: mac_rows (one array row per cycle); the loader fills it in
    # The timing terms of docs/targets.md "Issue, scratchpad and vector throughput". Left out
    # of a TOML file, each takes the value that leaves the cost as it was before the term
    # existed (no issue cost, no scratchpad limit, one element per lane per cycle).
    issue_cycles: int = 0  # cycles every instruction holds its unit before its work starts
    sram_bytes_per_cycle: int = 0  # scratchpad bytes per unit per cycle; 0: not limited
    mac_grouped_pixels_per_cycle: int = 1  # pixels a block-diagonal (depthwise) block takes a cycle
    vector_add_per_cycle: float = 0.0  # elements per cycle; 0: vector_lanes
    vector_mul_per_cycle: float = 0.0
    vector_clip_per_cycle: float = 0.0
    vector_lut_per_cycle: float = 0.0
    vector_pool_per_cycle: float = 0.0  # window taps per cycle
    vector_requant_per_cycle: float = 0.0
    # Output pixels pooling works on together (U55's 2x2 output microblock): an output tile
    # narrower or shorter than the block pays for the whole block; 1 x 1: no block.
    vector_pool_block_h: int = 1
    vector_pool_block_w: int = 1
    # Multiply-accumulates per cycle of the vector unit's int8 x int8 -> int32 lanes (the
    # vconv instruction: a depthwise convolution on the vector unit); 0: the unit has none,
    # and vconv is refused. Not one of VECTOR_RATES: left out, it stays 0.
    vector_mac_per_cycle: float = 0.0
    # Cycles of one softmax row's reciprocal (1 / the sum of its exps): 32 is a radix-2
    # divider, one quotient bit a cycle plus the normalisation (docs/softmax.md); Ethos-U55
    # has no divider and runs Newton-Raphson as a chain of one-element ops (docs/targets.md).
    vector_reciprocal_cycles: int = 32
    # Where weights, scales and tables live (Vela's memory modes): "dram" (beside the feature
    # maps) or "flash", a second, read-only region with its own figures (0: none).
    weights_in: str = "dram"
    # Where intermediate feature maps live: "sram" (resident in the scratchpad while they
    # fit) or "dram" (the scratchpad only buffers tiles; Ethos-U's arena in AXI SRAM).
    feature_maps_in: str = "sram"
    flash_bytes_per_cycle: int = 0
    flash_latency_cycles: int = 0
    flash_burst_bytes: int = 0
    # Transfers in flight per memory region's port (docs/targets.md "Outstanding transfers"):
    # the DMA unit issues a transfer while up to this many earlier ones on the same port
    # have not ended, so their latencies overlap; 1: one transfer at a time, as before.
    # Flash, when weights live there, is a second port running beside DRAM's.
    dram_outstanding: int = 1
    flash_outstanding: int = 1
    # Cycles the MAC pipeline takes to fill at the start of every weight block, on top of its
    # pixel stream (Ethos-U55's per-block delay in Vela's estimate); 0: none.
    mac_fill_cycles: int = 0
    # Cycles a MAC instruction's array takes to fill before its first result and to drain
    # after its last pixel, once per instruction: a systolic array's skew, mac_rows +
    # mac_cols (left out: -1, read through `array_drain_cycles`); 0 on an array of adder
    # trees whose pipeline the next block hides (Ethos-U55: docs/targets.md).
    mac_drain_cycles: int = -1
    # Input channels per slice of the array's rows (Ethos-U55's PartKernel traversal): a conv
    # with fewer input channels than rows may put a different kernel tap in each slice, so a
    # weight block holds mac_rows // slice taps of ceil(cin / slice) slices; 0: one tap a block.
    mac_row_slice: int = 0
    # When an instruction's issue cost is paid: "after_wait" (once its tokens are in, as
    # part of its work) or "before_wait" (as soon as its unit is free, overlapping the wait
    # on its tokens, as a command stream is decoded ahead of the dependency it waits on).
    issue_order: str = "after_wait"
    # When a MAC instruction's first weight-block load (mac_weight_load_cycles) runs:
    # "after_wait" (once its tokens are in) or "before_wait" (while it waits on them, as
    # Ethos-U55's weight decoder fills the weight buffer from the AXI stream while the
    # command waits for its input: the load ends no sooner than the tokens, so the last
    # weights it streams have arrived; docs/targets.md "The MAC's weight load and its wait").
    mac_load_order: str = "after_wait"
    # Where softmax's passes over a row keep the tensor between them: "sram" (the
    # scratchpad: one instruction, no memory round trips) or "dram" (each of its
    # SOFTMAX_PASSES is a command of its own that reads and writes the tensor through the
    # DRAM port, as Ethos-U55 runs softmax as a chain of elementwise operations on its arena).
    softmax_passes_in: str = "sram"

    def __post_init__(self) -> None:
        if self.dram_burst_bytes <= 0:
            object.__setattr__(self, "dram_burst_bytes", self.dram_bytes_per_cycle)
        if self.mac_weight_load_cycles <= 0:
            object.__setattr__(self, "mac_weight_load_cycles", self.mac_rows)
        for name in VECTOR_RATES:
            if getattr(self, name) <= 0:
                object.__setattr__(self, name, float(self.vector_lanes))

    @property
    def macs_per_cycle(self) -> int:
        return self.mac_rows * self.mac_cols

    @property
    def array_drain_cycles(self) -> int:
        """A MAC instruction's fill and drain: mac_drain_cycles, or mac_rows + mac_cols (a
        systolic array's skew) when the target leaves it out."""
        return self.mac_rows + self.mac_cols if self.mac_drain_cycles < 0 else self.mac_drain_cycles

    @property
    def has_lut(self) -> bool:
        return self.lut_entries > 0

    def dram_cycles(self, nbytes: int) -> int:
        """Cycles of one DMA instruction moving `nbytes` contiguous bytes DRAM<->SRAM: issue +
        latency + its bytes, at least one whole burst, over the bandwidth (targets/isa/cost.py
        `dma_cycles` is the general, strided form)."""
        moved = max(nbytes, self.dram_burst_bytes)
        return self.issue_cycles + self.dram_latency_cycles + -(-moved // self.dram_bytes_per_cycle)

    def host_link_cycles(self, nbytes: int) -> int:
        """Cycles for one host<->VPU transfer of `nbytes`: latency + ceil(bytes / bandwidth)."""
        return self.host_link_latency_cycles + -(-nbytes // self.host_link_bytes_per_cycle)


@dataclass(frozen=True)
class Numerics:
    """How the VPU rounds: `requant` is "float32" (onnxruntime-exact) or "fixed_point" (TFLite)."""

    requant: str = "float32"


@dataclass(frozen=True)
class HostOptions:
    """The host CPU: the TVM target its code is built for, and the figures of the
    partitioner's CPU cost model (docs/partition.md): an op costs
    op_overhead_cycles + macs / macs_per_cycle + bytes / bytes_per_cycle host cycles.

    The target's fields are TVM's (kind, mtriple, mcpu, mattr, num-cores); a field left
    None means "the machine the compiler runs on", filled in at build time
    (compiler/host/target.py) and recorded in the artifact's manifest."""

    kind: str = "llvm"
    mtriple: str | None = None
    mcpu: str | None = None
    mattr: tuple[str, ...] | None = None  # LLVM features, e.g. ("+avx2", "-avx512f")
    num_cores: int | None = None
    clock_mhz: int = 2000
    macs_per_cycle: int = 8
    bytes_per_cycle: int = 16
    op_overhead_cycles: int = 2000

    @property
    def llvm(self) -> str:
        """The plain LLVM target, for code the compiler runs in its own process (the
        quantiser's observers): it must run here, whatever CPU the artifact is for."""
        return "llvm"

    def tvm_target_fields(self) -> dict[str, Any]:
        """The target fields given in the TOML, in TVM's spelling (None fields left out)."""
        given = {"kind": self.kind, "mtriple": self.mtriple, "mcpu": self.mcpu,
                 "mattr": list(self.mattr) if self.mattr is not None else None,
                 "num-cores": self.num_cores}  # fmt: skip
        return {key: value for key, value in given.items() if value is not None}

    def seconds(self, cycles: float) -> float:
        return cycles / (self.clock_mhz * 1e6)

    def to_json(self) -> dict[str, Any]:
        """The [host] table as the TOML spells it (what target_from_json reads back)."""
        figures = ("clock_mhz", "macs_per_cycle", "bytes_per_cycle", "op_overhead_cycles")
        return {**self.tvm_target_fields(), **{name: getattr(self, name) for name in figures}}


@dataclass(frozen=True)
class Target:
    """One target: `kind` is "cpu" (everything on the host) or "vpu" (host + VPU)."""

    name: str
    kind: str
    description: str
    source: Path
    host: HostOptions
    numerics: Numerics
    hardware: Hardware | None = None
    ops: dict[str, dict[str, Any]] = field(default_factory=dict)
    inherits: tuple[str, ...] = ()

    @property
    def has_vpu(self) -> bool:
        return self.kind == "vpu"

    def supports(self, kind: str) -> bool:
        """Whether `kind` (targets.ops.OP_KINDS) is on this target's VPU op list."""
        return kind in self.ops

    def op_limits(self, kind: str) -> dict[str, Any]:
        """The [ops.<kind>] table: constraint key -> limit."""
        return self.ops.get(kind, {})

    def to_json(self) -> dict[str, Any]:
        """A plain dict for manifests and reports."""
        out: dict[str, Any] = {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "host": self.host.to_json(),
            "numerics": {"requant": self.numerics.requant},
        }
        if self.hardware is not None:
            hw = {name: getattr(self.hardware, name) for name in Hardware.__dataclass_fields__}
            for key in ("sram_bytes_per_cycle", "flash_bytes_per_cycle", "flash_burst_bytes"):
                if not hw[key]:  # not limited / no flash: the key left out, as in the TOML
                    del hw[key]
            if hw["mac_drain_cycles"] < 0:  # derived from the array's shape: left out too
                del hw["mac_drain_cycles"]
            out["hardware"] = hw
        if self.ops:
            out["ops"] = self.ops
        return out
