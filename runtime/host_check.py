"""Can this machine run an artifact's host library? Checked before it is loaded.

The manifest's `host_target` (compiler/host/target.py) names the CPU the host graph was built
for and the instruction-set extensions its code may use (avx2, fma, avx512f, neon, ...).
An artifact built for another architecture, or needing an extension this CPU lacks, is
refused with one line instead of dying of an illegal instruction halfway through a run.
Artifacts without `host_target` (built before it was recorded) are not checked.
"""

from __future__ import annotations

from typing import Any

import tvm_ffi

from vpuc.runtime.artifact import ArtifactError


def this_machine() -> tuple[str, str, set[str]]:
    """(LLVM triple, LLVM CPU name, enabled CPU features) of the machine running us. TVM's
    LLVM functions are registered when tvm is imported: an artifact with host code loads
    TVM anyway, and `vpuc run` imports it only for such an artifact."""
    import tvm  # noqa: F401
    triple = str(tvm_ffi.get_global_func("tvm.codegen.llvm.GetProcessTriple")())
    cpu = str(tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUName")())
    features = tvm_ffi.get_global_func("tvm.codegen.llvm.GetHostCPUFeatures")()
    return triple, cpu, {str(name) for name, enabled in features.items() if enabled}


def check_host_target(manifest: dict[str, Any], source: str, machine=None) -> None:
    """Raise ArtifactError when this CPU cannot execute the artifact's host code."""
    host = manifest.get("host_target")
    if host is None:
        return
    triple, cpu, features = machine or this_machine()
    built = host["target"]
    built_for = f"built for {built.get('mcpu', '?')} ({built.get('mtriple', '?')})"
    if _arch(built.get("mtriple", "")) != _arch(triple):
        raise ArtifactError(
            f"{source}: {built_for}, but this machine is {_arch(triple)} ({cpu}); "
            "recompile it here or for this machine's [host] target"
        )
    missing = sorted(set(host.get("isa_features", [])) - features)
    if missing:
        raise ArtifactError(
            f"{source}: {built_for}, but this CPU ({cpu}) lacks {', '.join(missing)}; "
            "recompile it here or with a [host] mcpu this CPU has (docs/targets.md)"
        )


def _arch(triple: str) -> str:
    arch = triple.split("-", 1)[0]
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
