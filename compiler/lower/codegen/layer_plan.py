"""The layer planner: which tiler plans each kind of layer, and the smallest SRAM a layer
can take. It sits above the tilers (tiling.py holds what they share; tile_mac.py,
tile_matmul.py and tile_vector.py each plan one family), so no tiler imports it and no
import runs in a circle. emit.py asks it for every layer of a subgraph.
"""

from __future__ import annotations

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import tile_im2col, tile_mac, tile_matmul, tile_staged, tile_vector
from vpuc.compiler.lower.codegen.plan import OpPlan
from vpuc.compiler.lower.codegen.residency import Placement
from vpuc.compiler.lower.codegen.tiling import Context
from vpuc.targets import Target


def plan_op(op: vops.Op, ctx: Context, constants: dict) -> OpPlan:
    """The chosen plan of one op (LowerError when no choice fits)."""
    if isinstance(op, vops.Conv | vops.Dense):  # a conv past the padding limit: its input staged
        return tile_staged.plan_staged(op, ctx) or tile_im2col.plan_conv(op, ctx)
    if isinstance(op, vops.Matmul):
        return tile_matmul.plan_matmul(op, ctx)
    if isinstance(op, vops.Concat | vops.Reshape):
        return OpPlan(op, ctx.index, choice={"data movement": "none (views of one storage)"})
    return tile_vector.plan_vector(op, ctx, constants)


def min_working_set(op: vops.Op, placement: Placement, target: Target) -> int:
    """The smallest SRAM a layer's buffers can take (one output row, the narrowest chunk)."""
    ctx = Context(target, placement, placement.subgraph.ops.index(op), budget=1 << 62)
    if isinstance(op, vops.Conv | vops.Dense):  # a staged conv: its padded tile counted
        staged = tile_staged.min_staged_bytes(op, ctx)
        return tile_mac.min_mac_bytes(op, ctx) if staged is None else staged
    if isinstance(op, vops.Matmul):
        return tile_matmul.min_matmul_bytes(op, ctx)
    if isinstance(op, vops.Concat | vops.Reshape):
        return 0
    return tile_vector.min_vector_bytes(op, ctx)
