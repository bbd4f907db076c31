"""The one place that touches TVM APIs likely to move between versions (TVM 0.27 today).

See ../shared/notes/tvm-0.27.md: StructInfo became `.ty`, relax.Constant moved to
tvm.ir.expr.Constant, tvm.nd became tvm.runtime.tensor.
"""

from __future__ import annotations

import contextlib
import io
import warnings
from functools import cache

import numpy as np
import onnx
import tvm
from tvm import relax


@cache
def onnx_importer_ops() -> frozenset[str]:
    """Op types tvm.relax.frontend.onnx can convert (plus Constant and If, handled inline)."""
    from tvm.relax.frontend.onnx import onnx_frontend

    return frozenset(onnx_frontend._get_convert_map()) | {"Constant", "If"}


def relax_from_onnx(
    model: onnx.ModelProto, shape_dict: dict[str, list[int]], dtype_dict: dict[str, str]
) -> tvm.IRModule:
    """Import with constants bound. The importer prints on failure: that text becomes a note
    on the exception (it names the op being converted) instead of reaching the user."""
    from tvm.relax.frontend.onnx import from_onnx

    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return from_onnx(model, shape_dict=shape_dict, dtype_dict=dtype_dict, keep_params_in_input=False)
    except Exception as exc:
        exc.add_note(printed.getvalue())
        raise


def build_host(mod: tvm.IRModule, llvm_target: str) -> relax.VMExecutable:
    """relax.build for the host CPU."""
    return relax.build(mod, target=tvm.target.Target(llvm_target))


def load_host_library(path: str) -> tvm.runtime.Module:
    return tvm.runtime.load_module(path)


def virtual_machine(executable, device=None) -> relax.VirtualMachine:
    return relax.VirtualMachine(executable, device or tvm.cpu())


def to_tvm(array: np.ndarray):
    return tvm.runtime.tensor(np.ascontiguousarray(array))


def flatten_outputs(value) -> list[np.ndarray]:
    """A VM result (tensor or nested tuple) as a flat list of numpy arrays."""
    if isinstance(value, tvm.runtime.Tensor):
        return [value.numpy()]
    if isinstance(value, list | tuple) or hasattr(value, "__len__"):
        return [array for item in value for array in flatten_outputs(item)]
    raise TypeError(f"unexpected VM result {type(value).__name__}")


def tensor_type(expr) -> tuple[tuple[int, ...], str] | None:
    """(static shape, dtype) of a Relax expression, or None when not a static tensor."""
    ty = expr.ty
    if not isinstance(ty, relax.TensorType) or ty.shape is None:
        return None
    try:
        shape = tuple(int(v) for v in ty.shape.values)
    except (TypeError, AttributeError):
        return None
    return shape, str(ty.dtype)
