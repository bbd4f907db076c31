"""Accuracy figures of a quantised tensor against its float reference (docs/quantization.md).

    sqnr_db         10 * log10(sum(ref^2) / sum((ref - q)^2)), capped at SQNR_CAP_DB (an
                    exact match reads the cap; a zero reference with errors reads 0)
    cosine          <ref, q> / (|ref| |q|) over all elements (1.0 when both are zero)
    max_abs_err     max |ref - q|
    top1_agreement  the fraction of rows (all axes but the last) whose argmax over the
                    last axis is the same; only for classifier-shaped outputs (rank 2, at
                    least two classes), else None

Every figure is over all held-out samples (their values concatenated). `Figures` adds them up
one sample at a time, in float64, so that measuring holds one sample's float64 copies, not
every sample's (a 3x3 conv on 1x3x1024x1024 with 8 held-out samples: 16 MB an output, in
float32; stacked and converted at once, the SQNR alone held 1 GB of temporaries).
"""

from __future__ import annotations

import numpy as np

SQNR_CAP_DB = 200.0
CHUNK = 1 << 20  # elements converted to float64 at once by Figures.over


class Figures:
    """Running sums of the figures above over values added a sample (or a stack of them) at
    a time; CHUNK elements are converted to float64 at once."""

    def __init__(self, classifier: bool = False) -> None:
        self.signal = self.noise = self.dot = self.test_energy = self.max_err = 0.0
        self.classifier, self.rows, self.agreeing = classifier, 0, 0

    @classmethod
    def over(cls, reference: np.ndarray, test: np.ndarray, classifier: bool = False) -> Figures:
        """The figures of two whole arrays."""
        figures = cls(classifier)
        figures.add(reference, test)
        return figures

    def add(self, reference: np.ndarray, test: np.ndarray) -> None:
        a, b = np.ravel(reference), np.ravel(test)
        for start in range(0, a.size, CHUNK):
            self._add_values(a[start : start + CHUNK], b[start : start + CHUNK])
        if self.classifier:
            self._add_rows(reference, test)

    def _add_values(self, reference: np.ndarray, test: np.ndarray) -> None:
        a, b = reference.astype(np.float64), test.astype(np.float64)
        error = a - b
        self.signal += _dot(a, a)
        self.noise += _dot(error, error)
        self.dot += _dot(a, b)
        self.test_energy += _dot(b, b)
        self.max_err = max(self.max_err, float(np.max(np.abs(error))))

    def _add_rows(self, reference: np.ndarray, test: np.ndarray) -> None:
        ref_rows = np.reshape(reference, (-1, np.shape(reference)[-1]))
        test_rows = np.reshape(test, (-1, np.shape(test)[-1]))
        self.rows += len(ref_rows)
        self.agreeing += int(np.sum(ref_rows.argmax(axis=1) == test_rows.argmax(axis=1)))

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0.0:
            return SQNR_CAP_DB
        if self.signal == 0.0:
            return 0.0
        return float(min(10.0 * np.log10(self.signal / self.noise), SQNR_CAP_DB))

    @property
    def cosine(self) -> float:
        norms = float(np.sqrt(self.signal) * np.sqrt(self.test_energy))
        if norms == 0.0:
            return 1.0 if self.signal == 0.0 and self.test_energy == 0.0 else 0.0
        return self.dot / norms

    @property
    def top1_agreement(self) -> float | None:
        return self.agreeing / self.rows if self.classifier and self.rows else None

    def row(self, name: str) -> dict:
        """The accuracy row of one model output."""
        return {
            "name": name,
            "sqnr_db": round(self.sqnr_db, 3),
            "cosine": round(self.cosine, 6),
            "max_abs_err": float(f"{self.max_err:.6g}"),
            "top1_agreement": self.top1_agreement,
        }


def _dot(a: np.ndarray, b: np.ndarray) -> float:
    """sum(a * b) of two 1-D float64 arrays, on the calling thread: np.dot hands it to
    OpenBLAS's thread pool, whose threads wait on each other on a busy machine (a compile
    beside other jobs on 2 cores: 56 dots of 64k elements took 1.4 s, 3 ms this way)."""
    return float(np.einsum("i,i->", a, b))


def sqnr_db(reference: np.ndarray, test: np.ndarray) -> float:
    return Figures.over(reference, test).sqnr_db


def cosine(reference: np.ndarray, test: np.ndarray) -> float:
    return Figures.over(reference, test).cosine


def max_abs_err(reference: np.ndarray, test: np.ndarray) -> float:
    return Figures.over(reference, test).max_err


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
    return Figures.over(reference, test, is_classifier_output(sample_shape)).row(name)
