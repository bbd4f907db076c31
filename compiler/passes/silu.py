"""Graph pass: x * sigmoid(x) -> nn.silu(x) (swish, as exporters write it).

    x * sigmoid(x)  or  sigmoid(x) * x   =>  nn.silu(x)                      silu

nn.silu is defined as x * sigmoid(x), so the rewrite is exact. onnxruntime fuses the same
pair (into com.microsoft.QuickGelu with alpha 1). Near miss: the sigmoid read elsewhere.
A gate on another tensor (squeeze-excite: x * sigmoid(mean(x))) is no SiLU and no near miss.
"""

from __future__ import annotations

import tvm
from tvm import relax
from tvm.relax.dpl import is_op, wildcard

from vpuc.compiler.passes.options import PassOptions
from vpuc.compiler.passes.rewrite import Match, Rule, run_rules

PASS_NAME = "silu"

_x = wildcard()
_gate = is_op("relax.sigmoid")(_x)
_silu = is_op("relax.multiply")(_x, _gate) | is_op("relax.multiply")(_gate, _x)


def _check(match: Match) -> str | None:
    return None


def _build(match: Match):
    return relax.op.nn.silu(match[_x]), None, "nn.silu"


RULES = (Rule("silu", _silu, (_x,), _check, _build),)


def silu(mod: tvm.IRModule, options: PassOptions) -> tvm.IRModule:
    """x * sigmoid(x) => nn.silu(x)."""
    return run_rules(mod, RULES, PASS_NAME)
