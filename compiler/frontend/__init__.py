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

from __future__ import annotations

import importlib

# What the package exports, by module: each is imported on first use, not with the package,
# so that the CLI can ask load.check_model_path (and shapes, bind) before TVM's import, which
# importer.py's `import tvm` costs (0.7 s: `vpuc compile missing.onnx` answers without it).
_EXPORTS = {
    "ImportedModel": "importer",
    "import_model": "importer",
    "load_model": "load",
    "TensorSpec": "shapes",
    "parse_input_shape": "shapes",
    "parse_bind_input": "bind",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
