"""Per-tensor statistics gathered while the float model runs on calibration samples.

Calibration (compiler/quantize/calibration/calibrate.py) feeds every observed tensor of every sample
into one TensorStats; the range methods (ranges.py) read it afterwards. One pass over the
samples suffices for every method:

    min, max    exact running extremes                                  (minmax)
    histogram   signed, BINS_PER_SIDE bins on each side of 0 over       (percentile, entropy)
                [-R, R]; when a sample exceeds R, R doubles and each
                pair of neighbouring bins merges into one (exact: the
                edges of the wider bins are edges of the narrower ones)

Zeros count in the first positive bin, so the negative side holds strictly negative values.

The counts are np.histogram's over [-R, R] (its float32 bin edges; a value in [e_i, e_i+1),
the last bin closed), counted by `bin_counts` in fewer passes over the values: every value
is within [-R, R] (R covers the sample's peak), so np.histogram's range mask is not needed,
and a bin estimated from the value is moved to the one its edges hold, as np.histogram does.
tests/quantize/test_histogram_counts.py holds the counts equal to np.histogram's.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BINS_PER_SIDE = 8192  # a multiple of ENTROPY_BINS (ranges.py): 4 fine bins per entropy bin
BLOCK = 1 << 16  # values counted at a time (np.histogram's block): the temporaries stay in cache


@dataclass
class TensorStats:
    """Running statistics of one tensor over the calibration samples."""

    bins_per_side: int = BINS_PER_SIDE
    minimum: float = np.inf
    maximum: float = -np.inf
    count: int = 0
    exact_zeros: int = 0  # values exactly 0 (quantised exactly whatever the range)
    radius: float = 0.0  # R: the histogram spans [-R, R]
    zeros_before_range: int = 0  # values seen while every value so far was 0 (R still 0)
    histogram: np.ndarray | None = None  # 2 * bins_per_side counts, negative side first

    def update(self, values: np.ndarray) -> None:
        values = np.asarray(values, dtype=np.float32).reshape(-1)
        if values.size == 0:
            return
        self.count += values.size
        self.exact_zeros += int(values.size - np.count_nonzero(values))
        low, high = float(values.min()), float(values.max())
        self.minimum = min(self.minimum, low)
        self.maximum = max(self.maximum, high)
        peak = max(-low, high)  # max |x| (a NaN anywhere makes low and high NaN)
        if peak == 0.0 and self.radius == 0.0:
            self.zeros_before_range += values.size
            return
        self._cover(peak)
        self.histogram += bin_counts(values, 2 * self.bins_per_side, self.radius, peak)

    def _cover(self, peak: float) -> None:
        """Make [-R, R] cover `peak`, doubling R (and merging bin pairs) as often as needed."""
        if self.radius == 0.0:
            self.radius = peak
            self.histogram = np.zeros(2 * self.bins_per_side, dtype=np.int64)
            self.histogram[self.bins_per_side] = self.zeros_before_range
            return
        while peak > self.radius:
            self.radius *= 2.0
            self.histogram = _merged_pairs(self.histogram, self.bins_per_side)

    @property
    def bin_width(self) -> float:
        return self.radius / self.bins_per_side

    def edges(self) -> np.ndarray:
        """The 2 * bins_per_side + 1 bin edges, from -R to R."""
        return np.linspace(-self.radius, self.radius, 2 * self.bins_per_side + 1)

    def absolute_histogram(self, without_zeros: bool = False) -> np.ndarray:
        """Counts of |x| over [0, R] in bins_per_side bins (the negative side folded over);
        `without_zeros` leaves out the values that are exactly 0."""
        if self.histogram is None:
            return np.zeros(self.bins_per_side, dtype=np.int64)
        folded = self.histogram[: self.bins_per_side][::-1] + self.histogram[self.bins_per_side :]
        if without_zeros:
            folded[0] -= self.exact_zeros
        return folded


def bin_counts(values: np.ndarray, bins: int, radius: float, peak: float) -> np.ndarray:
    """np.histogram(values, bins, range=(-radius, radius))[0] for float32 `values` whose
    largest magnitude is `peak` <= radius (module docstring)."""
    # the arithmetic estimate is within one bin where the edges are normal float32 numbers
    float32 = np.finfo(np.float32)
    normal = float32.tiny * bins <= radius < float32.max
    if not (np.isfinite(peak) and peak <= radius and normal) or values.dtype != np.float32:
        return np.histogram(values, bins=bins, range=(-radius, radius))[0]  # NaN, inf, subnormal
    edges = np.linspace(-radius, radius, bins + 1, dtype=np.float32)  # np.histogram's edges
    # edges[bins] is R, the last bin's closed end: as +inf, `x >= next edge` is false there
    upper = np.append(edges[1:bins], np.float32(np.inf))
    # The value's position in bins, (x + R) / width, in float32 is within 0.01 of where the
    # edges put it; half a bin less, truncated, is the bin e_i <= x < e_i+1 or the one
    # before it, so one comparison with the next edge settles it.
    scale = np.float32(bins / (2.0 * radius))
    shift = np.float32(radius - 0.5 * radius * 2.0 / bins)  # R less half a bin
    counts = np.zeros(bins, dtype=np.int64)
    for start in range(0, values.size, BLOCK):
        block = values[start : start + BLOCK]
        index = ((block + shift) * scale).astype(np.intp)  # (-0.5, 0) truncates to 0
        np.minimum(index, bins - 1, out=index)
        index += block >= upper[index]
        counts += np.bincount(index, minlength=bins)
    return counts


def _merged_pairs(histogram: np.ndarray, bins_per_side: int) -> np.ndarray:
    """The histogram over [-2R, 2R] with the same bin count: neighbouring pairs summed on
    each side (counted outward from 0), the outer half of each side empty."""
    negative = histogram[:bins_per_side][::-1]  # outward from 0
    positive = histogram[bins_per_side:]
    merged = np.zeros_like(histogram)
    half = bins_per_side // 2
    merged[bins_per_side : bins_per_side + half] = positive.reshape(half, 2).sum(axis=1)
    merged[bins_per_side - half : bins_per_side] = negative.reshape(half, 2).sum(axis=1)[::-1]
    return merged
