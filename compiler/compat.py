"""The one place that touches TVM APIs likely to move between versions (TVM 0.27 today).

See ../shared/notes/tvm-0.27.md: StructInfo became `.ty`, relax.Constant moved to
tvm.ir.expr.Constant, tvm.nd became tvm.runtime.tensor.
"""

from __future__ import annotations

import contextlib
import io
import re
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
) -> tuple[tvm.IRModule, dict[str, str]]:
    """Import with constants bound; returns (module, {Relax var name: ONNX node name}).

    Each ONNX node's result is bound to a var named after the node (sanitised, unique), so
    passes, reports and the partitioner can speak in ONNX node names. The importer prints on
    failure: that text becomes a note on the exception (it names the op being converted).
    """
    from tvm.relax.frontend.onnx import onnx_frontend

    importer = _node_naming_importer(onnx_frontend)(shape_dict, dtype_dict, keep_params_in_input=False)
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mod = importer.from_onnx(model.graph, _default_opset(model))
    except Exception as exc:
        exc.add_note(printed.getvalue())
        raise
    return mod, importer.var_to_node


def _default_opset(model: onnx.ModelProto) -> int:
    for opset in model.opset_import:
        if opset.domain in ("", "ai.onnx"):
            return opset.version
    return 1


def _node_naming_importer(onnx_frontend):
    """A subclass of TVM's ONNX importer that binds every node's result to a named var."""

    class NodeNamingImporter(onnx_frontend.ONNXGraphImporter):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.var_to_node: dict[str, str] = {}

        def _convert_operator(self, op_name, inputs, attrs, opset):
            result = super()._convert_operator(op_name, inputs, attrs, opset)
            node_name = attrs["tvm_custom"]["name"] or op_name
            if isinstance(result, relax.Tuple):  # multi-output nodes (BatchNormalization, Split)
                return relax.Tuple([self._bind(field, node_name, inputs) for field in result.fields])
            return self._bind(result, node_name, inputs)

        def _bind(self, expr, node_name, inputs):
            computed = isinstance(expr, relax.Call | relax.TupleGetItem)
            if computed and isinstance(expr.ty, relax.TensorType | relax.TupleType):
                var_name = self._unique_var_name(node_name)
                self.var_to_node[var_name] = node_name
                return self.bb.emit(expr, name_hint=var_name)
            if isinstance(expr, relax.Var) and not any(expr.same_as(i) for i in inputs if i is not None):
                self.var_to_node.setdefault(expr.name, node_name)  # the converter bound it itself
            return expr

        def _unique_var_name(self, node_name: str) -> str:
            base = re.sub(r"\W", "_", node_name)
            base = base if base and not base[0].isdigit() else f"n_{base}"
            name, suffix = base, 1
            while name in self.var_to_node:
                suffix += 1
                name = f"{base}_{suffix}"
            return name

    return NodeNamingImporter


# LLVM's optimisation level for the modules the quantiser builds and runs in-process
# (calibration, accuracy measurement): they run a few samples once, so LLVM's time counts,
# not the kernels'. -O1 cuts a third of a small model's quantisation time against -O3
# (docs/architecture.md, "Compile time"). The results are bit-identical at every level
# (tests/unit/test_quick_build.py): LLVM reorders no float arithmetic without fast-math
# flags, and a target without -mcpu has no FMA to contract into.
QUICK_BUILD_OPT_LEVEL = 1


def build_host(mod: tvm.IRModule, llvm_target: str, kernel_asserts: bool = False) -> relax.VMExecutable:
    """relax.build for the host CPU, for in-process use (the quantiser's modules): LLVM at
    QUICK_BUILD_OPT_LEVEL, and without the kernels' argument asserts unless `kernel_asserts`.
    Those asserts check what the module's own main passes its kernels; main's VM code still
    checks every input's shape and dtype. They were two thirds of the LLVM IR LLVM generated
    machine code for (tinyconvnet's switchable module: 3.7 MB -> 1.3 MB of IR, its build and
    VM start 5.0 s -> 2.4 s under load), and leaving them out changes no bit of any result
    (tests/quantize/test_calibration_build.py). Its kernels compile on LLVM threads
    (compiler/host/split_build.py). The artifact's host library is built by
    compiler/host/build.py."""
    from vpuc.compiler.host import split_build  # its kernels on LLVM threads, the JIT too

    target = {**tvm.target.Target(llvm_target).export(), "opt-level": QUICK_BUILD_OPT_LEVEL}
    with pass_config({"tirx.disable_assert": not kernel_asserts}):
        return split_build.build(mod, tvm.target.Target(target), jit=True)


def pass_config(config: dict) -> tvm.transform.PassContext:
    """The current PassContext with `config` added (its other settings kept)."""
    current = tvm.transform.PassContext.current()
    return tvm.transform.PassContext(
        opt_level=current.opt_level,
        required_pass=list(current.required_pass),
        disabled_pass=list(current.disabled_pass),
        instruments=list(current.instruments),
        config={**dict(current.config), **config},
    )


# --- the host CPU, as LLVM inside TVM sees it (compiler/host/target.py) -----------------


def llvm_host_cpu_name() -> str:
    """LLVM's name for the CPU this process runs on (e.g. "znver3")."""
    return str(tvm.target.codegen.llvm_get_system_cpu())


def llvm_process_triple() -> str:
    return str(tvm.target.codegen.llvm_get_system_triple())


def llvm_is_valid_cpu(cpu: str, triple: str) -> bool:
    return bool(tvm.target.codegen.llvm_is_valid_cpu(cpu, triple))


def llvm_vector_width(target: tvm.target.Target) -> int:
    """Bits of the target CPU's widest vector register, from its features (TVM's own
    llvm_get_vector_width answers 512 for every x86 CPU in 0.27, AVX2-only ones too)."""
    features = llvm_target_features(target)
    if "avx512f" in features:
        return 512
    if "avx" in features:
        return 256
    return 128  # SSE, NEON (SVE's length is only known at run time: at least 128)


def llvm_target_features(target: tvm.target.Target) -> set[str]:
    """The LLVM features a target's code may use (its mcpu's, with mattr applied)."""
    return set(tvm.target.codegen.llvm_get_cpu_features(target))


def metaschedule():
    """tvm.s_tir.meta_schedule, without importing every tensor intrinsic TVM ships.

    MetaSchedule imports tvm.s_tir.tensor_intrin for each TuneContext and in each builder
    worker; that package parses ~500 TVMScript intrinsics for CUDA, ROCm, Hexagon, Arm...
    at import: 40 s to over 3 minutes on this machine. CPU float kernels need none of
    them, int8 kernels only their CPU's: the package is registered empty and the module
    of this machine's architecture imported (x86: 0.7 s; Arm: 4 s). Call it (or pass it
    as a worker initializer) before any MetaSchedule use."""
    import platform
    import sys
    import types
    from pathlib import Path

    import tvm.s_tir

    name = "tvm.s_tir.tensor_intrin"
    if name not in sys.modules:
        package = types.ModuleType(name)
        package.__path__ = [str(Path(tvm.s_tir.__file__).parent / "tensor_intrin")]
        sys.modules[name] = package
        if platform.machine().lower() in ("x86_64", "amd64"):
            import tvm.s_tir.tensor_intrin.x86  # noqa: F401
        elif platform.machine().lower() in ("aarch64", "arm64"):
            import tvm.s_tir.tensor_intrin.arm_cpu  # noqa: F401
    from tvm.s_tir import meta_schedule

    return meta_schedule


def virtual_machine(executable, device=None) -> relax.VirtualMachine:
    return relax.VirtualMachine(executable, device or tvm.cpu())


def to_tvm(array: np.ndarray):
    return tvm.runtime.tensor(np.require(array, requirements="C"))  # 0-d stays 0-d


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


# --- graph passes (compiler/passes) ------------------------------------------------------


def constant_array(expr) -> np.ndarray | None:
    """The numpy value of a Relax constant (tvm.ir.expr.Constant in 0.27), else None."""
    value = getattr(expr, "value", None)
    if value is None or not hasattr(value, "numpy") or not isinstance(expr, tvm.ir.expr.Constant):
        return None
    return value.numpy()


def module_attr(mod: tvm.IRModule, key: str):
    """A module attribute or None (IRModule.attrs is None on a fresh module)."""
    attrs = mod.attrs
    return None if attrs is None else attrs.get(key)


def is_constant(expr) -> bool:
    """A bound constant (relax.const / a model weight)."""
    return isinstance(expr, tvm.ir.expr.Constant)


def scalar_value(expr) -> float | None:
    """The Python value of a scalar argument (PrimValue, FloatImm/IntImm or 0-d constant)."""
    value = getattr(expr, "value", None)
    if isinstance(value, int | float):
        return float(value)
    if value is not None and hasattr(value, "value"):
        return float(value.value)
    if isinstance(expr, tvm.ir.expr.Constant):
        array = expr.value.numpy()
        return float(array) if array.size == 1 else None
    return None


def structural_hash(obj) -> int:
    """Structural hash of a TVM object (tvm.ir.structural_hash moved to tvm_ffi in 0.27)."""
    import tvm_ffi

    return int(tvm_ffi.structural_hash(obj))


def structural_equal(a, b) -> bool:
    import tvm_ffi

    return bool(tvm_ffi.structural_equal(a, b))


def loaded_element(expr):
    """The buffer load a TIR value copies, seen through a padding's
    if_then_else(in bounds, load, pad value); None if it computes anything else. (TVM 0.27's
    BufferLoad is tvm.ir.expr.TensorLoad, its Call tvm.ir.expr.Call.)"""
    if isinstance(expr, tvm.ir.expr.Call) and expr.op.name.endswith("if_then_else"):
        expr = expr.args[1]
    return expr if isinstance(expr, tvm.ir.expr.TensorLoad) else None
