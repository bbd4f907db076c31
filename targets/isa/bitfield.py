"""Declared bit ranges: the generic field machinery under the instruction formats (isa.py).

A format's dataclass fields are declared with `u(lsb, width, doc)`, `s(...)` or
`f32(lsb, doc)`; `declared_layout` turns them into BitFields and checks that they neither
overlap nor leave the word. `BitField.check` is the one place that decides whether a
value fits ("field 'rows': 70000 does not fit in 16 bits [0, 65535]").
"""

from __future__ import annotations

import math
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from vpuc.targets.isa.errors import IsaError


@dataclass(frozen=True)
class BitField:
    """Bits [lsb, lsb + width) of a word: "u" unsigned, "s" two's complement, "f32" float."""

    name: str
    lsb: int
    width: int
    kind: str
    doc: str

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1

    def check(self, value: Any) -> Any:
        """The value as stored (floats rounded to float32); IsaError when it does not fit."""
        if self.kind == "f32":
            return self._check_float(value)
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            raise IsaError(f"field '{self.name}': expected an integer, got {value!r}")
        lo, hi = (-(1 << (self.width - 1)), (1 << (self.width - 1)) - 1)
        if self.kind == "u":
            lo, hi = 0, self.mask
        if not lo <= value <= hi:
            signed = " signed" if self.kind == "s" else ""
            raise IsaError(
                f"field '{self.name}': {value} does not fit in {self.width}{signed} bits [{lo}, {hi}]"
            )
        return int(value)

    def _check_float(self, value: Any) -> float:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
            raise IsaError(f"field '{self.name}': expected a number, got {value!r}")
        with np.errstate(over="ignore"):
            rounded = float(np.float32(value))
        if not math.isfinite(rounded):
            raise IsaError(f"field '{self.name}': {value} is not a finite float32")
        return rounded

    def pack(self, value: Any) -> int:
        """The field's raw bits (not yet shifted to lsb)."""
        if self.kind == "f32":
            return int(np.array(value, np.float32).view(np.uint32))
        return int(value) & self.mask

    def unpack(self, raw: int) -> Any:
        if self.kind == "f32":
            return float(np.array(raw, np.uint32).view(np.float32))
        if self.kind == "s" and raw >> (self.width - 1):
            return raw - (1 << self.width)
        return raw


def _declare(lsb: int, width: int, kind: str, doc: str, default: Any) -> Any:
    return field(default=default, metadata={"bits": (lsb, width, kind, doc)})


def u(lsb: int, width: int, doc: str, default: Any = MISSING) -> Any:
    """An unsigned field of `width` bits at `lsb`."""
    return _declare(lsb, width, "u", doc, default)


def s(lsb: int, width: int, doc: str, default: Any = MISSING) -> Any:
    """A two's complement field of `width` bits at `lsb`."""
    return _declare(lsb, width, "s", doc, default)


def f32(lsb: int, doc: str, default: Any = MISSING) -> Any:
    """An IEEE-754 float32 field (32 bits at `lsb`); values are rounded to float32."""
    return _declare(lsb, 32, "f32", doc, default)


def declared_layout(cls: type, word_bits: int) -> tuple[tuple[BitField, ...], int]:
    """The BitFields of a dataclass sorted by lsb, and the mask of the bits they use."""
    layout = sorted((BitField(f.name, *f.metadata["bits"]) for f in fields(cls)), key=lambda b: b.lsb)
    used = 0
    for bit_field in layout:
        bits = bit_field.mask << bit_field.lsb
        if used & bits or bit_field.lsb + bit_field.width > word_bits:
            raise TypeError(f"{cls.__name__}.{bit_field.name}: bits overlap or leave the word")
        used |= bits
    return tuple(layout), used
