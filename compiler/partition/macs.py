"""The MACs of a whole model, counted on the front half's module: the denominator of a
sweep point's host MAC share (docs/sweep.md), and the quantiser's measure of what the
per-layer sensitivity would cost.

Every call the partitioner would describe as a conv2d, dense or matmul (whichever device it
ends on) counts the multiply-accumulates the partitioner's cost model gives it
(compiler/partition/cost.py `macs`); other ops count none.
"""

from __future__ import annotations

import tvm
from tvm import relax

from vpuc.compiler.partition.cost import MAC_KINDS, macs
from vpuc.compiler.partition.opview import kind_of, op_view


def model_macs(mod: tvm.IRModule) -> int:
    """Multiply-accumulates of the MAC ops of `mod`'s main function."""
    func = mod["main"]
    bindings = [b for block in func.body.blocks for b in block.bindings]
    bound = {b.var: b.value for b in bindings}
    total = 0
    for b in bindings:
        value = b.value
        if isinstance(value, relax.Call) and kind_of(value) in MAC_KINDS:
            total += macs(op_view(value, str(b.var.name), bound=bound))
    return total
