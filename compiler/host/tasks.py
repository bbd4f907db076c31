"""Host kernels: the host graph lowered to fused TIR kernels, and the tuning tasks they make.

    Relax host graph  ->  dispatch, LegalizeOps, AnnotateTIROpPattern, FoldConstant,
                          FuseOps, FuseTIR  ->  main + one PrimFunc per fused kernel

The same lowering serves `vpuc compile` (compiler/host/build.py schedules each kernel: a tuning
record if the database has one, else compiler/host/defaults.py) and `vpuc tune` (each
distinct kernel is one MetaSchedule task), so a task tuned for a model is found again when
the model is compiled. A task's key is its kernel as MetaSchedule normalises it
(IRModule {"main": kernel} with global_symbol "main" and tirx.noalias), compared
structurally: two kernels of one model with the same shapes are one task.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import tvm
from tvm import relax, tirx

from vpuc.compiler import compat


@dataclass
class Task:
    """One distinct host kernel: its normalised module and where the model calls it."""

    name: str
    mod: tvm.IRModule
    kernels: list[str] = field(default_factory=list)  # the module's PrimFunc names

    @property
    def weight(self) -> int:
        return len(self.kernels)


def lower_to_kernels(mod: tvm.IRModule, target: tvm.target.Target) -> tvm.IRModule:
    """The host graph with every op legalised to TIR and fused into kernels."""
    mod = _distinct_vars(mod)
    with target:
        passes = [
            relax.backend.DispatchSampling(),
            relax.backend.DispatchSortScan(),
            relax.transform.LegalizeOps(),
            relax.transform.AnnotateTIROpPattern(),
            relax.transform.FoldConstant(),
            relax.transform.FuseOps(),
            relax.transform.FuseTIR(),
        ]
        return tvm.transform.Sequential(passes)(mod)


def _distinct_vars(mod: tvm.IRModule) -> tvm.IRModule:
    """Each Relax function with variables of its own: FuseOps refuses a module whose
    functions share one ("appears at multiple definition sites"), and a VPU artifact's
    QDQ reference entry is built from main's parameters (compiler/lower)."""
    out = tvm.IRModule(dict(mod.functions), attrs=mod.attrs)
    for gv, func in mod.functions.items():
        if isinstance(func, relax.Function) and gv.name_hint != "main":
            out[gv] = relax.utils.copy_with_new_vars(func)
    return out


def task_module(kernel: tirx.PrimFunc) -> tvm.IRModule:
    """A kernel as MetaSchedule keys it (ms.TuneContext's normalisation)."""
    if kernel.attrs is None or "global_symbol" not in kernel.attrs:
        kernel = kernel.with_attr("global_symbol", "main")
    return tvm.IRModule({"main": kernel.with_attr("tirx.noalias", True)})


def kernels(lowered: tvm.IRModule) -> dict[str, tirx.PrimFunc]:
    """The module's TIR kernels by name (the Relax functions left out)."""
    return {gv.name_hint: f for gv, f in lowered.functions.items() if isinstance(f, tirx.PrimFunc)}


def extract_tasks(lowered: tvm.IRModule) -> list[Task]:
    """The distinct kernels of a lowered module, in first-use order."""
    tasks: list[Task] = []
    by_hash: dict[int, list[Task]] = {}
    for name, kernel in kernels(lowered).items():
        mod = task_module(kernel)
        bucket = by_hash.setdefault(compat.structural_hash(mod), [])
        same = next((t for t in bucket if compat.structural_equal(t.mod, mod)), None)
        if same is None:
            same = Task(name, mod)
            bucket.append(same)
            tasks.append(same)
        same.kernels.append(name)
    return tasks
