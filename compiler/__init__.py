"""vpuc's compiler: ONNX -> Relax -> graph passes -> (quantise, partition, lower) -> artifact.

Public API:
    compile_model(model, target="cpu", input_shapes=None) -> Artifact
"""

from vpuc.compiler.driver import CompileOptions, compile_model
from vpuc.compiler.errors import CompileError

__all__ = ["CompileError", "CompileOptions", "compile_model"]
