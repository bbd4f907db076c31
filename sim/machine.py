"""The machine an instruction runs on (State) and what an instruction does before it runs (Plan).

Shared by the operation modules (dma.py, mac.py, vector.py, pool.py), each of which gives
every opcode a `plan(instruction, state) -> Plan` (checks, cost, touched bytes: no data
touched) and a `run(instruction, state)` (the int8/int32 arithmetic on the memories).
ops.py gathers them into one dispatch table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from vpuc.sim.errors import OpError
from vpuc.sim.memory import Memory, Region
from vpuc.targets import Hardware
from vpuc.targets.isa.footprint import SRAM, footprint
from vpuc.targets.isa.formats import Instruction, Unit

MAX_PADDED_BYTES = 1 << 28  # simulator limit on one instruction's padded input


@dataclass(frozen=True, slots=True)
class Plan:
    """The static facts of one instruction: its unit and cost, its work, the SRAM bytes it
    reads and writes, and its DRAM traffic."""

    unit: Unit
    cycles: int
    macs: int = 0
    reads: tuple[Region, ...] = ()
    writes: tuple[Region, ...] = ()
    dram_read_bytes: int = 0
    dram_written_bytes: int = 0
    port: str = ""  # a DMA transfer's memory port (targets/isa/cost.py dma_port)


@dataclass
class State:
    """The VPU's state: its hardware figures, its requantisation mode and its two memories.

    `memo` keeps operands already converted for numpy (a conv's float32 windows, its
    float32 weights) by kind, as (key, SRAM region, value), for the next instruction that
    reads the same bytes the same way; `forget_overwritten` drops an entry whose region an
    instruction has just written. It only saves work: results never depend on it.
    """

    hardware: Hardware
    requant_mode: str
    sram: Memory
    dram: Memory
    memo: dict[str, tuple[Any, Region, Any]] = field(default_factory=dict)

    def recall(self, kind: str, key: Any) -> Any:
        entry = self.memo.get(kind)
        return entry[2] if entry is not None and entry[0] == key else None

    def remember(self, kind: str, key: Any, region: Region, value: Any) -> Any:
        self.memo[kind] = (key, region, value)
        return value

    def forget_overwritten(self, writes: tuple[Region, ...]) -> None:
        for kind, (_, region, _) in list(self.memo.items()):
            if any(w.overlaps(region) for w in writes):
                del self.memo[kind]


def touched(instruction: Instruction, state: State) -> tuple[tuple[Region, ...], tuple[Region, ...]]:
    """The SRAM regions `instruction` reads and writes, by targets/isa/footprint.py (the
    compiler's sync pass reads the same footprints), each access's bounds and alignment
    checked against its memory (SRAM or DRAM)."""
    reads: list[Region] = []
    writes: list[Region] = []
    for access in footprint(instruction, state.requant_mode):
        on_sram = access.memory == SRAM
        region = (state.sram if on_sram else state.dram).check(access)
        if on_sram:
            (writes if access.write else reads).append(region)
    return tuple(reads), tuple(writes)


class OpHandler(NamedTuple):
    plan: Callable[[Instruction, State], Plan]
    run: Callable[[Instruction, State], None]


def require(condition: bool, message: str, *args: object) -> None:
    """Raise OpError(message.format(*args)) unless `condition` holds (formatted only then:
    plans run for every instruction)."""
    if not condition:
        raise OpError(message.format(*args))


def require_positive(instruction: Instruction, *names: str) -> None:
    """Every named field is at least 1."""
    for name in names:
        value = getattr(instruction, name)
        require(value >= 1, "field '{}' must be at least 1, got {}", name, value)


def require_clamp(instruction: Instruction) -> None:
    lo, hi = instruction.clamp_min, instruction.clamp_max
    require(lo <= hi, "clamp_min {} is above clamp_max {}", lo, hi)


def require_padded_fits(instruction: Instruction, channels: int) -> None:
    """The padded input of a windowed op stays within the simulator's working-memory limit."""
    i = instruction
    padded_bytes = (i.in_h + i.pad_top + i.pad_bottom) * (i.in_w + i.pad_left + i.pad_right) * channels
    require(
        padded_bytes <= MAX_PADDED_BYTES,
        "simulator limit: the padded input takes {} bytes (at most {})",
        padded_bytes,
        MAX_PADDED_BYTES,
    )


def window_view(
    x: np.ndarray, i: Instruction, pad_value: int, out_hw: tuple[int, int], dilation=(1, 1)
) -> np.ndarray:
    """The (out_h, out_w, kernel_h, kernel_w, channels) int8 view of every window of an
    HWC input, padded (pad_top ... pad_right of `i`) with `pad_value`."""
    if i.pad_top or i.pad_bottom or i.pad_left or i.pad_right:
        height, width, channels = x.shape
        padded = np.full(
            (height + i.pad_top + i.pad_bottom, width + i.pad_left + i.pad_right, channels),
            pad_value,
            dtype=np.int8,
        )
        padded[i.pad_top : i.pad_top + height, i.pad_left : i.pad_left + width] = x
        x = padded
    x = np.ascontiguousarray(x)  # a strided view of a view (a channel slice) is not a buffer
    row, pixel = x.strides[:2]
    shape = (*out_hw, i.kernel_h, i.kernel_w, x.shape[2])
    strides = (i.stride_h * row, i.stride_w * pixel, dilation[0] * row, dilation[1] * pixel, 1)
    return np.ndarray(shape, np.int8, x, 0, strides)
