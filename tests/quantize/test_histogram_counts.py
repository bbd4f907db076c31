"""calibration/histogram.py counts a sample's values into its bins itself (bin_counts): the
counts must be np.histogram's over [-R, R], bin for bin, where values sit on the float32
bin edges, at -R and R, at zero, and in the middle of a bin; and TensorStats fed a stream
of samples (R doubling as peaks grow) must hold the histogram np.histogram gives."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.quantize.calibration import histogram
from vpuc.compiler.quantize.calibration.histogram import BINS_PER_SIDE, TensorStats, bin_counts

BINS = 2 * BINS_PER_SIDE


def _numpy(values: np.ndarray, radius: float) -> np.ndarray:
    return np.histogram(values, bins=BINS, range=(-radius, radius))[0]


def _samples(seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    normal = (rng.standard_normal(300_000) * 10 ** rng.uniform(-4, 4)).astype(np.float32)
    relu = np.maximum(normal, 0)
    coarse = (np.round(normal * 8) / 8).astype(np.float32)  # many values on bin edges
    tiny = (rng.standard_normal(70_000) * 1e-39).astype(np.float32)  # subnormals
    small = (rng.standard_normal(70_000) * 1e-33).astype(np.float32)  # edges just normal
    return [normal, relu, coarse, tiny, small]


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("spare", [1.0, 2.0, 8.0, 3.0])
def test_counts_are_numpys(seed, spare):
    for values in _samples(seed):
        peak = float(np.abs(values).max())
        radius = peak * spare
        assert np.array_equal(bin_counts(values, BINS, radius, peak), _numpy(values, radius))


def test_values_on_every_edge_and_the_ends():
    radius = 6.0
    edges = np.linspace(-radius, radius, BINS + 1, dtype=np.float32)
    between = np.nextafter(edges, np.float32(np.inf))[:-1]  # just above each edge
    below = np.nextafter(edges, np.float32(-np.inf))[1:]  # just below each edge
    values = np.concatenate([edges, between, below, np.zeros(5, np.float32)])
    assert np.array_equal(bin_counts(values, BINS, radius, radius), _numpy(values, radius))


def test_a_stream_holds_numpys_histogram():
    """R doubles as later samples' peaks grow; each doubling merges bin pairs exactly, so
    the stream's histogram is np.histogram's of all values over the final [-R, R]."""
    rng = np.random.default_rng(7)
    stats, seen = TensorStats(), []
    for scale in (0.5, 0.3, 2.0, 1.0, 9.0):
        sample = (rng.standard_normal(50_000) * scale).astype(np.float32)
        stats.update(sample)
        seen.append(sample)
    assert np.array_equal(stats.histogram, _numpy(np.concatenate(seen), stats.radius))


def test_not_finite_values_take_numpys_path(monkeypatch):
    values = np.array([1.0, np.nan, -2.0, np.inf], np.float32)
    assert np.array_equal(bin_counts(values, BINS, 4.0, float("nan")), _numpy(values, 4.0))
    monkeypatch.setattr(histogram, "BLOCK", 3)  # several blocks, the last one short
    values = np.linspace(-1, 1, 10, dtype=np.float32)
    assert np.array_equal(bin_counts(values, BINS, 1.0, 1.0), _numpy(values, 1.0))


def test_finite_values_are_counted_without_numpys_histogram(monkeypatch):
    """Else the tests above compare np.histogram with itself."""
    values = _samples(3)[0]
    peak = float(np.abs(values).max())
    expected = _numpy(values, 2 * peak)

    def refused(*args, **kwargs):
        raise AssertionError("np.histogram called")

    monkeypatch.setattr(histogram.np, "histogram", refused)
    assert np.array_equal(bin_counts(values, BINS, 2 * peak, peak), expected)
