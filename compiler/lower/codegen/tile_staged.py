"""A conv whose left or right padding is past the conv instruction's limit, on the MAC array:
its input band staged into a tile whose rows hold that padding, and the conv itself over the
tile with no horizontal padding (layer_plan.py asks here first for every conv).

    conv(x, W, pads [t, l, b, r])  =  conv(pad_columns(x, l, r, zero point), W, pads [t, 0, b, 0])

The staging is the column window's (im2col_gather.ColumnWindow): the band's rows are loaded
as they are (W*C contiguous bytes; an NCHW input in DRAM by one interleaving load) into a
tile of (W + l + r)*C bytes a row, or, for an input resident in SRAM (a later layer's: the
DMA reaches DRAM only), copied by the vector unit (ColumnCopy); a fill with the input's zero
point writes the padding first. A channel slice of a wider tensor (a concat's input, in DRAM
as every concat is) loads C bytes a pixel. The conv reads the tile with pixel stride C (a chunk of
groups reads its own channels of it), so groups, depthwise and dilation are as the conv's;
a kernel wider than the limit runs as column pieces over the tile, each cropped to the
columns it reads (kernel_split.conv_pieces, which says when a conv needs this). Exact: the
tile's padding is what the instruction's padding would hold. The column window itself (one
group, no dilation) is planned beside it and the faster kept.

A conv whose outer output rows read only padding (kernel_split.Split.staged_rows) is staged
in both axes: the tile's rows are those of the input padded above and below too, the conv
over it has no padding at all, and a band of the padded rows gets the fill, then the input
rows it holds below its padding rows (none: the fill alone).

    conv(x, W, pads [t, l, b, r])  =  conv(pad(x, [t, l, b, r], zero point), W, no padding)
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import mac_bound, tile_im2col, tile_mac
from vpuc.compiler.lower.codegen.im2col_gather import ColumnCopy, ColumnWindow
from vpuc.compiler.lower.codegen.kernel_split import conv_limits, conv_pieces
from vpuc.compiler.lower.codegen.plan import Addr, OpPlan, Spec
from vpuc.compiler.lower.codegen.tiling import Context, Events
from vpuc.compiler.lower.codegen.transfer import _dma
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.formats import Clip, Opcode


@dataclass(frozen=True)
class PaddedBand(ColumnWindow):
    """The input band staged as the column window stages it (whole rows into a tile whose
    rows hold the left and right padding), read by the conv itself: its own kernel,
    strides, dilation and groups, pixel stride C. `copy`: the input is resident in SRAM
    and the vector unit copies its rows (ColumnCopy). `staged_rows`: the tile's rows are
    those of the input padded above and below too (rows of the zero point), and the bands
    it is called with are rows of that padded input."""

    copy: bool = False
    staged_rows: bool = False
    kind = "padded"

    @property
    def tile_shape(self) -> tuple[int, int]:
        return self.padded_width, self.channels

    @property
    def in_place(self) -> tuple[int, int]:
        return self.channels, self.padded_width * self.channels

    def input_rows(self, rows: tuple[int, int]) -> tuple[int, int]:
        """The input rows of a band of the tile's rows (may be empty: a band of padding)."""
        if not self.staged_rows:
            return rows
        top, height = self.pads[0], self.view.shape[1]
        start = min(max(rows[0] - top, 0), height)
        return start, max(start, min(rows[1] - top, height))

    def padded(self, rows: tuple[int, int]) -> bool:
        """Whether the band's tile holds padding (then a fill writes the zero point first)."""
        if super().padded(rows) or not self.staged_rows:
            return super().padded(rows)
        return self.input_rows(rows) != (rows[0] - self.pads[0], rows[1] - self.pads[0])

    def __call__(self, ev: Events, n: int, rows: tuple[int, int], tile: Addr, key: float) -> None:
        inside = self.input_rows(rows)
        if inside[0] < inside[1]:
            (ColumnCopy if self.copy else ColumnWindow).__call__(self, ev, n, rows, tile, key)
            return
        # a band of padding rows alone: the fill is all of it
        zp, count = self.zero_point, self.band_bytes(rows[1] - rows[0])
        fill = Spec(Clip, dict(src=tile, dst=tile, count=count, clamp_min=zp, clamp_max=zp))
        ev.add("vector", [fill], key - 0.25, writes=[(tile.base, tile.slot)])

    def specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        if self.staged_rows:  # the input's rows, below the tile's rows of padding above them
            inside = self.input_rows(rows)
            tile = tile + (inside[0] + self.pads[0] - rows[0]) * self.in_place[1]
            rows = inside
        if self.view.nchw or self.view.pixel_stride == self.channels:
            return (ColumnCopy if self.copy else ColumnWindow).specs(self, n, rows, tile)
        return self._slice_specs(n, rows, tile)

    def _slice_specs(self, n: int, rows: tuple[int, int], tile: Addr) -> list[Spec]:
        """A channel slice of a wider tensor in DRAM (a concat's input: pixel stride the
        concat's channels): one load of the band's rows (planes), C bytes a pixel (rows)."""
        view, (r0, r1), depth = self.view, rows, self.channels
        width, stride, pitch = view.shape[2], view.pixel_stride, self.in_place[1]
        dram, first = Addr(view.storage, view.pixel_offset(n, r0)), tile + self.pads[1] * depth
        return [_dma(Opcode.LOAD, dram, first, depth, width, stride, depth, r1 - r0, width * stride, pitch)]


def padded_of(op, ctx: Context) -> PaddedBand | None:
    """The staged band of a conv whose left or right padding is past the conv limit
    (kernel_split.conv_pieces says `staged`), for a channels-last input with adjacent
    pixels, or an NCHW input or a channel slice (a concat's input) in DRAM; else None."""
    if not isinstance(op, vops.Conv):
        return None
    x, y = ctx.view(op.inputs[0]), ctx.view(op.output)
    geometry = (op.kernel, op.padding, op.strides, op.dilation, x.shape[1:3], y.shape[1:3])
    split = conv_pieces(*geometry, *conv_limits(ctx.target))
    if split is None or not split.staged:
        return None
    dram = ctx.in_dram(op.inputs[0])
    if not dram and (x.nchw or x.pixel_stride != x.shape[3]):  # no copy of these (a concat,
        return None  # whose inputs are channel slices, lives in DRAM: residency.py)
    return PaddedBand(
        x, op.inputs[0], tuple(op.kernel), tuple(op.strides), tuple(op.padding), tuple(y.shape[1:3]),
        op.in_q[0].zero_point, copy=not dram, staged_rows=split.staged_rows,
    )  # fmt: skip


def _staged_shape(op: vops.Conv, ctx: Context, band: PaddedBand) -> tuple[vops.Conv, tile_mac.MacShape]:
    """The conv over the staged tile: the padded width, no horizontal padding (with
    `staged_rows`, the padded height too, no padding at all)."""
    top, _, bottom, _ = op.padding
    shape = tile_mac.shape_of(op, ctx)
    if band.staged_rows:
        shape, top, bottom = replace(shape, h=shape.h + top + bottom), 0, 0
    one = replace(op, padding=(top, 0, bottom, 0))
    return one, replace(shape, w=band.padded_width, pads=(top, 0, bottom, 0))


def min_staged_bytes(op, ctx: Context) -> int | None:
    """The smallest SRAM of a conv that needs its input staged, the staged tile counted (None
    for any other op): what the fit check (layer_plan.min_working_set) asks for it."""
    band = padded_of(op, ctx)
    if band is None:
        return None
    one, flat = _staged_shape(op, ctx, band)
    return tile_mac.min_mac_bytes(one, ctx, flat, band)


def plan_staged(op, ctx: Context) -> OpPlan | None:
    """The plan of a conv that needs its input staged (None for any other op): the conv over
    the staged tile, or the conv's im2col (tile_im2col.plan_conv) where that is faster."""
    band = padded_of(op, ctx)
    if band is None:
        return None
    candidates = []
    try:
        candidates.append(_planned(op, ctx, band))
    except LowerError:
        pass
    try:
        candidates.append(tile_im2col.plan_conv(op, ctx))
    except LowerError:
        if not candidates:
            raise
    return tile_im2col._fastest_for_its_traffic(candidates, ctx)


def least_cycles(op, ctx: Context) -> int | None:
    """A lower bound of the cycles plan_staged's plan estimates (mac_bound.least_bound of the
    conv over the staged tile and tile_im2col.least_cycles of the conv's own lowerings);
    None when nothing fits. Only for a conv plan_staged plans (padded_of)."""
    band = padded_of(op, ctx)
    one, flat = _staged_shape(op, ctx, band)
    found = [tile_im2col.least_cycles(op, ctx)]
    try:
        found.append(mac_bound.least_bound(one, ctx, flat, band))
    except LowerError:
        pass
    return min((f for f in found if f is not None), default=None)


def _planned(op: vops.Conv, ctx: Context, band: PaddedBand) -> OpPlan:
    """The conv over the staged band's tile, its horizontal padding in the tile's rows."""
    width = band.padded_width
    one, flat = _staged_shape(op, ctx, band)
    plan = tile_mac.plan_mac(one, ctx, flat, band)
    plan.op = op
    where = "resident input copied" if band.copy else "input loaded"
    held = f"all of its padding ({flat.h} rows x " if band.staged_rows else "the left/right padding ("
    plan.choice = {
        "lowering": f"{where} into a tile holding {held}{width} columns)",
        **plan.choice,
    }
    return plan
