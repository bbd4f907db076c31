"""The MAC planner's busy-time bound of a candidate, from its shape, before its events exist.

tile_mac._search skips a candidate whose MAC array's or vector unit's total busy time
already puts it outside TRAFFIC_SLACK of the fastest found: the estimate runs each unit's
events one after the other, so the layer takes at least either's total (tile_mac.busy_of).
Measured on the events, that bound cost a whole build (weights packed, every transfer and
instruction generated) for each candidate it then threw away. Here it is the same sums
without them: the conv and vconv instructions of every (band, chunk, input step, kernel
piece, unit share) and the requantisation of every tile, costed by the ISA's functions
(tiling.spec_cycles, the figures the events carry), counted by how often build_mac issues
them; with a gather (tile_im2col.py) also its vector work per input band it fills.

tests/lower/test_mac_bound.py holds this to the events' bound on a spread of shapes.
"""

from __future__ import annotations

from collections import Counter

from vpuc.compiler.lower.codegen.kernel_split import ConvGeometry, Piece, column_window
from vpuc.compiler.lower.codegen.plan import Addr, Spec
from vpuc.compiler.lower.codegen.tiling import UNIT_OF_OPCODE, Context, Events, bands, halo, spec_cycles
from vpuc.targets.isa.formats import Conv, Requant, Unit


def busy_bound(op, ctx: Context, shape, choice, pieces: list[Piece], gather=None, memo=None) -> int:
    """max(MAC array total, vector unit total) over the events build_mac(op, ctx, shape,
    choice, gather) would give, in cycles. `pieces`: the conv's sub-kernels (pieces_of).
    `memo` (a dict, one per search) keeps each distinct instruction's and band's cycles."""
    from vpuc.compiler.lower.codegen.tile_mac import chunks, unit_rows  # (tile_mac imports this)

    memo = {} if memo is None else memo
    busy = {Unit.MAC: 0, Unit.VEC: 0}
    parts = chunks(shape, choice)
    # chunks alike in output width, groups and input steps issue the same instructions
    kinds = Counter((c.out[1] - c.out[0], c.groups, tuple(s1 - s0 for s0, s1 in c.steps)) for c in parts)
    kh, sh, dh = shape.kernel[0], shape.strides[0], shape.dilation[0]
    for r0, r1 in bands(shape.oh, choice.band):
        for (width, groups, steps), count in kinds.items():
            for k, cin in enumerate(steps):
                last = k == len(steps) - 1
                for p, piece in enumerate(pieces):
                    for (u0, u1), opcode, _ in unit_rows((r0, r1), choice.vector, ""):
                        rows = (max(u0, piece.out[0]), min(u1, piece.out[1]))
                        if rows[0] >= rows[1]:
                            continue
                        geometry = (rows, cin, width, groups, p, int(k > 0 or p > 0), int(last and p == 0))
                        key = ("conv", opcode, geometry)
                        if key not in memo:
                            memo[key] = _conv_cycles(op, ctx, shape, pieces[p], opcode, geometry)
                        busy[UNIT_OF_OPCODE.get(opcode, Unit.VEC)] += count * shape.n * memo[key]
            key = ("requant", (r1 - r0) * shape.ow, width)
            if key not in memo:
                fields = dict(src=Addr("acc"), params=Addr("w"), dst=Addr("out"), pixels=key[1])
                memo[key] = spec_cycles(Spec(Requant, {**fields, "channels": width}), ctx.target)
            busy[Unit.VEC] += count * shape.n * memo[key]
    if gather is not None:
        _gathered(ctx, shape, choice, parts, gather, busy, memo, kh, sh, dh)
    return max(busy.values())


def _conv_cycles(op, ctx: Context, shape, piece: Piece, opcode, geometry) -> int:
    """The cycles of one conv or vconv instruction of build_mac (tile_mac._conv_fields's
    geometry; addresses, strides and zero point do not change an instruction's cost)."""
    rows, cin, width, groups, _, accumulate, bias = geometry
    (_, kw), (_, sw), (_, dw) = shape.kernel, shape.strides, shape.dilation
    k0, k1 = piece.rows
    p0, p1, p_top, p_bottom = halo(rows, shape.h, k1 - k0, shape.strides[0], shape.dilation[0],
                                   shape.pads[0] - k0 * shape.dilation[0])  # fmt: skip
    fields = dict(in_w=shape.w, kernel_w=kw, pad_left=shape.pads[1], pad_right=shape.pads[3])
    if piece.cols is not None:
        g = ConvGeometry(shape.w, shape.ow, kw, sw, dw, shape.pads[1])
        _, count, left, right = column_window(g, piece.cols)
        fields = dict(in_w=count, kernel_w=piece.cols[1] - piece.cols[0], pad_left=left, pad_right=right)
    fields.update(
        opcode=opcode,
        src=Addr("in"),
        weights=Addr("w"),
        dst=Addr("acc"),
        in_h=p1 - p0,
        in_c=cin,
        out_c=width,
        kernel_h=k1 - k0,
        stride_h=shape.strides[0],
        stride_w=sw,
        dilation_h=shape.dilation[0],
        dilation_w=dw,
        pad_top=p_top,
        pad_bottom=p_bottom,
        groups=groups,
        src_zp=op.in_q[0].zero_point,
        with_bias=bias,
        accumulate=accumulate,
    )
    return spec_cycles(Spec(Conv, fields), ctx.target)


def _gathered(ctx: Context, shape, choice, parts, gather, busy: dict, memo: dict, kh, sh, dh) -> None:
    """Add a gather's MAC and vector work: build_mac calls it once per input band that
    differs from the one before (in the candidate's loop order), never split by channel."""
    band_list = bands(shape.oh, choice.band)
    if choice.order == "rows":
        tiles = [(n, b) for n in range(shape.n) for b in band_list for _ in parts]
    else:
        tiles = [(n, b) for _ in parts for n in range(shape.n) for b in band_list]
    current = None
    for n, band in tiles:
        i0, i1, _, _ = halo(band, shape.h, kh, sh, dh, shape.pads[0])
        if (n, i0, i1) == current:
            continue
        current = (n, i0, i1)
        key = ("gather", n, i0, i1)
        if key not in memo:
            ev = Events(ctx)
            gather(ev, n, (i0, i1), Addr("in"), 0)
            memo[key] = {unit: sum(e.cycles for e in ev.events if e.unit == unit) for unit in busy}
        for unit, cycles in memo[key].items():
            busy[unit] += cycles
