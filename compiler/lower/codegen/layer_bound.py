"""A lower bound of a layer's estimated cycles without planning it: what the partitioner's
profitability rule may decide on before it asks the planner (oracle.least).

    least_cycles(op, ctx) = max(the MAC array's and vector unit's least busy time,
                                the DMA ports' least time)

The busy time is mac_bound.least_bound's over every tiling the conv's planner may choose
(its own, its im2cols, its staged tile): a conv or dense layer only. The DMA term holds for
every layer the tilers plan, whatever the tiling: a layer reads every byte of a DRAM input
its windows cover and writes every byte of a DRAM output at least once, a conv or dense
layer its int8 weights too, each transfer on its port (targets/isa/dma_cost.py: DRAM, or
flash for the weights where the target keeps them there). A port moves one transfer's data
at a time, each at least its bytes / the port's bytes per cycle after the first's issue and
latency (DmaPorts), so the layer ends no earlier than issue + latency + bytes / rate on
each port it uses. A concatenation or a reshape has no events (views of one storage): 0;
so is a layer no tiling of fits SRAM (the planner refuses it, and its answer has no
cycles).
tests/lower/test_layer_bound.py holds it under the planner's estimate.

    most_cycles(op, ctx) >= the cycles plan_op's plan of a conv or dense layer estimates

An upper bound from the conv's own tiling alone (tile_mac.plan_mac, none of its im2cols):
tile_im2col.plan_conv keeps the conv's own plan or one within TRAFFIC_SLACK of the fastest
of the plans it has, the conv's own among them, so its plan estimates at most the conv's
own cycles times 1 + TRAFFIC_SLACK (and exactly them where no im2col applies: a dense
layer). Planned alone, as the first layer of a one-layer subgraph (oracle.most), that plan
is the program's: no earlier layer may take its weights (nothing is ranked hidden, nothing
hoisted, nothing cascaded) and its buffers, all live in its one layer, fit the budget they
were chosen in. The partitioner's edge rule keeps a layer on the VPU on it when even this
costs less than moving it (edges.judge_move). tests/lower/test_layer_bound.py holds it over
the planner's estimate.
"""

from __future__ import annotations

import math

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import tile_im2col, tile_mac, tile_staged, tile_vector
from vpuc.compiler.lower.codegen.tiling import Context
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.dma_cost import dma_latency


def least_cycles(op: vops.Op, ctx: Context) -> int:
    """A lower bound of the cycles plan_op's plan of `op` estimates (the module's docstring);
    0 where no tiling of a conv fits (the planner refuses it: its answer has no cycles)."""
    if isinstance(op, vops.Concat | vops.Reshape | vops.Matmul):
        return 0  # (a matrix product of two activations: not bounded yet)
    if isinstance(op, vops.Conv | vops.Dense):
        found = tile_staged.least_cycles if tile_staged.padded_of(op, ctx) else tile_im2col.least_cycles
        busy = found(op, ctx)
        return 0 if busy is None else max(busy, dma_least(op, ctx))
    try:
        fits = bool(tile_vector.fitting_bands(op, ctx))
    except LowerError:
        fits = False
    return dma_least(op, ctx) if fits else 0


def most_cycles(op: vops.Op, ctx: Context) -> int | None:
    """An upper bound of the cycles plan_op's plan of `op` estimates in `ctx` (the
    module's docstring), planning the conv's own tiling only; None where that says nothing:
    not a conv or dense layer, a conv plan_staged plans (its staged tile is planned beside
    the conv), or no own tiling of it fits."""
    if not isinstance(op, vops.Conv | vops.Dense) or tile_im2col.CHOOSE != "estimate":
        return None
    if tile_staged.padded_of(op, ctx) is not None:
        return None
    try:
        own = tile_mac.plan_mac(op, ctx)
    except LowerError:
        return None
    cycles = tile_im2col._cycles(own, ctx)
    if not tile_im2col.lowerings_of(op, ctx):
        return cycles  # plan_conv keeps the conv's own plan
    return math.floor(cycles * (1 + tile_mac.TRAFFIC_SLACK))


def dma_least(op: vops.Op, ctx: Context) -> int:
    """The least cycles of the layer's compulsory transfers on its busiest port."""
    hw = ctx.hw
    moved = {"dram": 0, "flash": 0}
    constants = ctx.placement.subgraph.constants
    for name, covered in _inputs_read(op, ctx):
        if ctx.in_dram(name) and name not in constants:
            moved["dram"] += covered
    if ctx.in_dram(op.output):
        n, h, w, c = ctx.view(op.output).shape
        moved["dram"] += n * h * w * c
    if isinstance(op, vops.Conv | vops.Dense) and op.weights is not None:
        moved["flash" if hw.weights_in == "flash" else "dram"] += op.weights.size
    rate = {"dram": hw.dram_bytes_per_cycle, "flash": hw.flash_bytes_per_cycle}
    ends = [
        hw.issue_cycles + dma_latency(port, hw) + -(-nbytes // rate[port])
        for port, nbytes in moved.items()
        if nbytes
    ]
    return max(ends, default=0)


def _inputs_read(op: vops.Op, ctx: Context) -> list[tuple[str, int]]:
    """(tensor, the bytes of it the layer must read) for the inputs it reads band by band: a
    conv's or pool's first input where its windows reach, an elementwise op's every input
    (a broadcast multiplier's channel vector aside)."""
    first = ctx.view(op.inputs[0]).shape
    if isinstance(op, vops.Conv | vops.Pool):
        (kh, kw), (sh, sw), (top, left, _, _) = op.kernel, op.strides, op.padding
        dh, dw = op.dilation if isinstance(op, vops.Conv) else (1, 1)
        _, oh, ow, _ = ctx.view(op.output).shape
        rows = _covered(first[1], kh, sh, dh, top, oh)
        cols = _covered(first[2], kw, sw, dw, left, ow)
        return [(op.inputs[0], first[0] * rows * cols * first[3])]
    if isinstance(op, vops.Dense | vops.Matmul) or (isinstance(op, vops.Mul) and op.broadcast):
        return [(op.inputs[0], _count(first))]
    return [(name, _count(ctx.view(name).shape)) for name in op.inputs]


def _covered(size: int, kernel: int, stride: int, dilation: int, pad: int, out: int) -> int:
    """How many of `size` input positions some output's window reads."""
    reach = {y * stride - pad + i * dilation for y in range(out) for i in range(kernel)}
    return sum(1 for x in reach if 0 <= x < size)


def _count(shape: tuple[int, ...]) -> int:
    total = 1
    for d in shape:
        total *= d
    return total
