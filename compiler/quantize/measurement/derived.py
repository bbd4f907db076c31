"""Tensors of the rewritten float module, computed from the reference module's values.

The float rewrites before quantisation (equalize.py, smoothquant.py, absorb_bias.py)
change some tensors by a known per-channel map. Calibration, bias correction, adaptive
rounding and the accuracy report read those tensors from one run of the reference module
instead of a second build:

    smoothquant    x_sq = x * (1 / s)                  Derived(x, scale=1/s)
    absorb_bias    y'   = max(y - c, 0)   (y = relu(z)) Derived(y, relu_shift=c)

Both arrays are shaped to broadcast against the tensor (the channel axis kept, the others 1).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Derived:
    """A tensor computed from the reference tensor `source`."""

    source: str
    scale: np.ndarray | None = None  # y = x * scale
    relu_shift: np.ndarray | None = None  # y = max(x - shift, 0)

    def __call__(self, values: dict[str, np.ndarray]) -> np.ndarray:
        value = values[self.source]
        if self.relu_shift is not None:
            value = np.maximum(value - self.relu_shift, 0.0).astype(value.dtype)
        if self.scale is not None:
            value = (value * self.scale).astype(value.dtype)
        return value


def reader(derived: dict[str, Derived]):
    """read(values, name): the named tensor, computed when it is derived."""

    def read(values: dict[str, np.ndarray], name: str) -> np.ndarray:
        return derived[name](values) if name in derived else values[name]

    return read


def sources(names, derived: dict[str, Derived]) -> list[str]:
    """The reference tensors to expose for `names`."""
    return list(dict.fromkeys(derived[n].source if n in derived else n for n in names))
