"""DRAM and SRAM as numpy byte arrays, and the byte regions instructions touch.

Used by the operation modules (dma.py, mac.py, vector.py, pool.py): each instruction's plan
asks `Memory.region`/`Memory.block` for every operand, which checks bounds and alignment
once, before anything runs; execution then takes typed views without checking again. The
hazard check (hazards.py) compares regions to find unsynchronised accesses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vpuc.sim.errors import OpError


@dataclass(frozen=True, slots=True)
class Region:
    """Bytes [start, stop); `block` = (planes, rows, row_bytes, row_stride, plane_stride)
    when only a strided block inside that span is touched."""

    start: int
    stop: int
    block: tuple[int, int, int, int, int] | None = None

    def overlaps(self, other: Region) -> bool:
        lo, hi = max(self.start, other.start), min(self.stop, other.stop)
        if lo >= hi:
            return False
        if self.block is None and other.block is None:
            return True
        return bool(np.any(self.byte_mask(lo, hi) & other.byte_mask(lo, hi)))

    def byte_mask(self, lo: int, hi: int) -> np.ndarray:
        """Which bytes of [lo, hi) this region touches."""
        if self.block is None:
            return np.ones(hi - lo, dtype=bool)
        planes, rows, row_bytes, row_stride, plane_stride = self.block
        starts = (
            self.start
            + np.arange(planes, dtype=np.int64)[:, None] * plane_stride
            + np.arange(rows, dtype=np.int64)[None, :] * row_stride
        ).ravel()
        edges = np.zeros(hi - lo + 1, dtype=np.int64)
        np.add.at(edges, np.clip(starts - lo, 0, hi - lo), 1)
        np.add.at(edges, np.clip(starts + row_bytes - lo, 0, hi - lo), -1)
        return np.cumsum(edges[:-1]) > 0

    def __str__(self) -> str:
        return f"[{self.start}, {self.stop})"


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

    def region(self, start: int, nbytes: int, what: str, align: int = 1) -> Region:
        """The checked region [start, start + nbytes) of operand `what` ("read of 'src'")."""
        if start % align:
            raise OpError(f"{self.name} {what} at {start} is not {align}-byte aligned")
        return self._checked(Region(start, start + nbytes), what)

    def block(self, start: int, shape: tuple[int, int, int], strides: tuple[int, int], what: str):
        """The checked strided block of `planes x rows x row_bytes` with (row, plane) strides."""
        planes, rows, row_bytes = shape
        row_stride, plane_stride = strides
        stop = start + (planes - 1) * plane_stride + (rows - 1) * row_stride + row_bytes
        dense = (rows == 1 or row_stride == row_bytes) and (planes == 1 or plane_stride == rows * row_bytes)
        block = None if dense else (planes, rows, row_bytes, row_stride, plane_stride)
        return self._checked(Region(start, stop, block), what)

    def _checked(self, region: Region, what: str) -> Region:
        if region.stop > self.size_bytes:
            raise OpError(f"{self.name} {what} {region} out of bounds ({format_bytes(self.size_bytes)})")
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
