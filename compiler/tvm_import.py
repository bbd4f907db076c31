"""`import tvm` for the CLI's compiler commands, without listing TVM's global functions
again for each of its `_ffi_api` modules.

Each `_ffi_api` module TVM imports calls tvm_ffi's init_ffi_api, which lists every global
function by name (one FFI call per name, about 2,000 names) and keeps those of its
namespace: 51 listings, 100,000 calls, 0.08-0.13 s of CPU (`import tvm` takes 0.5-0.6 s
of CPU idle). Here the listing is kept while the number of global functions is unchanged (9
different numbers in those 51 listings: TVM's modules register functions as they import).
During the import functions are only registered, never removed, so the same number is the
same names, and every `_ffi_api` module gets the functions it gets without this
(tests/unit/test_tvm_import.py). The listing is tvm_ffi's own again once `tvm` is imported.

What else `import tvm` costs is TVM's own (docs/compile_time.md, "Imports and passes, stop
41"): about 860 modules, 400 registered object types, and libbacktrace reading the 259 MB
libtvm_compiler.so's symbol table for the first C++ exception, which TVM's own import raises
(a type key and CUDA ops this build does not have).
"""

from __future__ import annotations

import sys


def import_tvm() -> None:
    """Import tvm (if not imported yet), its global functions listed once per number of them."""
    if "tvm" in sys.modules:
        return
    from tvm_ffi import registry

    own = registry.list_global_func_names
    registry.list_global_func_names = _listing_kept_per_count(registry)
    try:
        import tvm  # noqa: F401
    finally:
        registry.list_global_func_names = own


def _listing_kept_per_count(registry):
    kept: dict = {"count": -1, "names": []}

    def list_global_func_names() -> list[str]:
        functor = registry.get_global_func("ffi.FunctionListGlobalNamesFunctor")()
        count = functor(-1)
        if count != kept["count"]:
            kept["names"], kept["count"] = [functor(i) for i in range(count)], count
        return list(kept["names"])

    return list_global_func_names
