"""DRAM and SRAM as numpy byte arrays, and the byte regions instructions touch.

Used by the operation modules (dma.py, mac.py, vector.py, pool.py): each instruction's plan
has `Memory.check` check every operand's bounds and alignment once, before anything runs;
execution then takes typed views without checking again. The regions themselves are
targets/isa/footprint.py's (the compiler's sync pass reads the same footprints); the hazard
check (hazards.py) compares them to find unsynchronised accesses.
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.sim.errors import OpError
from vpuc.targets.isa.footprint import Access, Region


def as_byte_array(image: np.ndarray | bytes | bytearray) -> np.ndarray:
    """The bytes of a memory image (any array: its bytes in C order) as a flat uint8 array."""
    if isinstance(image, (bytes, bytearray, memoryview)):
        return np.frombuffer(image, dtype=np.uint8)
    return np.ascontiguousarray(image).reshape(-1).view(np.uint8)


def format_bytes(nbytes: int) -> str:
    """512 KiB, 64 MiB, 1000 B."""
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size and nbytes % size == 0:
            return f"{nbytes // size} {unit}"
    return f"{nbytes} B"


class Memory:
    """A byte-addressed memory: `data` is a uint8 array; typed views share its bytes."""

    def __init__(self, name: str, size_bytes: int, image: np.ndarray | bytes | None = None):
        self.name = name
        self.data = np.zeros(size_bytes, dtype=np.uint8)
        if image is not None:
            raw = as_byte_array(image)
            if raw.size > size_bytes:
                raise OpError(f"{name} image of {raw.size} bytes exceeds {format_bytes(size_bytes)}")
            self.data[: raw.size] = raw

    @property
    def size_bytes(self) -> int:
        return self.data.size

    def check(self, access: Access) -> Region:
        """The access's region, once its alignment and bounds are checked."""
        region = access.region
        if region.start % access.align:
            raise OpError(f"{self.name} {access.what} at {region.start} is not {access.align}-byte aligned")
        if region.stop > self.size_bytes:
            raise OpError(
                f"{self.name} {access.what} {region} out of bounds ({format_bytes(self.size_bytes)})"
            )
        return region

    def view(self, addr: int, shape: tuple[int, ...], dtype: type) -> np.ndarray:
        """A typed view of bytes at `addr` (bounds and alignment checked by the plan)."""
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        return self.data[addr : addr + nbytes].view(dtype).reshape(shape)

    def strided(self, start: int, shape: tuple[int, int, int], strides: tuple[int, int]) -> np.ndarray:
        """A (planes, rows, row_bytes) uint8 view with (row, plane) byte strides (checked by
        the plan with `block`)."""
        row_stride, plane_stride = strides
        return np.ndarray(shape, np.uint8, self.data, start, (plane_stride, row_stride, 1))
