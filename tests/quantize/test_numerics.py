"""The numpy parts of the quantiser: streamed statistics, the three calibration methods,
scales and zero points, and the accuracy figures."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vpuc.compiler.quantize.calibration.histogram import TensorStats
from vpuc.compiler.quantize.calibration.ranges import kl_threshold, tensor_range
from vpuc.compiler.quantize.measurement import metrics
from vpuc.compiler.quantize.measurement.metrics import SQNR_CAP_DB, Figures, cosine, sqnr_db, top1_agreement
from vpuc.compiler.quantize.params import (
    activation_params,
    bias_scale,
    quantize_bias,
    quantize_values,
    quantize_weight,
)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.01, 1000.0), min_size=1, max_size=6), st.integers(0, 2**16))
def test_streamed_histogram_equals_one_shot(peaks, seed):
    """Growing the range by merging bin pairs loses nothing: the streamed histogram equals
    np.histogram of all the values over the final range."""
    rng = np.random.default_rng(seed)
    batches = [rng.uniform(-p, p, 257).astype(np.float32) for p in peaks]
    stats = TensorStats(bins_per_side=64)
    for batch in batches:
        stats.update(batch)
    values = np.concatenate(batches)
    expected, _ = np.histogram(values, bins=128, range=(-stats.radius, stats.radius))
    # a value on a merged edge may sit one bin over, never further
    assert stats.histogram.sum() == values.size
    assert np.abs(np.cumsum(stats.histogram) - np.cumsum(expected)).max() <= 1
    assert (stats.minimum, stats.maximum) == (values.min(), values.max())


def test_zeros_before_any_value_count_in_the_first_positive_bin():
    stats = TensorStats(bins_per_side=8)
    stats.update(np.zeros(5))
    stats.update(np.array([0.5, -1.0]))
    assert stats.histogram.sum() == 7 and stats.histogram[8] >= 5 and stats.exact_zeros == 5


def test_minmax_and_percentile_ranges():
    values = np.concatenate([np.linspace(-1, 1, 100_000), [-50.0, 80.0]]).astype(np.float32)
    stats = TensorStats()
    stats.update(values)
    assert tensor_range(stats, "minmax") == (-50.0, 80.0)
    lo, hi = tensor_range(stats, "percentile", 99.99)
    # the two outliers are each beyond the 0.01 % tail: clipped, to within one bin
    assert -1.05 < lo < -0.95 and 0.95 < hi < 1.05


def test_ranges_always_contain_zero():
    stats = TensorStats()
    stats.update(np.linspace(2.0, 3.0, 1000))
    for method in ("minmax", "percentile", "entropy"):
        assert tensor_range(stats, method)[0] == 0.0


def test_entropy_threshold_on_a_gaussian_is_a_few_sigma():
    stats = TensorStats()
    stats.update(np.random.default_rng(0).standard_normal(1_000_000))
    lo, hi = tensor_range(stats, "entropy")
    assert 3.0 < hi < 5.5 and -5.5 < lo < -3.0  # T, or the extreme where it is beyond


def test_entropy_ignores_the_zero_spike_of_a_relu():
    """Half of a relu's outputs are exactly 0; left in, they pull T to ~1.5 sigma."""
    stats = TensorStats()
    stats.update(np.maximum(np.random.default_rng(1).standard_normal(1_000_000), 0.0))
    assert 3.0 < tensor_range(stats, "entropy")[1] < 5.5


def test_entropy_never_clips_more_than_one_percent():
    """Values away from 0 (a sigmoid's): plain KL would put them all in the last bin."""
    values = 1.0 / (1.0 + np.exp(-np.random.default_rng(2).standard_normal(512)))
    stats = TensorStats()
    stats.update(values)
    hi = tensor_range(stats, "entropy")[1]
    assert np.mean(values > hi) <= 0.01


def test_kl_threshold_keeps_a_uniform_distribution_whole():
    histogram = np.full(2048, 100)
    assert kl_threshold(histogram, 128) == 2048


def test_activation_params_of_a_relu_output_use_all_levels():
    params = activation_params(0.0, 6.0)
    assert params.zero_point == -128 and np.isclose(params.scale, 6.0 / 255)
    assert quantize_values(np.array([0.0, 6.0, -1.0], np.float32), params).tolist() == [-128, 127, -128]


def test_activation_params_make_zero_exact():
    params = activation_params(-0.3, 1.7)
    assert params.dequantize(quantize_values(np.zeros(1, np.float32), params))[0] == 0.0


def test_degenerate_range_gets_scale_one():
    params = activation_params(0.0, 0.0)
    assert params.scale == 1.0 and params.zero_point == 0


def test_weights_are_symmetric_per_output_channel():
    weight = np.stack([np.linspace(-2, 1, 12), np.linspace(-0.1, 0.1, 12), np.zeros(12)]).reshape(3, 1, 3, 4)
    quantized, params = quantize_weight(weight.astype(np.float32), axis=0)
    assert quantized.dtype == np.int8 and params.axis == 0 and params.per_axis
    assert np.allclose(params.scale, [2 / 127, 0.1 / 127, 1.0])  # an all-zero channel gets 1
    assert quantized[0].min() == -127 and quantized[1].max() == 127 and not quantized[2].any()
    assert (params.zero_point == 0).all()


def test_bias_is_int32_at_input_times_weight_scale():
    weight_params = quantize_weight(np.array([[1.0, -2.0]], np.float32).T, axis=0)[1]
    input_params = activation_params(-1.0, 1.0)
    scale = bias_scale(input_params, weight_params)
    assert scale.dtype == np.float32
    quantized, params = quantize_bias(np.array([0.5, -0.25], np.float32), scale, axis=0)
    assert quantized.dtype == np.int32 and params.dtype == "int32"
    assert np.allclose(params.dequantize(quantized), [0.5, -0.25], atol=scale.max())


def test_sqnr_cosine_and_top1():
    reference = np.array([[3.0, 4.0], [1.0, 0.0]])
    assert sqnr_db(reference, reference) == SQNR_CAP_DB
    assert sqnr_db(reference, reference * 1.1) == pytest.approx(20.0)
    assert cosine(reference, 2 * reference) == pytest.approx(1.0)
    assert top1_agreement(reference, np.array([[0.0, 4.0], [1.0, 2.0]])) == 0.5


def test_figures_added_a_sample_at_a_time_are_those_of_the_whole_stack(monkeypatch):
    """The accuracy report adds each held-out sample's outputs as they come (metrics.Figures),
    CHUNK elements in float64 at a time: the figures are numpy's over the stack at once."""
    monkeypatch.setattr(metrics, "CHUNK", 7)  # chunks that cut samples and rows
    rng = np.random.default_rng(4)
    reference = rng.standard_normal((5, 3, 10)).astype(np.float32)
    test = (reference + 0.05 * rng.standard_normal(reference.shape)).astype(np.float32)
    test[2, 1] = test[2, 1, ::-1]  # one row whose argmax moves
    figures = Figures(classifier=True)
    for ref_sample, test_sample in zip(reference, test, strict=True):
        figures.add(ref_sample, test_sample)
    a, b = reference.astype(np.float64).ravel(), test.astype(np.float64).ravel()
    assert figures.sqnr_db == pytest.approx(10 * np.log10(np.sum(a**2) / np.sum((a - b) ** 2)), rel=1e-12)
    assert figures.cosine == pytest.approx(a @ b / np.linalg.norm(a) / np.linalg.norm(b), rel=1e-12)
    assert figures.max_err == np.max(np.abs(a - b))
    agreeing = reference.reshape(-1, 10).argmax(1) == test.reshape(-1, 10).argmax(1)
    assert figures.top1_agreement == np.mean(agreeing) < 1.0
    assert Figures.over(reference, reference).sqnr_db == SQNR_CAP_DB
    zeros = np.zeros((2, 3))
    assert Figures.over(zeros, zeros).cosine == 1.0 and Figures.over(zeros, zeros + 1).cosine == 0.0


def test_figures_sum_on_the_calling_thread(monkeypatch):
    """np.dot hands a float64 dot product to OpenBLAS's thread pool, whose threads wait on
    each other on a busy machine (issue 23: DS-CNN's per-layer SQNR took 0.7 s so, 3 ms
    with einsum): the figures do not call it, and their sums are math.fsum's."""
    import math

    def no_dot(*args, **kwargs):
        raise AssertionError("np.dot called")

    monkeypatch.setattr(np, "dot", no_dot)
    rng = np.random.default_rng(7)
    reference = rng.standard_normal(1000).astype(np.float32)
    test = (reference + 0.1 * rng.standard_normal(1000)).astype(np.float32)
    figures = Figures.over(reference, test)
    a, b = reference.astype(np.float64), test.astype(np.float64)
    assert figures.signal == pytest.approx(math.fsum(a * a), rel=1e-13)
    assert figures.noise == pytest.approx(math.fsum((a - b) * (a - b)), rel=1e-13)
    assert figures.dot == pytest.approx(math.fsum(a * b), rel=1e-13)
