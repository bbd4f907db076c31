"""Errors of the quantiser: bad calibration data and bad QDQ models.

Both are CompileErrors, so the CLI prints their one-line message and exits 2 before
anything is written. Messages name the file, the input or the ONNX node at fault.
"""

from vpuc.compiler.errors import CompileError, QDQError

__all__ = ["CalibrationError", "QDQError"]


class CalibrationError(CompileError):
    """Calibration samples that cannot be used: a missing input, a wrong shape or dtype,
    NaN/Inf, an empty or unreadable file."""
