"""Errors the compiler reports to users: one line naming the file, node or key at fault.

The CLI prints `str(error)` and exits 2; an InternalError (or anything else escaping) is a
bug in vpuc: one line, exit 3.
"""


class CompileError(ValueError):
    """A model, option or target that vpuc cannot compile, with the reason."""


class FrontendError(CompileError):
    """The ONNX model cannot be loaded, checked or imported."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (its class name if none)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def last_line(exc: BaseException) -> str:
    """The last non-empty line: where TVM puts the actual error under its traceback."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


class InternalError(RuntimeError):
    """A failure that is vpuc's, not the model's: TVM failing inside a stage on a model the
    earlier stages accepted (the partitioner, the host build). The CLI names the stage and
    exits 3; a user can only work around it."""


class QDQError(CompileError):
    """A quantize/dequantize node of a QDQ model with parameters the VPU cannot honour: a zero,
    negative or non-finite scale, per-axis parameters on the wrong axis, a zero point out of
    range."""
