"""Host build: a Relax module -> scheduled TIR kernels -> relax.build -> the bytes of an
exported library, for the host target of the Target's [host] section.

    resolve    [host] + this machine -> the TVM target (compiler/host/target.py)
    lower      LegalizeOps + FuseOps + FuseTIR: one PrimFunc per fused kernel (tune/tasks.py)
    schedule   each kernel: the tuning database's best record for it if there is one,
               else the default schedule (tune/defaults.py)
    build      the VM lowering passes + LLVM (its kernels on threads: split_build.py),
               then export_library

The library is what `Executable` loads in a fresh process; export_library needs a C
compiler on the machine (gcc is enough), which the README's setup assumes.
"""

from __future__ import annotations

import copy
import json
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.errors import CompileError, InternalError, last_line
from vpuc.compiler.host import split_build
from vpuc.compiler.host.database import TuningDatabase, open_database
from vpuc.compiler.host.defaults import ScheduleOptions, scheduled_or_as_written
from vpuc.compiler.host.target import HostTarget, resolve_host_target
from vpuc.compiler.host.tasks import extract_tasks, lower_to_kernels
from vpuc.targets import Target

FLOAT32_BITS = 32
# The kernels' own argument asserts (TVM's `tirx.disable_assert` when False). main alone calls
# the kernels, and main's VM code checks every input's shape and dtype before any kernel
# runs, so each assert checks what TVM's lowering itself passed. Without them the library is
# a third to a half smaller and its build cheaper: ocr_cls's host build 7.7 -> 7.1 s of CPU,
# zoo opzoonet's 0.79 -> 0.56 s, transformer_encoder's 0.57 -> 0.42 s (docs/compile_time.md);
# the outputs are the same bits (tests/unit/test_host_asserts.py). The quantiser's in-process
# builds leave them out too (compat.build_host).
KERNEL_ASSERTS = False


@dataclass
class HostBuild:
    """The exported library and what the report says about it."""

    library: bytes
    host: HostTarget
    report: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def build_host_library(
    mod: tvm.IRModule, target: Target, name: str, tuning_db: str | Path | None = None
) -> HostBuild:
    """Build `mod` for the target's host CPU, scheduled with the records of the tuning
    database directory `tuning_db` where it has them, and return the library's bytes."""
    host = resolve_host_target(target)
    database = open_database(tuning_db, host, must_exist=True) if tuning_db is not None else None
    _refuse_empty_constants(mod, name)
    if database is None:  # a module built before in this process (repeated compiles)
        key = (compat.structural_hash(mod), json.dumps(host.to_json(), sort_keys=True))
        for cached_mod, built in _BUILT.get(key, ()):
            if compat.structural_equal(cached_mod, mod):
                return HostBuild(built.library, built.host, copy.deepcopy(built.report), list(built.warnings))
    built = _build(mod, host, database, name)
    if database is None:
        if len(_BUILT) >= _BUILT_MAX:
            _BUILT.clear()
        _BUILT.setdefault(key, []).append((mod, built))
    return HostBuild(built.library, built.host, copy.deepcopy(built.report), list(built.warnings))


# Host libraries built in this process, by the module's structural hash and the host target
# (the module itself checks a hash match): the regression runner, the sweep and a script
# compiling a model again get the same bytes without LLVM. Not with a tuning database.
_BUILT: dict[tuple, list] = {}
_BUILT_MAX = 64


def _build(mod: tvm.IRModule, host: HostTarget, database: TuningDatabase | None, name: str) -> HostBuild:
    try:
        executable, report = host_executable(mod, host, database)
    except CompileError:
        raise
    except Exception as exc:  # TVM raises TVMError, ValueError, InternalError...
        # The frontend and the passes accepted the model: TVM failing now is vpuc's bug.
        raise InternalError(
            f"{name}: host build (relax.build, {host.key()}) failed: {last_line(exc)}"
        ) from None
    with tempfile.TemporaryDirectory(prefix="vpuc-build-") as workdir:
        path = Path(workdir) / "host.so"
        try:
            split_build.export_library(executable, str(path))
        except Exception as exc:
            raise CompileError(f"{name}: exporting the host library failed: {last_line(exc)}") from None
        return HostBuild(path.read_bytes(), host, report, database.warnings if database else [])


def host_executable(
    mod: tvm.IRModule, host: HostTarget, database: TuningDatabase | None = None
) -> tuple[relax.VMExecutable, dict[str, Any]]:
    """Schedule and build, in memory (tests run it on the VM without exporting a library)."""
    scheduled, report = schedule_host_module(mod, host, database)
    with compat.pass_config({"tirx.disable_assert": not KERNEL_ASSERTS}):
        executable = split_build.build(scheduled, host.target, lowering_pipeline(host))
    return executable, report


def schedule_options(host: HostTarget) -> ScheduleOptions:
    vector_bits = compat.llvm_vector_width(host.target)
    return ScheduleOptions(vector_lanes=max(1, vector_bits // FLOAT32_BITS), num_cores=host.num_cores)


def schedule_host_module(
    mod: tvm.IRModule, host: HostTarget, database: TuningDatabase | None = None
) -> tuple[tvm.IRModule, dict[str, Any]]:
    """Lower to kernels and schedule each one; the report counts tuned tasks."""
    start = time.perf_counter()
    lowered = lower_to_kernels(mod, host.target)
    tasks = extract_tasks(lowered)
    options = schedule_options(host)
    usable = database if database is not None and database.records is not None else None
    tuned = 0
    for task in tasks:
        kernel = usable.lookup(task.mod, host.target) if usable else None
        tuned += kernel is not None
        for name in task.kernels:
            original = lowered[name]
            if kernel is not None:  # keyed as "main"; in the module it keeps its own name
                lowered[name] = kernel.without_attr("global_symbol")
            else:
                lowered[name] = scheduled_or_as_written(original, options)
    report = {
        "target": host.to_json()["target"],
        "tasks": len(tasks),
        "tuned_tasks": tuned,
        "tuning_database": str(usable.path) if usable else None,
        "unreplayable_records": usable.unreplayable if usable else 0,
        "schedule_s": round(time.perf_counter() - start, 4),
    }
    return lowered, report


def lowering_pipeline(host: HostTarget) -> tvm.transform.Pass:
    """What relax.build runs on a module already lowered to scheduled kernels: TVM's CPU
    dataflow-lowering and finalisation passes (relax.backend.cpu_generic lists them, but
    0.27's relax.pipeline cannot reach them for llvm)."""
    return tvm.transform.Sequential(
        [
            relax.transform.RewriteDataflowReshape(),
            relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(),
            relax.transform.CallTIRRewrite(),
            relax.transform.StaticPlanBlockMemory(),
            relax.transform.LowerAllocTensor(),
            relax.transform.KillAfterLastUse(),
            relax.transform.LowerRuntimeBuiltin(),
            relax.transform.ComputePrimValue(),
            relax.transform.VMShapeLower(),
            relax.transform.AttachGlobalSymbol(),
        ]
    )


def _refuse_empty_constants(mod: tvm.IRModule, name: str) -> None:
    """TVM 0.27 writes an empty constant whose first dim is not the empty one ([1, 0], [2, 4, 0];
    [0] and [0, 2] load) into the library in a form its loader rejects ("Invalid DLTensor file
    format"): the artifact would not run. frontend/support.py
    refuses such initializers by node; this catches the ones TVM's importer makes itself (a
    ConstantOfShape of an empty shape, found by ONNX's node tests)."""
    found: list[tuple[int, ...]] = []

    def visit(expr) -> None:
        value = compat.constant_array(expr)
        if value is not None and value.ndim > 0 and value.size == 0 and value.shape[0] != 0:
            found.append(tuple(value.shape))

    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    if found:
        raise CompileError(
            f"{name}: an empty tensor (shape {list(found[0])}) is computed as a constant; "
            "vpuc cannot store empty constants in the host library (not supported)"
        )
