"""First-layer im2col: a conv with few input channels as a DMA gather of its patches and a
1x1 conv over them (or of its kernel rows and a 1 x kw conv, or its band read in place as a
column window by a kh x 1 conv), when the estimate finds it faster than the conv itself.

    conv(x, W[o, ky, kx, c])  =  conv1x1(patches(x), W'[o, 0, 0, k])

On the array a conv streams its input channels through `mac_rows` rows once per kernel tap:
a 1-channel conv fills 1 row of 16, a 3-channel one 3. Gathered, one output pixel's whole
window (K = kh*kw*C bytes) is one reduction of ceil(K / mac_rows) blocks. The patch of
output pixel (y, x) is K contiguous bytes of the scratchpad tile, ordered so that every
DRAM run of the window lands contiguous:

    NHWC input   k = (ky*kw + kx)*C + c   runs of kw*C bytes, one per (pixel, ky)
    NCHW input   k = (c*kh + ky)*kw + kx  runs of kw bytes, one per (pixel, c, ky)

W is packed in the same order, so the sum is the conv's (int32, exact). One load per (c, ky)
moves the band's interior windows (planes: output rows, rows: output columns); an output
column whose window crosses the left or right padding gets its own loads of the part that is
inside (rows: kernel rows of equal reach, planes: output rows). Padding holds the input's
zero point: a clip with clamp_min = clamp_max = zero point fills the tile first when the band
has any. Only for an input in DRAM (the DMA reaches DRAM, not the scratchpad), no groups, no
dilation. tile_mac.py tiles the 1x1 conv (bands, channel chunks, weights) as any other.

The im2col of kernel rows (RowGather) gathers only the kh rows: tile pixel (y, x) holds input
column x of them (kh*C bytes), and a 1 x kw conv with the conv's own horizontal stride and
padding runs over it (ceil(kh*C / mac_rows) * kw blocks). Its loads move whole input rows
(runs of C bytes, 1 for NCHW) and need no edge loads.

The column window (ColumnWindow) gathers nothing: the band is loaded as it is, whole rows
of W*C bytes, into a tile whose rows hold the left and right padding (the zero point, by
the clip), and a kh x 1 conv reads it in place with pixel stride C and in_c = kw*C, so that
its pixel x is the kw input pixels x .. x+kw-1 side by side (src_stride below in_c,
docs/isa.md): ceil(kw*C / mac_rows) * kh blocks, as the kernel rows' gather, for the DMA
cost of the conv's own band load. Channels-last inputs (or one channel) only. An input
resident in SRAM (a later layer's: no DMA reaches it) gets the same tile from the vector
unit (ColumnCopy: the zero-point fill, then one full-range clip a row). A layer with few
output channels packs P output columns into a wide pixel (block-diagonal weights, P*O
outputs: the accumulators' bytes are the (ow, O) tile's) and fills the array's columns.

plan_conv plans the conv and each im2col that applies and keeps the fastest by the
estimate, or one within tile_mac.TRAFFIC_SLACK of it that moves fewer DRAM bytes
(docs/partition.md).
"""

from __future__ import annotations

import copy
from dataclasses import fields, replace

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import mac_bound, tile_mac
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.im2col_gather import ColumnCopy, ColumnWindow, Gather, RowGather
from vpuc.compiler.lower.codegen.plan import OpPlan
from vpuc.compiler.lower.codegen.tiling import Context, Events
from vpuc.compiler.lower.errors import LowerError

# "estimate": the fastest of the conv and its im2cols; "patches", "rows", "columns" or
# "packed" (a column window of several output columns a pixel): that im2col whenever it
# applies (tests of its arithmetic on every target and layout); "conv": never.
CHOOSE = "estimate"
# Whether plan_conv skips the im2cols whose busy-time bound is outside the slack of a
# lowering it estimated (_unpruned); off, it plans every one (the same choice, slower).
PRUNE = True


def plan_conv(op: vops.Conv | vops.Dense, ctx: Context) -> OpPlan:
    """The conv's own tiling, or an im2col of it when the estimate finds that faster."""
    try:
        direct = tile_mac.plan_mac(op, ctx)
    except LowerError:
        direct = None
    gathers = lowerings_of(op, ctx)
    if CHOOSE != "estimate":
        gathers = [g for g in gathers if (g.kind == CHOOSE)]
        candidates = [p for p in (_planned(op, ctx, g) for g in gathers) if p is not None]
        if candidates:
            return candidates[0]
    elif PRUNE and gathers:
        candidates = _unpruned(op, ctx, direct, gathers)
    else:
        candidates = [p for p in (_planned(op, ctx, g) for g in gathers) if p is not None]
    if direct is None and not candidates:
        return tile_mac.plan_mac(op, ctx)  # raises the conv's own reason
    candidates = ([direct] if direct is not None else []) + candidates
    return _fastest_for_its_traffic(candidates, ctx)


def lowerings_of(op, ctx: Context) -> list[Gather]:
    """The im2cols that apply to `op` (plan_conv plans them beside the conv's own tiling)."""
    return [g for g in (gather_of(op, ctx), rows_of(op, ctx), *columns_of(op, ctx)) if g is not None]


def _unpruned(op, ctx: Context, direct: OpPlan | None, gathers: list[Gather]) -> list[OpPlan]:
    """The plans of the im2cols that may be within tile_mac.TRAFFIC_SLACK of the fastest
    lowering, in `gathers`' order: planned in the order of their least busy-time bound
    (tile_mac.gathered_bound), the least first, each skipped when its bound is outside the
    slack of the fastest estimated so far (the conv's own, then the im2cols planned): its
    plan would estimate at least its bound, so _fastest_for_its_traffic would not take it,
    nor would it be the fastest. So the choice is the one planning every im2col gives."""
    bounds = []
    for i, gather in enumerate(gathers):
        try:
            bound = tile_mac.gathered_bound(*_lowered(op, ctx, gather), gather)
        except LowerError:
            bound = 0  # (planned as it was: _planned gives None where it raises)
        if bound is not None:
            bounds.append((bound, i, gather))
    fastest = _cycles(direct, ctx) if direct is not None else None
    planned = {}
    for bound, i, gather in sorted(bounds, key=lambda b: b[:2]):
        if fastest is not None and bound > fastest * (1 + tile_mac.TRAFFIC_SLACK):
            break  # and all after it
        plan = _planned(op, ctx, gather)
        if plan is not None:
            planned[i] = plan
            cycles = _cycles(plan, ctx)
            fastest = cycles if fastest is None else min(fastest, cycles)
    return [planned[i] for i in sorted(planned)]


def _fastest_for_its_traffic(candidates: list[OpPlan], ctx: Context) -> OpPlan:
    """The plan moving the fewest DRAM and flash bytes among those within
    tile_mac.TRAFFIC_SLACK of the fastest (ties: the faster, then the first, the conv
    itself): a gather that reads its input kh*kw times, or a packed window's zero weights,
    is not worth a cycle or two in a hundred."""
    scored = [(_cycles(p, ctx), p.dram_read_bytes + p.dram_write_bytes, i) for i, p in enumerate(candidates)]
    fastest = min(cycles for cycles, _, _ in scored)
    near = [s for s in scored if s[0] <= fastest * (1 + tile_mac.TRAFFIC_SLACK)]
    return candidates[min(near, key=lambda s: (s[1], s[0], s[2]))[2]]


def _cycles(plan: OpPlan, ctx: Context) -> int:
    return mac_bound.ranked(Events(ctx, plan.events), plan).estimate(Clock())


def least_cycles(op: vops.Conv | vops.Dense, ctx: Context) -> int | None:
    """A lower bound of the cycles plan_conv's plan estimates: the least busy-time bound
    (mac_bound.least_bound) of the conv's own choices and of each im2col's; None when none
    fits (plan_conv raises)."""
    found = []
    try:
        found.append(mac_bound.least_bound(op, ctx, tile_mac.shape_of(op, ctx)))
    except LowerError:
        pass
    for gather in (gather_of(op, ctx), rows_of(op, ctx), *columns_of(op, ctx)):
        if gather is not None:
            try:
                found.append(mac_bound.least_bound(*_lowered(op, ctx, gather), gather))
            except LowerError:
                pass
    return min((f for f in found if f is not None), default=None)


def _planned(op: vops.Conv, ctx: Context, gather: Gather) -> OpPlan | None:
    """The 1x1 conv (patches), 1 x kw conv (rows) or kh x 1 conv (a column window) over the
    gathered tile, tiled."""
    one, tile_ctx, flat = _lowered(op, ctx, gather)
    try:
        plan = tile_mac.plan_mac(one, tile_ctx, flat, gather)
    except LowerError:
        return None
    plan.op = op
    if isinstance(gather, ColumnWindow):
        shape, (kh, kw), span = tile_mac.shape_of(op, ctx), op.kernel, gather.tile_shape[1]
        plan.macs = shape.n * shape.oh * shape.ow * op.out_channels * kh * kw * gather.channels
        where = "of a resident input" if isinstance(gather, ColumnCopy) else "in place"
        packed_note = f", {gather.pack} output columns a pixel" if gather.pack > 1 else ""
        label = f"column window {where} ({span} channels, {kh}x1 kernel{packed_note})"
    elif isinstance(gather, RowGather):
        label = f"im2col of kernel rows ({gather.tile_shape[1]} channels, 1x{op.kernel[1]} kernel)"
    else:
        label = f"im2col (K {gather.patch_bytes})"
    plan.choice = {"lowering": label, **plan.choice}
    return plan


def _lowered(op: vops.Conv, ctx: Context, gather: Gather) -> tuple[vops.Conv, Context, tile_mac.MacShape]:
    """(the conv over the gathered tile, its context, its shape as the array sees it)."""
    shape = tile_mac.shape_of(op, ctx)
    (_, kw), (_, sw), (_, left, _, right) = op.kernel, op.strides, op.padding
    if isinstance(gather, ColumnWindow):
        return _columns_lowered(op, ctx, gather, shape)
    if isinstance(gather, RowGather):
        kernel, strides, pads = (1, kw), (1, sw), (0, left, 0, right)
        weights = op.weights.transpose(0, 2, 1, 3).reshape(op.out_channels, 1, kw, -1)
    else:
        kernel, strides, pads = (1, 1), (1, 1), (0, 0, 0, 0)
        weights = op.weights.transpose(0, 3, 1, 2) if gather.view.nchw else op.weights
        weights = weights.reshape(op.out_channels, 1, 1, -1)
    flat = replace(shape, h=shape.oh, w=gather.tile_shape[0], cin=gather.tile_shape[1])
    flat = replace(flat, kernel=kernel, strides=strides, pads=pads)
    one = replace(op, weights=np.ascontiguousarray(weights), strides=strides, padding=pads)
    return one, ctx, flat


def _columns_lowered(op: vops.Conv, ctx: Context, window: ColumnWindow, shape):
    """The kh x 1 conv over the column window's tile; packed (P > 1): P*O outputs over the
    output tensor seen as (out_h, ow/P, P*O), its bytes unchanged."""
    (kh, kw), (sh, sw), (top, _, bottom, _) = op.kernel, op.strides, op.padding
    pack, out_c, span = window.pack, op.out_channels, window.tile_shape[1]
    weights = np.zeros((pack * out_c, kh, 1, span), np.int8)
    rows = op.weights.reshape(out_c, kh, kw * window.channels)
    for p in range(pack):
        start = p * sw * window.channels
        weights[p * out_c : (p + 1) * out_c, :, 0, start : start + rows.shape[2]] = rows
    multipliers = np.tile(np.broadcast_to(op.requant.multipliers, (out_c,)), pack)
    requant = replace(op.requant, multipliers=multipliers)
    one = replace(op, weights=weights, strides=(sh, 1), padding=(top, 0, bottom, 0),
                  bias=np.tile(op.bias, pack), requant=requant)  # fmt: skip
    flat = replace(shape, h=shape.h, w=window.tile_shape[0], cin=span, ow=shape.ow // pack, cout=pack * out_c,
                   kernel=(kh, 1), strides=(sh, 1), pads=(top, 0, bottom, 0))  # fmt: skip
    if pack > 1:
        y = ctx.view(op.output)
        packed = replace(y, shape=(*y.shape[:2], y.shape[2] // pack, pack * out_c), pixel_stride=pack * out_c)
        placement = copy.copy(ctx.placement)
        placement.views = {**ctx.placement.views, op.output: packed}
        ctx = replace(ctx, placement=placement)
    return one, ctx, flat


def gather_of(op, ctx: Context, check_rows: bool = True, resident: bool = False) -> Gather | None:
    """The gather of `op`'s patches when im2col applies (see the module's docstring) and
    fills the array's rows better than the conv does; else None. `resident`: an input in
    SRAM too (the column window's copy)."""
    if not isinstance(op, vops.Conv) or op.groups != 1 or tuple(op.dilation) != (1, 1):
        return None
    if not resident and not ctx.in_dram(op.inputs[0]):
        return None
    view, rows = ctx.view(op.inputs[0]), ctx.hw.mac_rows
    (kh, kw), channels = op.kernel, view.shape[3]
    if not view.nchw and view.pixel_stride != channels:
        return None
    patch = kh * kw * channels
    if check_rows and (patch > 0xFFFF or -(-patch // rows) >= kh * kw * -(-channels // rows)):
        return None
    _, oh, ow, _ = ctx.view(op.output).shape
    zero_point = op.in_q[0].zero_point
    return Gather(view, op.inputs[0], (kh, kw), tuple(op.strides), tuple(op.padding), (oh, ow), zero_point)


def rows_of(op, ctx: Context) -> RowGather | None:
    """The gather of `op`'s kernel rows when it applies (as gather_of) and kh*C fills the
    array's rows better than C does; else None."""
    found = gather_of(op, ctx, check_rows=False)
    if found is None:
        return None
    rows, kh, channels = ctx.hw.mac_rows, found.kernel[0], found.channels
    if kh == 1 or kh * channels > 0xFFFF or -(-kh * channels // rows) >= kh * -(-channels // rows):
        return None
    return RowGather(**{f.name: getattr(found, f.name) for f in fields(Gather)})


def columns_of(op, ctx: Context) -> list[ColumnWindow]:
    """The column windows of `op` when they apply (as gather_of, channels-last or one
    channel; an input resident in SRAM copied by the vector unit) and kw*C fills the
    array's rows better than C does: one window a pixel, and P > 1 of them where P times
    the output channels fit the array's columns (packing no more blocks); else []."""
    found = gather_of(op, ctx, check_rows=False, resident=True)
    if found is None:
        return []
    rows, kw, channels = ctx.hw.mac_rows, found.kernel[1], found.channels
    if found.view.nchw and not ctx.in_dram(op.inputs[0]):  # only the DMA interleaves planes
        return []
    if kw == 1 or kw * channels > 0xFFFF or -(-kw * channels // rows) >= kw * -(-channels // rows):
        return []
    window = ColumnWindow if ctx.in_dram(op.inputs[0]) else ColumnCopy
    one = window(**{f.name: getattr(found, f.name) for f in fields(Gather)})
    return [one, *[replace(one, pack=p) for p in [_pack_of(op, ctx, one)] if p > 1]]


def _pack_of(op, ctx: Context, one: ColumnWindow) -> int:
    """The most output columns a wide pixel can take: P x the output channels within the
    array's columns, the output width a multiple of P, the wide pixel within the array's
    row blocks of one window and the ISA's fields, the output channels-last and dense."""
    out_c, width = op.out_channels, one.out[1]
    blocks = -(-one.tile_shape[1] // ctx.hw.mac_rows)
    if not ctx.view(op.output).contiguous:
        return 1
    for pack in range(ctx.hw.mac_cols // out_c, 1, -1):
        packed = replace(one, pack=pack)
        span, stride = packed.tile_shape[1], packed.in_place[0]
        if width % pack == 0 and max(span, stride) <= 0xFFFF and -(-span // ctx.hw.mac_rows) <= blocks:
            return pack
    return 1
