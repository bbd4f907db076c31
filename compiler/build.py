"""Host build: a Relax module -> relax.build(llvm) -> the bytes of an exported library.

The library is what `Executable` loads in a fresh process; export_library needs a C
compiler on the machine (gcc is enough), which the README's setup assumes.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tvm

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, last_line


def build_host_library(mod: tvm.IRModule, llvm_target: str, name: str) -> bytes:
    """Build `mod` for the host CPU and return the shared library's bytes."""
    try:
        executable = compat.build_host(mod, llvm_target)
    except Exception as exc:  # TVM raises TVMError, ValueError, InternalError...
        raise CompileError(
            f"{name}: host build (relax.build, {llvm_target}) failed: {last_line(exc)}"
        ) from None
    with tempfile.TemporaryDirectory(prefix="vpuc-build-") as workdir:
        path = Path(workdir) / "host.so"
        try:
            executable.export_library(str(path))
        except Exception as exc:
            raise CompileError(f"{name}: exporting the host library failed: {last_line(exc)}") from None
        return path.read_bytes()
