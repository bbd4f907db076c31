"""Memory planning: SRAM and DRAM addresses by lifetime, and the weight blob.

SRAM: every resident tensor and every layer's working buffers are placed by the greedy
"largest first, lowest address that no live neighbour uses" rule (TFLite's arena planner,
TVM's storage planning): buffers whose lifetimes (op indices) overlap never share bytes;
dead ones are reused. DRAM, one image per program:

    [ weight blob | inputs | outputs | intermediates (spilled, concatenated) ]

The blob holds every constant once: weights in the MAC array's order with their biases and
requantisation parameters (tile_mac.py packs them), lookup tables, constant operands.
Intermediates reuse DRAM by lifetime as SRAM does. Every address is 16-byte aligned.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vpuc.compiler.lower.codegen.plan import Buffer, Storage
from vpuc.compiler.lower.codegen.residency import ALIGN, aligned


class AllocationError(Exception):
    """The live buffers do not fit; carries how many bytes they needed."""

    def __init__(self, needed: int) -> None:
        super().__init__(f"needs {needed} bytes")
        self.needed = needed


@dataclass
class Item:
    name: str
    nbytes: int
    first: int
    last: int
    address: int = -1


def greedy(items: list[Item], capacity: int | None) -> int:
    """Place items (largest first) at the lowest aligned address free over their lifetime;
    returns the peak. AllocationError when `capacity` is exceeded."""
    placed: list[Item] = []
    peak = 0
    for item in sorted(items, key=lambda i: (-i.nbytes, i.first, i.name)):
        live = sorted(
            (p for p in placed if p.first <= item.last and item.first <= p.last), key=lambda p: p.address
        )
        address = 0
        for other in live:
            if address + item.nbytes <= other.address:
                break
            address = max(address, aligned(other.address + other.nbytes))
        item.address = address
        placed.append(item)
        peak = max(peak, address + item.nbytes)
    if capacity is not None and peak > capacity:
        raise AllocationError(peak)
    return peak


def allocate_sram(storages: list[Storage], buffers: list[Buffer], sram_bytes: int) -> int:
    """Addresses for resident storages and working buffers; returns the SRAM peak."""
    items = [Item(s.name, aligned(s.nbytes), s.first, s.last) for s in storages if s.home == "sram"]
    items += [Item(b.name, b.nbytes, b.first, b.last) for b in buffers]
    peak = greedy(items, sram_bytes)
    where = {i.name: i.address for i in items}
    for s in storages:
        if s.home == "sram":
            s.address = where[s.name]
    for b in buffers:
        b.address = where[b.name]
    return peak


@dataclass
class DramMap:
    """The DRAM image of one program: the blob at 0, then the rest; `size` its bytes."""

    blob: bytes
    size: int


def layout_dram(storages: list[Storage], blob_parts: dict[str, bytes]) -> DramMap:
    """Addresses for every DRAM storage; the blob's bytes."""
    offset, pieces = 0, []
    for storage in storages:
        if storage.role == "constant":
            data = blob_parts[storage.name]
            storage.address = offset
            padded = aligned(len(data))
            pieces.append(data + bytes(padded - len(data)))
            offset += padded
    blob = b"".join(pieces)
    for role in ("input", "output"):
        for storage in storages:
            if storage.home == "dram" and storage.role == role:
                storage.address = offset
                offset += aligned(storage.nbytes)
    scratch = [s for s in storages if s.home == "dram" and s.role == "intermediate"]
    items = [Item(s.name, aligned(s.nbytes), s.first, s.last) for s in scratch]
    peak = greedy(items, None)
    for storage, item in zip(scratch, items, strict=True):
        storage.address = offset + item.address
    return DramMap(blob, offset + peak)


def constant_bytes(array: np.ndarray) -> bytes:
    return np.ascontiguousarray(array, dtype=np.int8).tobytes()


__all__ = ["ALIGN", "AllocationError", "DramMap", "allocate_sram", "constant_bytes", "greedy", "layout_dram"]
