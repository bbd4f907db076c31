"""Accuracy figures of a quantised tensor against its float reference (docs/quantization.md).

    sqnr_db         10 * log10(sum(ref^2) / sum((ref - q)^2)), capped at SQNR_CAP_DB (an
                    exact match reads the cap; a zero reference with errors reads 0)
    cosine          <ref, q> / (|ref| |q|) over all elements (1.0 when both are zero)
    max_abs_err     max |ref - q|
    top1_agreement  the fraction of rows (all axes but the last) whose argmax over the
                    last axis is the same; only for classifier-shaped outputs (rank 2, at
                    least two classes), else None

Every figure is computed over all held-out samples at once (their values concatenated).
"""

from __future__ import annotations

import numpy as np

SQNR_CAP_DB = 200.0


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    reference, test = reference.astype(np.float64), test.astype(np.float64)
    signal = float(np.sum(reference**2))
    noise = float(np.sum((reference - test) ** 2))
    if noise == 0.0:
        return SQNR_CAP_DB
    if signal == 0.0:
        return 0.0
    return float(min(10.0 * np.log10(signal / noise), SQNR_CAP_DB))


def cosine(reference: np.ndarray, test: np.ndarray) -> float:
    a, b = reference.astype(np.float64).ravel(), test.astype(np.float64).ravel()
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norms == 0.0:
        return 1.0 if not a.any() and not b.any() else 0.0
    return float(np.dot(a, b) / norms)


def max_abs_err(reference: np.ndarray, test: np.ndarray) -> float:
    if reference.size == 0:
        return 0.0
    return float(np.max(np.abs(reference.astype(np.float64) - test.astype(np.float64))))


def is_classifier_output(shape: tuple[int, ...]) -> bool:
    """(batch, classes) with at least two classes."""
    return len(shape) == 2 and shape[-1] >= 2


def top1_agreement(reference: np.ndarray, test: np.ndarray) -> float:
    """Fraction of rows whose argmax over the last axis agrees."""
    ref_rows = reference.reshape(-1, reference.shape[-1])
    test_rows = test.reshape(-1, test.shape[-1])
    return float(np.mean(ref_rows.argmax(axis=1) == test_rows.argmax(axis=1)))


def output_figures(name: str, reference: np.ndarray, test: np.ndarray, sample_shape: tuple[int, ...]) -> dict:
    """The accuracy row of one model output (values of all samples stacked on axis 0)."""
    agreement = top1_agreement(reference, test) if is_classifier_output(sample_shape) else None
    return {
        "name": name,
        "sqnr_db": round(sqnr_db(reference, test), 3),
        "cosine": round(cosine(reference, test), 6),
        "max_abs_err": float(f"{max_abs_err(reference, test):.6g}"),
        "top1_agreement": agreement,
    }
