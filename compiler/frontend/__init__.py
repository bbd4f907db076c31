"""The frontend: ONNX file or ModelProto -> checked, static-shaped ONNX -> Relax IRModule.

Steps, in order (each one a module here):
  load      read the file (external data included) and run onnx.checker
  shapes    fix symbolic input dims from --input-shape, then infer every shape
  fold      fold run-time shape arithmetic and attribute-like inputs to constants
  support   report every op the importer cannot take, all at once
  importer  tvm.relax.frontend.onnx.from_onnx on the prepared model
"""

from vpuc.compiler.frontend.importer import ImportedModel, import_model
from vpuc.compiler.frontend.load import load_model
from vpuc.compiler.frontend.shapes import TensorSpec, parse_input_shape

__all__ = ["ImportedModel", "TensorSpec", "import_model", "load_model", "parse_input_shape"]
