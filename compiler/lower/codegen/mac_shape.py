"""A MAC-array layer's shape as the array sees it, the tilings tile_mac.py searches
(Choice), their output-channel chunks with input-channel steps, the SRAM buffers a tiling
needs, and the weight blob's packing in the order the array reads it (see tile_mac.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import pairwise

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen.kernel_split import (
    ConvGeometry,
    Piece,
    column_window,
    conv_limits,
    conv_pieces,
)
from vpuc.compiler.lower.codegen.plan import View
from vpuc.compiler.lower.codegen.tiling import Context, band_options, buffer, halo, working_set
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.dma_cost import flash_view
from vpuc.targets.isa.params import pack_requant_params, requant_param_bytes


@dataclass(frozen=True)
class MacShape:
    """A conv or dense layer as the array sees it (dense: n=1, h=M, w=1, 1x1 kernel)."""

    n: int
    h: int
    w: int
    cin: int
    oh: int
    ow: int
    cout: int
    kernel: tuple[int, int]
    strides: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int, int, int]  # top, left, bottom, right
    groups: int

    @property
    def cin_g(self) -> int:
        return self.cin // self.groups

    @property
    def cout_g(self) -> int:
        return self.cout // self.groups


@dataclass(frozen=True)
class Chunk:
    """Output channels [o0, o1), accumulated over input channel steps; `groups` of them."""

    out: tuple[int, int]
    steps: tuple[tuple[int, int], ...]
    groups: int


@dataclass(frozen=True)
class Choice:
    band: int  # output rows per tile
    chunk: int  # output channels per tile (groups per tile when grouped)
    cin: int  # input channels per accumulation step
    whole: bool  # weights resident for the whole layer
    order: str  # "rows" (bands outer) or "chunks"
    vector: tuple[int, int] = (0, 1)  # (v, p): the vector unit computes v/p of a tile's rows
    lead: int = 0  # output channels of the first chunk when fewer than `chunk` (0: `chunk`)


def shape_of(op: vops.Conv | vops.Dense, ctx: Context) -> MacShape:
    n, h, w, cin = ctx.view(op.inputs[0]).shape
    _, oh, ow, cout = ctx.view(op.output).shape
    if isinstance(op, vops.Dense):
        return MacShape(1, n * h * w, 1, cin, n * oh * ow, 1, cout, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1)
    return MacShape(n, h, w, cin, oh, ow, cout, op.kernel, op.strides, op.dilation, op.padding, op.groups)


def pieces_of(shape: MacShape, ctx: Context) -> list[Piece]:
    """The sub-kernels the conv runs as: one, the whole kernel, when it is within the conv
    instruction's limits (kernel_split.py). A conv whose left or right padding needs its
    input staged is tile_im2col.PaddedBand's, not the conv's own."""
    kernel_max, pad_max = conv_limits(ctx.target)
    split = _conv_pieces(shape, kernel_max, pad_max)
    if split is None or split.staged:
        raise LowerError(
            f"kernel {shape.kernel[0]}x{shape.kernel[1]} with padding {list(shape.pads)}: no sub-kernels "
            f"within the conv limits (kernel <= {kernel_max}, padding <= {pad_max}) cover it"
            + (" without staging its input" if split is not None else "")
        )
    return split.pieces


@lru_cache(maxsize=1024)
def _conv_pieces(shape: MacShape, kernel_max: int, pad_max: int):
    """kernel_split.conv_pieces of the shape (by the shape and the limits alone: memoised,
    every candidate's build asks)."""
    in_hw, out_hw = (shape.h, shape.w), (shape.oh, shape.ow)
    geometry = (shape.kernel, shape.pads, shape.strides, shape.dilation, in_hw, out_hw)
    return conv_pieces(*geometry, kernel_max, pad_max)


def layer_pieces(op: vops.Conv | vops.Dense, shape: MacShape, ctx: Context) -> list[Piece]:
    """A conv's sub-kernels (pieces_of); a dense layer's one piece, its M rows."""
    return pieces_of(shape, ctx) if isinstance(op, vops.Conv) else [Piece((0, 1), (0, shape.oh))]


def rows_view(view: View) -> View:
    """A dense layer's (N, H, W, K) view as the (1, N*H*W, 1, K) image shape_of gives it: a
    band of M rows is then a band of the view's rows. Without it a view with W > 1 (a MatMul
    on a [1, 1, 5, K] tensor) moved every band W times too wide (found by tests/fuzz,
    regression case vpu-cd892ec895)."""
    n, h, w, c = view.shape
    if view.nchw and h * w > 1 and c > 1:  # (with one channel, or one pixel, the bytes agree)
        raise LowerError("dense layer or matrix product on a channels-first view (not yet)")
    return replace(view, shape=(1, n * h * w, 1, c), nchw=False)


def piece_geometry(shape: MacShape, piece: Piece, rows: tuple[int, int]) -> tuple[int, int, dict]:
    """One conv instruction's geometry: sub-kernel `piece` over output `rows`. Returns (the
    first input row it reads, the first input column it reads, its geometry fields); a piece
    of kernel columns reads the input cropped to the columns they cover (column_window).
    tile_mac.build_mac's instructions and mac_bound's costs both take it from here."""
    (_, kw), (sh, sw), (dh, dw) = shape.kernel, shape.strides, shape.dilation
    k0, k1 = piece.rows
    p0, p1, p_top, p_bottom = halo(rows, shape.h, k1 - k0, sh, dh, shape.pads[0] - k0 * dh)
    first, fields = 0, dict(in_w=shape.w, kernel_w=kw, pad_left=shape.pads[1], pad_right=shape.pads[3])
    if piece.cols is not None:
        g = ConvGeometry(shape.w, shape.ow, kw, sw, dw, shape.pads[1])
        first, count, left, right = column_window(g, piece.cols)
        fields = dict(in_w=count, kernel_w=piece.cols[1] - piece.cols[0], pad_left=left, pad_right=right)
    fields.update(in_h=p1 - p0, kernel_h=k1 - k0, stride_h=sh, stride_w=sw, dilation_h=dh, dilation_w=dw,
                  pad_top=p_top, pad_bottom=p_bottom)  # fmt: skip
    return p0, first, fields


def weights_ohwi(op: vops.Conv | vops.Dense) -> np.ndarray:
    if isinstance(op, vops.Dense):
        return op.weights.reshape(op.weights.shape[0], 1, 1, op.weights.shape[1])
    return op.weights


def chunks(shape: MacShape, choice: Choice) -> tuple[Chunk, ...]:
    """The output channel chunks of a choice, with their input channel steps (by the shape
    and the choice's chunk and step sizes alone: memoised, a search asks for them per
    candidate several times)."""
    return _chunks(shape, choice.chunk, choice.cin, choice.lead)


@lru_cache(maxsize=4096)
def _chunks(shape: MacShape, chunk: int, cin: int, lead: int = 0) -> tuple[Chunk, ...]:
    if shape.groups == 1:
        steps = tuple((c, min(shape.cin, c + cin)) for c in range(0, shape.cin, cin))
        starts = [0, *range(lead or chunk, shape.cout, chunk)]  # a lead chunk first, then whole ones
        found = [Chunk(out, steps, 1) for out in pairwise([*starts, shape.cout])]
        if lead:  # its block small already: all its input channels at once
            found[0] = Chunk(found[0].out, ((0, shape.cin),), 1)
        return tuple(found)
    found = []
    for g in range(0, shape.groups, chunk):
        g1 = min(shape.groups, g + chunk)
        found.append(
            Chunk((g * shape.cout_g, g1 * shape.cout_g), ((g * shape.cin_g, g1 * shape.cin_g),), g1 - g)
        )
    return tuple(found)


def _block_bytes(
    shape: MacShape, chunk: Chunk, step: tuple[int, int], last: bool, mode: str, lanes: int
) -> tuple[int, int]:
    """(weights bytes padded to 4, whole block bytes) of one weight block: the last step's
    holds the biases and the requantisation parameters, repeated lane_pack times."""
    o = chunk.out[1] - chunk.out[0]
    cin = (step[1] - step[0]) if shape.groups == 1 else shape.cin_g
    w_bytes = -(-(o * shape.kernel[0] * shape.kernel[1] * cin) // 4) * 4
    params = requant_param_bytes(mode, o * lane_pack(shape, o, lanes))
    return w_bytes, w_bytes + (4 * o + params if last else 0)


def lane_pack(shape: MacShape, width: int, lanes: int) -> int:
    """Pixels a requantisation vector holds (P): a tile of all the layer's C output channels,
    C at most half the lanes, is requantised as pixels / P pixels of P*C channels (P the most
    up to lanes // C dividing the output's width, so every band), its parameters P times
    over: element p*C + c is channel c of pixel p either way (docs/partition.md)."""
    if width != shape.cout or 2 * width > lanes:
        return 1
    return next(p for p in range(lanes // width, 0, -1) if shape.ow % p == 0)


def packed_requant(pixels: int, channels: int, pack: int) -> tuple[int, int]:
    """(pixels, channels) of a tile's requantisation, `pack` (lane_pack) pixels a vector."""
    assert pixels % pack == 0, (pixels, pack)
    return pixels // pack, channels * pack


def _in_rows(shape: MacShape, band: int) -> int:
    return min(shape.h, (band - 1) * shape.strides[0] + (shape.kernel[0] - 1) * shape.dilation[0] + 1)


def _buffers(
    shape: MacShape, choice: Choice, ctx: Context, x_dram: bool, y_dram: bool, tiles: int, gather=None
) -> dict:
    mode, lanes = ctx.target.numerics.requant, ctx.hw.vector_lanes
    parts = chunks(shape, choice)
    blocks = [
        _block_bytes(shape, c, s, k == len(c.steps) - 1, mode, lanes)[1]
        for c in parts
        for k, s in enumerate(c.steps)
    ]
    out_c = max(c.out[1] - c.out[0] for c in parts)
    in_c = max(s[1] - s[0] for c in parts for s in c.steps)
    rows = min(choice.band, shape.oh)
    found = {}
    if choice.whole:
        found["w"] = buffer(ctx, "w", sum(blocks), 1, prefetch=True)
    else:
        found["w"] = buffer(ctx, "w", max(blocks), 2 if len(blocks) > 1 else 1, prefetch=True)
    if x_dram or gather is not None:  # a tile of the input band
        loads = tiles * max(len(c.steps) for c in parts)
        in_rows = _in_rows(shape, rows)
        in_bytes = gather.band_bytes(in_rows) if gather is not None else in_rows * shape.w * in_c
        found["in"] = buffer(ctx, "in", in_bytes, 2 if loads > 1 else 1)
    found["acc"] = buffer(ctx, "acc", rows * shape.ow * out_c * 4, 2 if tiles > 1 else 1)
    if y_dram:
        found["out"] = buffer(ctx, "out", rows * shape.ow * out_c, 2 if tiles > 1 else 1)
    return found


def tile_count(shape: MacShape, choice: Choice) -> int:
    return shape.n * -(-shape.oh // choice.band) * len(chunks(shape, choice))


def fitting(
    shape: MacShape, ctx: Context, group: list[Choice], x_dram: bool, y_dram: bool, gather=None
) -> list[tuple[int, Choice]]:
    """The choices of `group` the search may take, with their index in it: those whose
    buffers fit `ctx.budget`, a loop over chunks only where the weights stream and the input
    is in DRAM (else it is the rows' loop)."""
    found = []
    for index, choice in enumerate(group):
        if choice.order == "chunks" and (choice.whole or not x_dram):
            continue
        buffers = _buffers(shape, choice, ctx, x_dram, y_dram, tile_count(shape, choice), gather)
        if working_set(list(buffers.values())) <= ctx.budget:
            found.append((index, choice))
    return found


def _choices(shape: MacShape, ctx: Context) -> list[list[Choice]]:
    """Choices grouped by input channels per step, whole first: a split of the input
    channels (accumulated in int32) is tried only when no choice with all of them fits, or
    when the layer streams its weights under its MACs (search_groups). Then streamed weights
    may also start with a lead chunk of fewer output channels (its block loads sooner)."""
    hw = ctx.hw
    leads = streams_weights(shape, ctx)
    if shape.groups == 1:
        chunk_sizes = [shape.cout] + [hw.mac_cols * k for k in (8, 4, 2, 1) if hw.mac_cols * k < shape.cout]
        cin_sizes = [shape.cin] + [
            hw.mac_rows * k for k in (64, 16, 8, 4, 2, 1) if hw.mac_rows * k < shape.cin
        ]
    else:
        unit = max(1, min(shape.groups, hw.mac_rows // shape.cin_g, hw.mac_cols // max(shape.cout_g, 1)))
        chunk_sizes = [shape.groups] + [unit * k for k in (8, 4, 2, 1) if unit * k < shape.groups]
        cin_sizes = [shape.cin]
        leads = False
    groups = [
        [
            Choice(band, chunk, cin, whole, order, vector)
            for chunk in chunk_sizes
            for whole in (True, False)
            for order in ("rows", "chunks")
            for band in band_options(shape.oh)
            for vector in vector_splits(shape, hw)
        ]
        for cin in cin_sizes
    ]
    if not leads:
        return groups
    # after the others, so that a tie keeps the tiling chosen without them
    streamed = [[c for c in group if not c.whole] for group in groups]
    return [
        group + [replace(c, lead=lead) for c in more for lead in _leads(shape, hw, c.chunk)]
        for group, more in zip(groups, streamed, strict=True)
    ]


def _leads(shape: MacShape, hw, chunk: int) -> tuple[int, ...]:
    """Lead chunk widths of a streamed tiling: the remainder chunk first (cout % chunk), or
    one array-wide column of outputs first."""
    found = [lead for lead in (shape.cout % chunk, hw.mac_cols) if 0 < lead < min(chunk, shape.cout)]
    return tuple(dict.fromkeys(found))


def weights_dominate(shape: MacShape, ctx: Context) -> bool:
    """Whether the layer's weights take at least as long to load (at the bandwidth of the
    region they live in) as its multiply-accumulates take at the array's full rate: an FC,
    or a conv over a small map. Then the weights may be worth streaming under the MACs in
    smaller blocks, split along the input channels (accumulated in int32) or with a lead
    chunk (streams_weights says where the search tries those; the estimate chooses)."""
    hw = ctx.hw
    bandwidth = flash_view(hw).dram_bytes_per_cycle
    pixels = shape.n * shape.oh * shape.ow
    return pixels * bandwidth <= hw.mac_rows * hw.mac_cols


def weights_prefetchable(shape: MacShape, ctx: Context) -> bool:
    """Whether an earlier layer may take the layer's first weight load (prefetch.py): the
    weights' role may use the prefetch rooms and one holds an array-wide chunk's weights."""
    if "w" not in ctx.prefetch_roles:
        return False
    block = min(shape.cout, ctx.hw.mac_cols) * shape.kernel[0] * shape.kernel[1] * shape.cin_g
    return any(room >= block for _, room in ctx.prefetch_rooms)


# Whether the search may stream a layer's weights in input-channel steps and lead chunks
# (streams_weights); off, the tilings tried are those before issue 21's FC streaming.
STREAM_SPLITS = True


def streams_weights(shape: MacShape, ctx: Context) -> bool:
    """Whether the search tries the tilings that stream the weights under the MACs in small
    blocks (input-channel steps and lead chunks beside the usual ones): where the weights
    dominate and no earlier layer can take their first load. Where one can, prefetch.py
    hides a whole first block there, which the search's estimate of the layer alone does not
    see: offered anyway, a lead chunk (a small first block) won that estimate and forfeited
    the hiding (resnet8's FC at u55-256, whose first 608-byte block loads under the average
    pool: +378 cycles in the program). docs/targets.md, "Weights streamed under the MACs"."""
    return STREAM_SPLITS and weights_dominate(shape, ctx) and not weights_prefetchable(shape, ctx)


def search_groups(shape: MacShape, ctx: Context, gathered: bool) -> list[list[Choice]]:
    """The groups of choices tile_mac._search walks, each only if none before it fits: a
    gathered conv's first (its channels are never split); a layer that streams its weights
    (streams_weights), every input-channel step at once, the lead chunks last (the estimate
    weighs a split against the whole; a tie keeps a tiling without a lead); else _choices'
    groups."""
    groups = _choices(shape, ctx)
    if gathered:
        return groups[:1]
    if streams_weights(shape, ctx):
        return [sorted((choice for group in groups for choice in group), key=lambda c: c.lead > 0)]
    return groups


# Shares of every depthwise tile's output rows the vector unit computes (vconv), as (v, p):
# the last v/p of them, rounded. (0, 1): all on the MAC array; (1, 1): all on the vector
# unit; the rest split each tile, the two units working side by side.
VECTOR_SPLITS = ((0, 1), (1, 1), (1, 2), (2, 3), (3, 4), (3, 5), (1, 3))


def vector_splits(shape: MacShape, hw) -> tuple[tuple[int, int], ...]:
    """The splits to try: only (0, 1) unless the layer is depthwise (one input and one output
    channel per group) and the target's vector unit multiply-accumulates."""
    depthwise = shape.groups > 1 and shape.groups == shape.cin == shape.cout
    return VECTOR_SPLITS if depthwise and hw.vector_mac_per_cycle > 0 else VECTOR_SPLITS[:1]


def _pack(
    op, shape: MacShape, parts: tuple[Chunk, ...], mode: str, name: str, subkernels: list[Piece], lanes: int
):
    """{(chunk, step): (offset, weight bytes, block bytes, bias offset, params offset, piece
    offsets)}, the last three from the block's start, and the blob: every block contiguous,
    in (chunk, step) order, its sub-kernels' weights one after the other, the last step's
    requantisation parameters repeated lane_pack times."""
    weights = weights_ohwi(op)
    blocks, pieces, offset = {}, [], 0
    for j, chunk in enumerate(parts):
        o0, o1 = chunk.out
        for k, (c0, c1) in enumerate(chunk.steps):
            last = k == len(chunk.steps) - 1
            block = weights[o0:o1] if shape.groups > 1 else weights[o0:o1, :, :, c0:c1]
            piece_at, data = [], b""
            for piece in subkernels:
                rows = block[:, piece.rows[0] : piece.rows[1]]  # one piece may be fewer rows than the kernel
                if piece.cols is not None:  # or fewer columns
                    rows = rows[:, :, piece.cols[0] : piece.cols[1]]
                piece_at.append(len(data))
                data += np.ascontiguousarray(rows, dtype=np.int8).tobytes()
            w_bytes, total = _block_bytes(shape, chunk, (c0, c1), last, mode, lanes)
            data += bytes(w_bytes - len(data))
            bias_at = params_at = w_bytes
            if last:
                data += np.ascontiguousarray(op.bias[o0:o1], dtype=np.int32).tobytes()
                params_at = len(data)
                multipliers = np.broadcast_to(op.requant.multipliers, (shape.cout,))[o0:o1]
                data += pack_requant_params(mode, np.tile(multipliers, lane_pack(shape, o1 - o0, lanes)))
            assert len(data) == total
            blocks[(j, k)] = (offset, w_bytes, total, bias_at, params_at, piece_at)
            pieces.append(data)
            offset += total
    return blocks, [(name, b"".join(pieces))]


def _describe(choice: Choice, shape: MacShape, parts: tuple[Chunk, ...]) -> dict:
    described = {
        "rows_per_tile": min(choice.band, shape.oh),
        "channels_per_tile": max(c.out[1] - c.out[0] for c in parts),
        "input_channel_steps": max(len(c.steps) for c in parts),
        "weights": "resident" if choice.whole else "streamed",
        "loop": "bands outer" if choice.order == "rows" else "channel chunks outer",
    }
    if choice.lead:  # a narrower first chunk, its weights streamed first
        described["first_chunk_channels"] = choice.lead
    if choice.vector[0]:  # a depthwise layer's share on the vector unit (vconv)
        described["vector_unit_rows"] = f"{choice.vector[0]}/{choice.vector[1]}"
    return described
