"""Errors the compiler reports to users: one line naming the file, node or key at fault.

The CLI prints `str(error)` and exits 2; anything else escaping is a bug in vpuc.
"""


class CompileError(ValueError):
    """A model, option or target that vpuc cannot compile, with the reason."""


class FrontendError(CompileError):
    """The ONNX model cannot be loaded, checked or imported."""
