"""vpuc's compiler: ONNX -> Relax -> graph passes -> (quantise, partition, lower) -> artifact.

Public API:
    compile_model(model, target="cpu", input_shapes=None) -> Artifact

The names are imported on first use (PEP 562), so `vpuc --help` and the CLI's argument
checks never import TVM.
"""

from vpuc.compiler.errors import CompileError

__all__ = ["CompileError", "CompileOptions", "compile_model"]


def __getattr__(name: str):
    if name in ("CompileOptions", "compile_model"):
        from vpuc.compiler import driver

        return getattr(driver, name)
    raise AttributeError(f"module 'vpuc.compiler' has no attribute '{name}'")
