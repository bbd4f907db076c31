"""relax.build with the TIR kernels compiled by LLVM on several threads at once.

    Relax module  ->  the Relax pipeline and the VM's code generation (as relax.build)
                  ->  the kernels, by name, dealt into `parts` TIR modules:
                      kernel i goes to part i mod parts
                  ->  tirx.build of each part on its own thread (LLVM: TIR passes, IR,
                      optimisation; with `jit`, the in-process machine code too)
                  ->  part 0's library imports the others; VMLink as relax.build
    export_library    each part's object file (its machine code) written on its own thread

TVM's FFI releases the GIL while C++ runs, and each tirx.build makes its own LLVM context,
so the parts build at the same time: on two cores the LLVM share of a build about halves
(docs/compile_time.md, "Two cores for LLVM"). Each kernel is compiled alone either way
(the kernels do not call each other; main, the VM's bytecode, calls them by name), so each
computes what it computed in one module; `vpuc run` loads the exported library, whose
objects are linked into one .so, the same way. tests/unit/test_split_build.py holds the
outputs bit-identical with relax.build's.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable

import tvm
from tvm import relax, tirx
from tvm.relax import vm_build
from tvm.support import cc

# Threads (and TIR modules) for LLVM: one per core, at most MAX_PARTS; 1 is relax.build's path.
MAX_PARTS = 2
PARTS = min(MAX_PARTS, os.cpu_count() or 1)


def build(
    mod: tvm.IRModule,
    target: tvm.target.Target,
    relax_pipeline: tvm.transform.Pass | str = "default",
    parts: int | None = None,
    jit: bool = False,
) -> relax.VMExecutable:
    """relax.build(mod, target, relax_pipeline=...) with the kernels in `parts` modules,
    built on as many threads (module docstring). `jit`: compile each part's machine code
    on its thread now (an executable run in this process; an exported library compiles it
    on export instead)."""
    parts = PARTS if parts is None else parts
    if parts <= 1:
        return relax.build(mod, target=target, relax_pipeline=relax_pipeline)
    if isinstance(relax_pipeline, str):
        relax_pipeline = relax.get_pipeline(relax_pipeline)
    with target:
        mod = relax_pipeline(mod)
    attrs = dict(mod.attrs) if mod.attrs else {}
    ext_libs, params = list(attrs.get("external_mods", [])), dict(attrs.get("const_name_to_constant", {}))
    builder = relax.ExecBuilder()
    mod = vm_build._vmcodegen(builder, mod, "bytecode")
    kernels = sorted(
        ((gv, f) for gv, f in mod.functions.items() if isinstance(f, tirx.PrimFunc)),
        key=lambda k: k[0].name_hint,
    )
    groups = [dict(kernels[i::parts]) for i in range(parts)]
    groups = [g for g in groups if g]
    libs = _build_parts([tvm.IRModule(g, attrs=mod.attrs) for g in groups], target, jit)
    lib = libs[0] if libs else None
    for other in libs[1:]:
        lib.import_module(other)
    return relax.VMExecutable(relax._ffi_api.VMLink(builder, target, lib, ext_libs, params))


def export_library(executable: relax.VMExecutable, path: str) -> None:
    """executable.export_library(path) with each LLVM module's object file (its machine
    code) written on its own thread; then TVM's steps as export_library takes them for
    LLVM modules: the imports packed into one more object (devc.o) and the objects linked
    into one shared library by the C compiler. Anything else: export_library itself."""
    root = executable.mod
    modules = root._collect_dso_modules()
    if len(modules) <= 1 or any(m.kind != "llvm" for m in modules):
        executable.export_library(path)
        return
    with tempfile.TemporaryDirectory(prefix="vpuc-export-") as workdir:
        files = [os.path.join(workdir, f"lib{i}.o") for i in range(len(modules))]
        _on_threads([lambda m=m, f=f: m.write_to_file(f) for m, f in zip(modules, files, strict=True)])
        last = modules[-1]  # as export_library: every LLVM module of one build says the same
        system_lib = last.get_function("__tvm_is_system_module")()
        llvm_target = last.get_function("_get_target_string")()
        prefix = last.get_function("__tvm_get_system_lib_prefix")() or ""
        if root.imports:
            packed = os.path.join(workdir, f"{prefix}devc.o")
            tvm.runtime._ffi_api.ModulePackImportsToLLVM(root, system_lib, llvm_target, prefix).write_to_file(
                packed
            )
            files.append(packed)
        cc.create_shared(path, files)


def _build_parts(modules: list[tvm.IRModule], target: tvm.target.Target, jit: bool) -> list:
    """tirx.build of each module, each on a thread of its own; the PassContext
    (tirx.disable_assert, the opt level) is thread-local in TVM, so each thread enters the
    caller's."""
    context = tvm.transform.PassContext.current()
    libs: list = [None] * len(modules)

    def work(index: int) -> None:
        with context:
            lib = tvm.tirx.build(
                vm_build._auto_attach_system_lib_prefix(modules[index], target, None), target=target
            )
        if jit:  # an LLVM module compiles its machine code on its first lookup
            lib.get_function(next(iter(modules[index].functions)).name_hint)
        libs[index] = lib

    _on_threads([lambda i=i: work(i) for i in range(len(modules))])
    return libs


def _on_threads(tasks: list[Callable[[], None]]) -> None:
    """Run the tasks at once: the first on this thread, each other on its own; the first
    error is raised here once all have ended. No task (a module without kernels): nothing."""
    if not tasks:
        return
    errors: list[BaseException] = []

    def guarded(task: Callable[[], None]) -> None:
        try:
            task()
        except BaseException as exc:  # re-raised on the calling thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,), name="vpuc-llvm") for t in tasks[1:]]
    for thread in threads:
        thread.start()
    guarded(tasks[0])
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
