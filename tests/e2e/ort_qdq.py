"""A float model made into a QDQ file by onnxruntime's quantize_static, as a user's int8 export
is: QDQ format, int8 activations, per-channel int8 weights, calibrated on a few seeded normal
samples. The reference the end-to-end tests compare against is onnxruntime's, not ours."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static


class _Samples(CalibrationDataReader):
    def __init__(self, name: str, shape, seed: int, scale: float, count: int) -> None:
        rng = np.random.default_rng(seed)
        self.batches = iter(
            [{name: scale * rng.standard_normal(shape).astype(np.float32)} for _ in range(count)]
        )

    def get_next(self):
        return next(self.batches, None)


def quantize_qdq(
    model: onnx.ModelProto,
    folder: Path,
    shape,
    *,
    name: str = "x",
    seed: int = 1,
    scale: float = 1.0,
    count: int = 8,
) -> tuple[Path, Path]:
    """(float file, QDQ file) written in `folder`: `model` calibrated on `count` samples of
    `shape` for input `name`, each `scale` times a standard normal draw of generator `seed`."""
    float_path, qdq_path = folder / "m.onnx", folder / "m.qdq.onnx"
    onnx.save(model, float_path)
    quantize_static(
        str(float_path), str(qdq_path), _Samples(name, shape, seed, scale, count), quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QInt8, weight_type=QuantType.QInt8, per_channel=True,
    )  # fmt: skip
    return float_path, qdq_path
