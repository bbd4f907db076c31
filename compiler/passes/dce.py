"""Graph pass (last): dead code elimination.

    bindings nothing reads, functions nothing calls   =>   gone

Every rewriting pass already drops the bindings it left unread; this one is the final sweep
(relax.analysis.remove_all_unused on main, then TVM's DeadCodeElimination for functions,
such as the TIR the importer generated for a Pad whose result was folded).
"""

from __future__ import annotations

import tvm
from tvm import relax

from vpuc.compiler.passes.audit import Audit
from vpuc.compiler.passes.options import PassOptions

PASS_NAME = "dce"


def dce(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """Unread bindings and uncalled functions => removed."""
    audit = Audit.of(mod)
    new_mod = mod.clone()
    new_mod.update_func(new_mod.get_global_var("main"), relax.analysis.remove_all_unused(mod["main"]))
    return audit.attach(relax.transform.DeadCodeElimination(["main"])(new_mod))
