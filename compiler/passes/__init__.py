"""Graph passes: fold, fuse and rewrite layouts in Relax, one pass per file.

Each pass is `pass(mod: IRModule, options: PassOptions) -> IRModule`, pure, and records
what it fused or refused in the module's audit attribute (passes/audit.py). The order they
run in, and why, is the flat list in compiler/pipeline.py; docs/passes.md describes each
pass, the audit's pattern names and their near-miss reasons.
"""

from vpuc.compiler.passes.attention import attention
from vpuc.compiler.passes.audit import Audit, strip_audit
from vpuc.compiler.passes.bn_fold import bn_fold
from vpuc.compiler.passes.clip import clip
from vpuc.compiler.passes.cse import cse
from vpuc.compiler.passes.dce import dce
from vpuc.compiler.passes.dense_bias import dense_bias
from vpuc.compiler.passes.fold_constants import fold_constants
from vpuc.compiler.passes.gelu import gelu
from vpuc.compiler.passes.layer_norm import layer_norm
from vpuc.compiler.passes.layout import layout
from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.silu import silu
from vpuc.compiler.passes.transpose_cleanup import transpose_cleanup

__all__ = [
    "Audit",
    "PassOptions",
    "attention",
    "bn_fold",
    "clip",
    "cse",
    "dce",
    "dense_bias",
    "fold_constants",
    "gelu",
    "layer_norm",
    "layout",
    "silu",
    "strip_audit",
    "transpose_cleanup",
]
