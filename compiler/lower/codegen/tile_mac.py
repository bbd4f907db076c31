"""Tiling of the MAC array's layers: convolution (grouped, depthwise) and dense (a 1x1
convolution over an M x 1 image); the matrix product of two activations is tile_matmul.py.

A conv tile is (image, a band of output rows, a chunk of output channels). Its input band
(the rows the band reads, halo included) comes from the resident tensor in SRAM or is
loaded from DRAM; its weights are resident for the whole layer when they fit, else
streamed chunk by chunk; the int32 accumulators go through the requantisation (bias,
per-channel multipliers, fused activation) straight into the output's resident SRAM or a
staging slot that is stored to DRAM. Input channels are split (the accumulate flag) only
when one chunk's weights would not fit otherwise. Weights are packed once, in the order the
array reads them: per chunk (and input step) a contiguous block [weights | bias | params].

Choices: rows per tile, output channels per tile, weights resident or streamed, and the
loop order when both are streamed (rows outer: weights re-read per band; chunks outer: the
input re-read per chunk); the estimate picks the fastest, or among the tilings within
TRAFFIC_SLACK of it the one moving the fewest DRAM and flash bytes. A streamed chunk's
weights are loaded ahead of its input band (their event key half a step earlier): the DMA
unit takes transfers in order, so a weight block behind the previous tile's store would
wait for that tile's requantisation while the flash port sits idle. For the same reason a
tile's input band goes ahead of the store of the tile two before it (tiling.STORE_KEY).
"""

from __future__ import annotations

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import transfer
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.kernel_split import conv_limits
from vpuc.compiler.lower.codegen.mac_bound import busy_bound, hiding_key, ranked
from vpuc.compiler.lower.codegen.mac_shape import (
    Choice,
    Chunk,
    MacShape,
    _buffers,
    _describe,
    _pack,
    chunks,
    fitting,
    lane_pack,
    layer_pieces,
    packed_requant,
    piece_geometry,
    rows_view,
    search_groups,
    shape_of,
    streams_weights,
)
from vpuc.compiler.lower.codegen.plan import BLOB_PREFIX, Addr, OpPlan, Spec, View
from vpuc.compiler.lower.codegen.tiling import (
    STORE_KEY,
    Context,
    Events,
    bands,
    count_dram,
    halo,
    working_set,
)
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.formats import Conv, Opcode, Requant, Unit

# A tiling may be up to this share slower (in estimated cycles) than the fastest if it moves
# fewer DRAM and flash bytes: at 0.02 the weight-ahead order above reads no more bytes than
# before it on resnet8 and resnet_mini at u55-256 (docs/targets.md, "Issue, scratchpad...").
TRAFFIC_SLACK = 0.02


def plan_mac(op: vops.Conv | vops.Dense, ctx: Context, shape: MacShape | None = None, gather=None) -> OpPlan:
    """The fastest tiling of `op`. With `gather` (tile_im2col.py), `op` and `shape` are a
    conv over the gathered tile and `gather(ev, n, rows, tile, key)` fills each input band
    in place of a band load (`gather.band_bytes(rows)` bytes, read with the conv strides
    `gather.in_place`); its channels are never split."""
    shape = shape or shape_of(op, ctx)
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    key = (*_search_key(op, ctx, shape, x_dram, y_dram), gather)
    choice = _CHOSEN.get(key)
    if choice is None:
        choice = _search(op, ctx, shape, x_dram, y_dram, gather)
        if len(_CHOSEN) >= 4096:
            _CHOSEN.clear()
        _CHOSEN[key] = choice
    plan, events = build_mac(op, ctx, shape, choice, gather)
    return events.finish(plan)


# The search's answer per layer geometry and context, within a process: a layer planned
# again (the partitioner's estimate, then the compile; the next compile of the same model in
# a sweep or the regression runner) or another layer of the same geometry (MobileNet's
# repeated blocks, the same layer in the partitioner's other candidate subgraphs) skips the
# search. The key holds everything the candidates' cycles, DRAM bytes and working sets read;
# the weights' values are not among them, nor are names and positions (_search_key).
_CHOSEN: dict[tuple, Choice] = {}


def _search_key(op, ctx: Context, shape: MacShape, x_dram: bool, y_dram: bool) -> tuple:
    """What the search's ranking reads. Left out, as the ranking does not read them: the
    layer's position (ctx.index names its buffers and blob: the same events under other
    names; ctx.key_base shifts every event key alike, quarter steps exact in a float), its
    tensors' names (they find input waits on the clock, which the search starts empty),
    where its views sit in their storage (addresses, which no cost reads) and the prefetch
    rooms and roles (they set when a buffer may start being live, not its bytes) but for
    whether they let an earlier layer take the weights (streams_weights: which candidates) and
    the nearest room's bytes (whether a candidate's first weight load is ranked:
    mac_bound.ranked)."""
    target, requant = ctx.target, op.requant
    return (
        type(op), shape, x_dram, y_dram, _placed(ctx.view(op.inputs[0])), _placed(ctx.view(op.output)),
        target.name, target.hardware, target.numerics, conv_limits(target), ctx.budget,
        op.in_q[0].zero_point, requant.zero_point, tuple(requant.clamp), streams_weights(shape, ctx),
        hiding_key(shape, ctx),
    )  # fmt: skip


def _placed(view: View) -> tuple:
    """A view as the costs see it: its shape, strides and layout, and whether its storage is
    a constant blob (transfer.py charges those transfers to the constant region)."""
    return view.shape, view.pixel_stride, view.nchw, view.storage.startswith(BLOB_PREFIX)


def _search(op, ctx: Context, shape: MacShape, x_dram: bool, y_dram: bool, gather=None) -> Choice:
    """The choice moving the fewest bytes within TRAFFIC_SLACK of the fastest that fits.

    Only the candidates that may be within the slack are built and estimated: every fitting
    candidate's busy-time bound comes first, from its shape (mac_bound.py: what
    mac_bound.events_bound gives, without the events), and they are built in the order of it,
    the least first, until the bound passes the fastest estimated so far by more than the
    slack (so do all after it, and the estimate is never below the bound). What is built is
    every candidate within the slack of the fastest, whatever the order, so the choice is
    the one estimating every candidate gives; the ranking's ties go to the earliest in
    _choices' order, as they did."""
    kept = _BOUNDED.pop((*_search_key(op, ctx, shape, x_dram, y_dram), gather), None) if _BOUNDED else None
    for group in search_groups(shape, ctx, gather is not None):
        bounded = kept if kept is not None else _bounds(op, ctx, shape, group, x_dram, y_dram, gather)
        kept = None
        scored: list[tuple[int, int, int, Choice]] = []
        fastest = None
        for bound, index, choice in sorted(bounded, key=lambda f: f[:2]):
            if fastest is not None and bound > fastest * (1 + TRAFFIC_SLACK):
                break  # outside the slack of the fastest however its events overlap: all after it too
            plan, events = build_mac(op, ctx, shape, choice, gather)
            cycles = ranked(events, plan).estimate(Clock())
            fastest = cycles if fastest is None else min(fastest, cycles)
            scored.append((index, cycles, plan.dram_read_bytes + plan.dram_write_bytes, choice))
        if scored:
            return _least_traffic([(cycles, moved, choice) for _, cycles, moved, choice in sorted(scored)])
    raise LowerError(f"layer '{op.name}': no tiling fits the {ctx.budget} bytes of SRAM left for it")


def _bounds(op, ctx: Context, shape: MacShape, group, x_dram: bool, y_dram: bool, gather) -> list:
    """(busy_bound, index, choice) of every choice of `group` that fits."""
    bounded, memo, pieces = [], {}, None
    for index, choice in fitting(shape, ctx, group, x_dram, y_dram, gather):
        if pieces is None:  # (raising where the first build would)
            pieces = layer_pieces(op, shape, ctx)
        bounded.append((busy_bound(op, ctx, shape, choice, pieces, gather, memo), index, choice))
    return bounded


def gathered_bound(op, ctx: Context, shape: MacShape, gather) -> int | None:
    """A lower bound of the cycles plan_mac(op, ctx, shape, gather)'s plan estimates, None
    when no tiling fits (plan_mac raises): the least busy_bound of its search's candidates
    (a gathered conv's search walks one group), kept for that search in _BOUNDED so that it
    does not bound them again; 0 when the search's answer is memoised (planning it is one
    build). tile_im2col.plan_conv skips an im2col whose bound is outside the slack of a
    lowering it has estimated."""
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    key = (*_search_key(op, ctx, shape, x_dram, y_dram), gather)
    if key in _CHOSEN:
        return 0
    (group,) = search_groups(shape, ctx, True)
    bounded = _bounds(op, ctx, shape, group, x_dram, y_dram, gather)
    if len(_BOUNDED) >= 64:
        _BOUNDED.clear()
    _BOUNDED[key] = bounded
    return min(bounded, key=lambda f: f[:2])[0] if bounded else None


# gathered_bound's candidate bounds, by search key, until the search they were made for
# takes them (or plan_conv skips that im2col: then they go when the dict fills)
_BOUNDED: dict[tuple, list] = {}


def _busy_bound(events: Events) -> int:
    """A lower bound of the estimate's cycles: the MAC array and the vector unit each run
    their events one after the other (estimate.py pipeline), so the layer takes at least
    either's total."""
    busy = dict.fromkeys((Unit.MAC, Unit.VEC), 0)
    for event in events.events:
        if event.unit in busy:
            busy[event.unit] += event.cycles
    return max(busy.values())


def _least_traffic(scored: list[tuple[int, int, Choice]]) -> Choice:
    """The choice moving the fewest bytes among those within TRAFFIC_SLACK of the fastest
    (ties: the faster, then the first): a tile that re-reads its input for a cycle or two
    in a hundred is not worth the traffic."""
    fastest = min(cycles for cycles, _, _ in scored)
    near = [s for s in scored if s[0] <= fastest * (1 + TRAFFIC_SLACK)]
    return min(near, key=lambda s: (s[1], s[0]))[2]


def min_mac_bytes(
    op: vops.Conv | vops.Dense, ctx: Context, shape: MacShape | None = None, gather=None
) -> int:
    """One output row, one array-wide chunk of channels and of input channels; with
    `gather`, its tile of the input band (tile_staged.min_staged_bytes passes its own)."""
    shape = shape or shape_of(op, ctx)
    hw = ctx.hw
    if shape.groups == 1:
        choice = Choice(1, min(shape.cout, hw.mac_cols), min(shape.cin, hw.mac_rows), False, "rows")
    else:
        unit = max(1, min(shape.groups, hw.mac_rows // shape.cin_g, hw.mac_cols // max(shape.cout_g, 1)))
        choice = Choice(1, min(unit, shape.groups), shape.cin, False, "rows")
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    return working_set(list(_buffers(shape, choice, ctx, x_dram, y_dram, 2, gather).values()))


def _tiles(shape: MacShape, choice: Choice, parts: tuple[Chunk, ...]):
    band_list = bands(shape.oh, choice.band)
    if choice.order == "rows":
        return [(n, b, j) for n in range(shape.n) for b in band_list for j in range(len(parts))]
    return [(n, b, j) for j in range(len(parts)) for n in range(shape.n) for b in band_list]


def build_mac(op: vops.Conv | vops.Dense, ctx: Context, shape: MacShape, choice: Choice, gather=None):
    """The plan and events of one choice; the weight blob in the plan."""
    mode = ctx.target.numerics.requant
    x_view, y_view = ctx.view(op.inputs[0]), ctx.view(op.output)
    if isinstance(op, vops.Dense):  # its M rows are the pixels of the view, in order
        x_view, y_view = rows_view(x_view), rows_view(y_view)
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    tiled = x_dram or gather is not None  # the conv reads a tile of the input band
    parts = chunks(shape, choice)
    tile_list = _tiles(shape, choice, parts)
    bufs = _buffers(shape, choice, ctx, x_dram, y_dram, len(tile_list), gather)
    blob_name = f"blob{ctx.index}.weights"
    pieces = layer_pieces(op, shape, ctx)
    blocks, blob = _pack(op, shape, parts, mode, blob_name, pieces, ctx.hw.vector_lanes)
    plan = OpPlan(op, ctx.index, list(bufs.values()), choice=_describe(choice, shape, parts), blob=blob)
    plan.macs = shape.n * shape.oh * shape.ow * shape.cout * shape.kernel[0] * shape.kernel[1] * shape.cin_g
    ev = Events(ctx)
    w_buf = bufs["w"]
    if choice.whole:
        total = sum(b[2] for b in blocks.values())
        ev.add(
            "weights",
            [transfer.contiguous(Opcode.LOAD, Addr(blob_name), Addr(w_buf.name), total)],
            -1.5,
            writes=[(w_buf.name, 0)],
        )
    step, current_in, current_w = 0, None, None
    in_slot = w_slot = 0
    kh, sh, dh = shape.kernel[0], shape.strides[0], shape.dilation[0]
    for n, (r0, r1), j in tile_list:
        chunk = parts[j]
        i0, i1, _, _ = halo((r0, r1), shape.h, kh, sh, dh, shape.pads[0])
        acc_slot = ev.slot(bufs["acc"])
        acc = Addr(bufs["acc"].name, 0, acc_slot)
        for k, (c0, c1) in enumerate(chunk.steps):
            last = k == len(chunk.steps) - 1
            reads, tensors = [], []
            if tiled:
                want = (n, i0, i1) if gather is not None else (n, i0, i1, c0, c1)  # a gather: all channels
                if want != current_in:
                    in_slot = ev.slot(bufs["in"])
                    tile = Addr(bufs["in"].name, 0, in_slot)
                    if gather is not None:
                        gather(ev, n, (i0, i1), tile, step - 1)
                    else:
                        specs = transfer.band(Opcode.LOAD, x_view, n, (i0, i1), (c0, c1), tile)
                        ev.add("load", specs, step - 1, writes=[(tile.base, in_slot)], tensors=[op.inputs[0]])
                    current_in = want
                src = Addr(bufs["in"].name, 0, in_slot) + (c0 if gather is not None else 0)
                strides = gather.in_place if gather is not None else (0, 0)  # (pixel, row) bytes
                reads.append((bufs["in"].name, in_slot))
            else:
                src = ctx.storage_addr(x_view, x_view.pixel_offset(n, i0) - x_view.offset + c0)
                strides = (x_view.pixel_stride if x_view.pixel_stride != c1 - c0 else 0, 0)
                tensors.append(op.inputs[0])
            offset, _, block_bytes, bias_at, params_at, piece_at = blocks[(j, k)]
            if choice.whole:
                weights = Addr(w_buf.name, offset)
                reads.append((w_buf.name, 0))
            else:
                if current_w != (j, k):
                    w_slot = ev.slot(w_buf)
                    load = transfer.contiguous(
                        Opcode.LOAD, Addr(blob_name, offset), Addr(w_buf.name, 0, w_slot), block_bytes
                    )
                    ev.add("weights", [load], step - 1.5, writes=[(w_buf.name, w_slot)])
                    current_w = (j, k)
                weights = Addr(w_buf.name, 0, w_slot)
                reads.append((w_buf.name, w_slot))
            for p, piece in enumerate(pieces):
                for (u0, u1), opcode, acc_key in unit_rows((r0, r1), choice.vector, bufs["acc"].name):
                    rows = (max(u0, piece.out[0]), min(u1, piece.out[1]))
                    if rows[0] >= rows[1]:
                        continue  # these kernel rows read only padding for this band
                    fields = _conv_fields(op, shape, pieces, p, rows, (c0, c1), chunk, src, strides,
                                          i0, n, tiled, x_view)  # fmt: skip
                    fields.update(
                        opcode=opcode,
                        weights=weights + piece_at[p],
                        dst=acc + (rows[0] - r0) * shape.ow * (chunk.out[1] - chunk.out[0]) * 4,
                        with_bias=int(last and p == 0),
                        accumulate=int(k > 0 or p > 0),
                    )
                    if last and p == 0:
                        fields["bias"] = weights + bias_at
                    accumulated = [(acc_key, acc_slot)] if k or p else []
                    ev.add(
                        "compute",
                        [Spec(Conv, fields)],
                        step,
                        reads=reads + accumulated,
                        writes=[(acc_key, acc_slot)],
                        tensors=tensors,
                    )
                    step += 1
        params = weights + params_at
        _requant(
            ev,
            op,
            bufs,
            acc_slot,
            params,
            y_view,
            y_dram,
            n,
            (r0, r1),
            chunk.out,
            shape,
            step - 1,
            (w_buf.name, 0 if choice.whole else w_slot),
            ctx.hw,
        )
    count_dram(plan, ev, ctx.hw)
    return plan, ev


def _requant(ev, op, bufs, acc_slot, params, y_view, y_dram, n, rows, out, shape, step, w_key, hw) -> None:
    (r0, r1), (o0, o1) = rows, out
    channels = o1 - o0
    acc = bufs["acc"].name
    reads = [(acc, acc_slot), (acc + VECTOR_PART, acc_slot), w_key]
    requant = op.requant
    pixels = (r1 - r0) * shape.ow
    if y_dram or y_view.pixel_stride == channels:  # its pixels adjacent: a vector may hold several
        pixels, channels = packed_requant(pixels, channels, lane_pack(shape, channels, hw.vector_lanes))
    fields = dict(
        src=Addr(bufs["acc"].name, 0, acc_slot),
        params=params,
        pixels=pixels,
        channels=channels,
        dst_zp=requant.zero_point,
        clamp_min=requant.clamp[0],
        clamp_max=requant.clamp[1],
    )
    if y_dram:
        out_slot = ev.slot(bufs["out"])
        fields["dst"] = Addr(bufs["out"].name, 0, out_slot)
        ev.add(
            "vector", [Spec(Requant, fields)], step + 0.5, reads=reads, writes=[(bufs["out"].name, out_slot)]
        )
        specs = transfer.band(
            Opcode.STORE, y_view, n, (r0, r1), (o0, o1), Addr(bufs["out"].name, 0, out_slot)
        )
        ev.add("store", specs, step + STORE_KEY, reads=[(bufs["out"].name, out_slot)])
    else:
        fields["dst"] = Addr(y_view.storage, y_view.pixel_offset(n, r0) + o0)
        if y_view.pixel_stride != o1 - o0:
            fields["dst_stride"] = y_view.pixel_stride
        ev.add("vector", [Spec(Requant, fields)], step + 0.5, reads=reads)


# The estimate's name for the accumulator rows the vector unit writes: the MAC array's and the
# vector unit's parts of one tile are disjoint bytes (the emitted tokens see that by their
# footprints), so neither waits for the other; the requantisation reads both.
VECTOR_PART = "/vector"


def unit_rows(rows: tuple[int, int], vector: tuple[int, int], acc: str):
    """The output rows of a tile each unit computes, with its opcode and its accumulators'
    name for the estimate: the last v/p of them (rounded) on the vector unit (vconv), the
    rest on the MAC array."""
    r0, r1 = rows
    v, p = vector
    rm = r1 - round((r1 - r0) * v / p)
    parts = (((r0, rm), Opcode.CONV, acc), ((rm, r1), Opcode.VCONV, acc + VECTOR_PART))
    return [part for part in parts if part[0][0] < part[0][1]]


def _conv_fields(op, shape: MacShape, pieces, p: int, rows, cin, chunk: Chunk, src, strides, i0, n,
                 tiled: bool, x_view: View) -> dict:  # fmt: skip
    """The fields of one conv instruction: kernel rows pieces[p] over output `rows` of input
    channels `cin`, reading from `src` (the tile's first input row i0) with `strides` =
    (src_stride, src_row_stride), 0 for dense; its geometry is mac_shape.piece_geometry's."""
    c0, c1 = cin
    p0, first, geometry = piece_geometry(shape, pieces[p], rows)
    if tiled:
        pixel, row = strides[0] or c1 - c0, strides[1] or shape.w * (c1 - c0)
        piece_src = src + (p0 - i0) * row
    else:
        pixel, row = x_view.pixel_stride, shape.w * x_view.pixel_stride
        piece_src = src + (x_view.pixel_offset(n, p0) - x_view.pixel_offset(n, i0))
    if pieces[p].cols is not None:  # kernel columns: the input cropped to the columns they read
        piece_src = piece_src + first * pixel
        strides = (strides[0] if tiled else pixel, row)
    return dict(
        src=piece_src,
        in_c=c1 - c0,
        out_c=chunk.out[1] - chunk.out[0],
        groups=chunk.groups,
        src_zp=op.in_q[0].zero_point,
        src_stride=strides[0],
        src_row_stride=strides[1],
        **geometry,
    )
