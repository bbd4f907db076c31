"""`vpuc calibrate-host`'s pieces: the features it reads off the cost model, and the fit."""

from __future__ import annotations

import numpy as np

from vpuc.compiler.tune.calibrate import _features, _nonnegative_fit, probes
from vpuc.targets import load_target


def test_features_are_the_cost_models_macs_and_bytes():
    """Hand count for a 3x3 conv, 8 -> 16 channels, 32x32, stride 1, same padding."""
    conv = next(p for p in probes() if p.name == "conv3x3_g1_8x32x32_to_16")
    macs, moved = _features(conv.view, load_target("cpu"))
    assert abs(macs - 16 * 32 * 32 * 8 * 3 * 3) <= 1  # the other term's ceil adds at most 1
    assert abs(moved - 4 * (8 * 32 * 32 + 16 * 8 * 3 * 3 + 16 * 32 * 32)) <= 1


def test_fit_recovers_known_figures():
    rng = np.random.default_rng(0)
    macs = rng.uniform(1e3, 1e7, 30)
    moved = rng.uniform(1e3, 1e7, 30)
    features = np.stack([np.ones(30), macs, moved], axis=1)
    cycles = 3000 + macs / 12 + moved / 20
    overhead, per_mac, per_byte = _nonnegative_fit(features, cycles * rng.uniform(0.99, 1.01, 30))
    assert abs(overhead - 3000) / 3000 < 0.1
    assert abs(1 / per_mac - 12) / 12 < 0.05 and abs(1 / per_byte - 20) / 20 < 0.05


def test_fit_never_returns_a_negative_term():
    """Times that fall with the bytes moved would ask for a negative cost per byte."""
    macs = np.array([1e5, 2e5, 4e5, 8e5])
    moved = np.array([8e5, 4e5, 2e5, 1e5])
    features = np.stack([np.ones(4), macs, moved], axis=1)
    fitted = _nonnegative_fit(features, 1000 + macs / 10 - moved / 1000)
    assert min(fitted) >= 0
