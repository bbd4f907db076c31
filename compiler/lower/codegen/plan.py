"""What the scheduler decides, as data: where every tensor lives, the working buffers of
every layer, and the steps (events) that run a layer tile by tile.

    residency.py  tensors -> Storage (SRAM-resident or DRAM) and View (where in a storage)
    tiling.py     each op -> OpPlan: its buffers and its events
    estimate.py   events -> cycles (a tile-level model of the three units)
    memory.py     Storage/Buffer -> addresses; constants -> the weight blob
    emit.py       events -> instructions; sync.py orders them and sets their tokens

An event is one unit's work on one tile (a band load, a convolution, a requantisation, a
store). Its instructions are built with symbolic addresses (`Addr`: a storage or buffer
name plus an offset) so that a layer can be costed before memory is allocated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vpuc.targets.isa.formats import Instruction, Opcode, Unit

# Names of a layer's constant blobs (weights, parameters, tables: f"blob{index}.weights"):
# the transfers that read them are the constant region's (targets/isa/cost.py, flash_view).
BLOB_PREFIX = "blob"


@dataclass
class Storage:
    """The bytes of one or more tensors (aliases share one): in SRAM for the lifetime
    [first, last] (op indices), or in DRAM. Inputs, outputs and constants live in DRAM."""

    name: str
    nbytes: int
    home: str  # "sram" or "dram"
    first: int
    last: int
    role: str = "intermediate"  # "input", "output", "constant", "intermediate"
    address: int = -1


@dataclass(frozen=True)
class View:
    """A tensor as a consumer reads it: element (n, h, w, c) of its canonical (N, H, W, C)
    shape sits at storage + offset + ((n*H + h)*W + w)*pixel_stride + c. `nchw` views hold
    their bytes channels-first (a model input the host keeps in NCHW)."""

    storage: str
    offset: int
    shape: tuple[int, int, int, int]
    pixel_stride: int
    nchw: bool = False

    @property
    def contiguous(self) -> bool:
        return self.pixel_stride == self.shape[3] and not self.nchw

    def pixel_offset(self, n: int, h: int, w: int = 0) -> int:
        _, height, width, _ = self.shape
        return self.offset + ((n * height + h) * width + w) * self.pixel_stride


@dataclass
class Buffer:
    """A working buffer of one layer in SRAM: `slots` rings of `slot_bytes` (double
    buffering), live over op indices [first, last]."""

    name: str
    slot_bytes: int
    slots: int
    first: int
    last: int
    address: int = -1

    @property
    def nbytes(self) -> int:
        return self.slot_bytes * self.slots


@dataclass(frozen=True)
class Addr:
    """A symbolic address: `base` names a Storage or Buffer (slot `slot` of a buffer)."""

    base: str
    offset: int = 0
    slot: int = 0

    def __add__(self, delta: int) -> Addr:
        return Addr(self.base, self.offset + delta, self.slot)


@dataclass
class Spec:
    """An instruction with symbolic addresses: `fields` may hold Addr values."""

    cls: type[Instruction]
    fields: dict[str, Any]

    def build(self, resolve, layer: int = 0, wait: int = 0, signal: int = 0) -> Instruction:
        values = {k: resolve(v) if isinstance(v, Addr) else v for k, v in self.fields.items()}
        return self.cls(**values, layer=layer, wait=wait, signal=signal)

    @property
    def opcode(self) -> Opcode:
        fields = self.fields
        return fields["opcode"] if "opcode" in fields else self.cls.OPCODES[0]


@dataclass
class Event:
    """One unit's work on one tile: its instructions, in order, and its ordering key
    (tile number, with loads a tile ahead and stores a tile behind: software pipelining)."""

    unit: Unit
    specs: list[Spec]
    key: float
    what: str  # "load", "weights", "compute", "vector", "store"
    cycles: int = 0
    reads: list[tuple[str, int]] = field(default_factory=list)  # (buffer, slot)
    writes: list[tuple[str, int]] = field(default_factory=list)
    tensors: list[str] = field(default_factory=list)  # tensors it reads; a prefetched buffer
    marks: list[str] = field(default_factory=list)  # names its end is a ready time of (Clock.ready)


@dataclass
class OpPlan:
    """How one op runs: its buffers, its events in generation order, the choice made and
    its estimated cycles and DRAM bytes."""

    op: Any
    index: int
    buffers: list[Buffer] = field(default_factory=list)
    events: list[Event] = field(default_factory=list)
    choice: dict[str, Any] = field(default_factory=dict)
    blob: list[tuple[str, bytes]] = field(default_factory=list)  # (storage name, bytes) to pack
    estimate_cycles: int = 0
    dram_read_bytes: int = 0
    dram_write_bytes: int = 0
    macs: int = 0
    key_base: float = 0.0  # the key its events count from (tiling.Context.key_base)
    # (tensor, buffers): its loads into these buffers wait for that tensor in the estimate
    # until SRAM is allocated (prefetch.refine_waits)
    provisional_wait: tuple[str, frozenset[str]] | None = None
    cascade: bool = False  # estimated and ordered together with the layer before (cascade.py)

    @property
    def working_set_bytes(self) -> int:
        return sum(b.nbytes for b in self.buffers)
