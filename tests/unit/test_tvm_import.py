"""compiler/tvm_import.py: `import tvm` with TVM's global functions listed once per number
of them gives every `_ffi_api` module of TVM the functions a plain `import tvm` gives it,
and leaves tvm_ffi's own listing in place afterwards."""

from __future__ import annotations

import json
import subprocess
import sys

# In a fresh process: import TVM (plainly, or through import_tvm), then print each of TVM's
# _ffi_api modules with the names of the functions it holds, and how many listings were made.
PROBE = """
import json, sys
from tvm_ffi import registry
own = registry.list_global_func_names
functor = registry.get_global_func("ffi.FunctionListGlobalNamesFunctor")
fetched = [0]
def counting():
    made = functor()
    def each(i):
        fetched[0] += i >= 0
        return made(i)
    return each
registry.get_global_func = (lambda get: lambda name, *a: counting if name ==
    "ffi.FunctionListGlobalNamesFunctor" else get(name, *a))(registry.get_global_func)
if sys.argv[1] == "vpuc":
    from vpuc.compiler.tvm_import import import_tvm
    import_tvm()
else:
    import tvm
apis = {name: sorted(k for k in vars(module) if not k.startswith("__"))
        for name, module in sys.modules.items() if name.startswith("tvm") and name.endswith("_ffi_api")}
print(json.dumps({"apis": apis, "restored": registry.list_global_func_names is own, "fetched": fetched[0]}))
"""


def _probe(how: str) -> dict:
    done = subprocess.run([sys.executable, "-c", PROBE, how], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_ffi_api_module_gets_the_same_functions():
    plain, kept = _probe("plain"), _probe("vpuc")
    assert plain["apis"].keys() == kept["apis"].keys() and len(plain["apis"]) > 30
    differing = [name for name in plain["apis"] if plain["apis"][name] != kept["apis"][name]]
    assert not differing, differing
    assert kept["restored"]  # tvm_ffi's own listing once tvm is imported
    # the point of it: far fewer names fetched through the FFI (100,000 -> about 18,000)
    assert kept["fetched"] < plain["fetched"] / 3, (kept["fetched"], plain["fetched"])


def test_nothing_is_done_once_tvm_is_imported():
    code = (
        "import tvm\nfrom tvm_ffi import registry\nown = registry.list_global_func_names\n"
        "from vpuc.compiler.tvm_import import import_tvm\nimport_tvm()\n"
        "assert registry.list_global_func_names is own"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_listing_is_made_again_when_functions_are_registered():
    """A function registered between two listings (TVM's modules register theirs as they
    import) is in the next listing: the kept one serves only while their number stands."""
    from vpuc.compiler.tvm_import import _listing_kept_per_count

    names = ["a.f", "b.g"]

    class Registry:  # tvm_ffi.registry's one call the listing makes, over `names`
        @staticmethod
        def get_global_func(name):
            assert name == "ffi.FunctionListGlobalNamesFunctor"
            return lambda: lambda i: len(names) if i < 0 else names[i]

    listing = _listing_kept_per_count(Registry)
    assert listing() == ["a.f", "b.g"]
    names.append("c.h")
    assert listing() == ["a.f", "b.g", "c.h"]
    listing().append("not kept")  # each caller gets its own list
    assert listing() == ["a.f", "b.g", "c.h"]
