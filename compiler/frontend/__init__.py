"""The frontend: ONNX file or ModelProto -> checked, static-shaped ONNX -> Relax IRModule.

Steps, in order (each one a module here):
  load        read the file (external data included) and run onnx.checker
  bind        --bind-input: inputs that become constants
  shapes      fix symbolic input dims from --input-shape, then infer every shape
  names       nameless and repeated node names made unique (<OpType>_<index>)
  integer_ops DynamicQuantizeLinear-era integer ops (ConvInteger, MatMulInteger, ...) as
              standard ops
  lstm        LSTM and com.microsoft.DynamicQuantizeLSTM unrolled over their static sequence
  fold        fold run-time shape arithmetic and attribute-like inputs to constants, and
              inline If nodes whose condition is a constant (if_inline)
  fixes       rewrite the ops TVM's importer converts wrongly into ONNX it converts right
  support     report every op (or op configuration) vpuc cannot compile right, all at once
  importer  tvm.relax.frontend.onnx.from_onnx on the prepared model
"""

from vpuc.compiler.frontend.bind import parse_bind_input
from vpuc.compiler.frontend.importer import ImportedModel, import_model
from vpuc.compiler.frontend.load import load_model
from vpuc.compiler.frontend.shapes import TensorSpec, parse_input_shape

__all__ = [
    "ImportedModel",
    "TensorSpec",
    "import_model",
    "load_model",
    "parse_bind_input",
    "parse_input_shape",
]
