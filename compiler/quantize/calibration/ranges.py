"""Calibration methods: the float range [lo, hi] an activation tensor is quantised over,
read from its TensorStats (histogram.py).

    minmax      [min, max] over every calibration sample
    percentile  [q(1 - p), q(p)] with p = --percentile / 100 (default 99.99): each tail
                clipped separately (activations are asymmetric), read off the signed
                histogram (BINS_PER_SIDE bins a side: an edge is at most R/8192 off)
    entropy     TensorRT's KL method: |x| in ENTROPY_BINS bins; for every threshold bin
                i from the quantised bin count up to ENTROPY_BINS, the reference P is
                the first i bins with the outliers added to bin i-1 and the candidate Q
                is those bins merged into n_q levels and spread back over P's non-empty
                bins; the i with the least KL(P || Q) gives T = i * bin width. n_q is 256
                for a tensor that is never negative (it gets all of int8's levels) and
                128 otherwise; the range is then [max(min, -T), min(max, T)]. Values that
                are exactly 0 (half of a relu's output) are left out of the histogram: 0 is
                exact whatever T is, and their spike in the first bin would otherwise pull T
                far down (the known weakness of KL calibration on relu outputs). And T never
                clips more than ENTROPY_MAX_CLIPPED of the values: on a tensor whose values
                sit away from 0 (a sigmoid's output) KL reaches 0 by putting every value in
                the last bin, so the unguarded search would clip nearly all of them
    mse         the range [a min, a max], a in MSE_GRID, with the least expected squared
                quantisation error over the histogram (rounding inside, clipping outside)
    auto        per tensor, the one of the four above whose range gives the least error
                in the output of the layers that read the tensor (method_choice.py)

Every range is then widened to include 0 (so that zero, the padding value, is exact).
"""

from __future__ import annotations

import numpy as np

from vpuc.compiler.quantize.calibration.histogram import TensorStats

METHODS = ("minmax", "percentile", "entropy", "mse", "auto")
RANGE_METHODS = METHODS[:4]  # what `auto` chooses among, per tensor (method_choice.py)
MSE_GRID = np.linspace(0.05, 1.0, 96)
DEFAULT_METHOD = "percentile"
DEFAULT_PERCENTILE = 99.99
ENTROPY_BINS = 2048
ENTROPY_MAX_CLIPPED = 0.01
SMOOTHING_EPS = 1e-4


def tensor_range(
    stats: TensorStats, method: str, percentile: float = DEFAULT_PERCENTILE
) -> tuple[float, float]:
    """[lo, hi] for one tensor, always containing 0."""
    if stats.count == 0 or stats.histogram is None:  # never observed, or all zeros
        lo, hi = (0.0, 0.0) if stats.count == 0 else (stats.minimum, stats.maximum)
    elif method == "minmax":
        lo, hi = stats.minimum, stats.maximum
    elif method == "percentile":
        lo, hi = percentile_range(stats, percentile)
    elif method == "entropy":
        lo, hi = entropy_range(stats)
    elif method == "mse":
        lo, hi = mse_range(stats)
    else:
        raise ValueError(f"unknown calibration method {method!r} (known: {', '.join(METHODS)})")
    return min(float(lo), 0.0), max(float(hi), 0.0)


def percentile_range(stats: TensorStats, percentile: float) -> tuple[float, float]:
    """T = the `percentile`-th percentile of |x|; the range [max(min, -T), min(max, T)]."""
    absolute = stats.absolute_histogram()
    cumulative = np.cumsum(absolute)
    top_bin = int(np.searchsorted(cumulative, percentile / 100.0 * cumulative[-1], side="left"))
    threshold = (min(top_bin, len(absolute) - 1) + 1) * stats.bin_width
    return max(stats.minimum, -threshold), min(stats.maximum, threshold)


def entropy_range(stats: TensorStats) -> tuple[float, float]:
    """The KL-optimal symmetric threshold T, applied to the tensor's own extremes."""
    fine = stats.absolute_histogram(without_zeros=True)
    coarse = fine.reshape(ENTROPY_BINS, -1).sum(axis=1)
    levels = 256 if stats.minimum >= 0.0 else 128
    threshold = kl_threshold(coarse, levels, ENTROPY_MAX_CLIPPED) * (stats.radius / ENTROPY_BINS)
    return max(stats.minimum, -threshold), min(stats.maximum, threshold)


def kl_threshold(histogram: np.ndarray, levels: int, max_clipped: float = 1.0) -> int:
    """The bin count i (levels <= i <= len(histogram)) whose clipped distribution loses the
    least information, KL(P || Q), when quantised to `levels` levels, among those that clip
    at most `max_clipped` of the counts."""
    histogram = histogram.astype(np.float64)
    total = histogram.sum()
    if total == 0:
        return len(histogram)
    suffix = np.concatenate([np.cumsum(histogram[::-1])[::-1], [0.0]])  # suffix[i] = sum(h[i:])
    first = max(levels, int(np.argmax(suffix <= max_clipped * total)))
    best_bins, best_kl = len(histogram), np.inf
    for bins in range(first, len(histogram) + 1):
        divergence = _kl_at(histogram, bins, levels, suffix[bins])
        if divergence < best_kl:
            best_bins, best_kl = bins, divergence
    return best_bins


def _kl_at(histogram: np.ndarray, bins: int, levels: int, outliers: float) -> float:
    reference = histogram[:bins].copy()
    reference[bins - 1] += outliers
    nonzero = reference != 0
    candidate = _quantised(histogram[:bins], nonzero, levels)
    return _kl(_smoothed(reference), _smoothed(candidate))


def _quantised(sliced: np.ndarray, nonzero: np.ndarray, levels: int) -> np.ndarray:
    """`sliced` merged into `levels` bins (the last takes the remainder), each merged count
    spread evenly over the non-empty bins it came from."""
    width = len(sliced) // levels
    starts = np.arange(levels) * width
    totals = np.add.reduceat(sliced, starts)
    counts = np.add.reduceat(nonzero.astype(np.float64), starts)
    lengths = np.diff(np.append(starts, len(sliced)))
    per_bin = np.divide(totals, counts, out=np.zeros_like(totals), where=counts > 0)
    return np.repeat(per_bin, lengths) * nonzero


def _smoothed(distribution: np.ndarray) -> np.ndarray | None:
    """Move SMOOTHING_EPS of mass into every empty bin, taken evenly from the others."""
    zeros = distribution == 0
    nonzero_count = distribution.size - int(zeros.sum())
    if nonzero_count == 0:
        return None
    taken = SMOOTHING_EPS * zeros.sum() / nonzero_count
    return distribution + SMOOTHING_EPS * zeros - taken * ~zeros


def _kl(p: np.ndarray | None, q: np.ndarray | None) -> float:
    if p is None or q is None or (q <= 0).any() or (p < 0).any():
        return np.inf
    p, q = p / p.sum(), q / q.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / q[mask])))


def mse_range(stats: TensorStats) -> tuple[float, float]:
    """The range [a min, a max] (a in MSE_GRID) with the least expected squared error of
    int8 quantisation over the tensor's histogram: rounding error inside the range,
    clipping error outside. Values exactly 0 are exact whatever the range and left out."""
    centres = (stats.edges()[:-1] + stats.edges()[1:]) / 2.0
    counts = stats.histogram.astype(np.float64).copy()
    counts[stats.bins_per_side] = max(0.0, counts[stats.bins_per_side] - stats.exact_zeros)
    used = counts > 0
    centres, counts = centres[used], counts[used]
    best, best_error = (stats.minimum, stats.maximum), np.inf
    for fraction in MSE_GRID:
        lo, hi = min(stats.minimum * fraction, 0.0), max(stats.maximum * fraction, 0.0)
        error = quantization_error(centres, counts, lo, hi)
        if error < best_error:
            best, best_error = (lo, hi), error
    return best


def quantization_error(values: np.ndarray, weights: np.ndarray, lo: float, hi: float) -> float:
    """sum(weights * (values - dequantize(quantize(values)))^2) for the int8 range [lo, hi]."""
    if hi - lo <= 0.0:
        return float(np.sum(weights * values**2))
    scale = (hi - lo) / 255.0
    zero = np.clip(np.round(-128.0 - lo / scale), -128, 127)
    quantized = np.clip(np.round(values / scale) + zero, -128, 127)
    return float(np.sum(weights * (values - (quantized - zero) * scale) ** 2))
