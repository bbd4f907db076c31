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
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import transfer
from vpuc.compiler.lower.codegen.kernel_split import Piece
from vpuc.compiler.lower.codegen.mac_shape import (
    _block_bytes,
    _buffers,
    _choices,
    chunks,
    fitting,
    lane_pack,
    layer_pieces,
    packed_requant,
    piece_geometry,
    rows_view,
    streams_weights,
    tile_count,
)
from vpuc.compiler.lower.codegen.plan import Addr, Spec
from vpuc.compiler.lower.codegen.residency import aligned
from vpuc.compiler.lower.codegen.tiling import (
    UNIT_OF_OPCODE,
    Context,
    Events,
    bands,
    halo,
    spec_cycles,
    spec_transfers,
)
from vpuc.targets.isa.cost import issue_overlap, wait_overlap
from vpuc.targets.isa.formats import Conv, Opcode, Requant, Unit


def least_bound(op, ctx: Context, shape, gather=None) -> int | None:
    """The least busy_bound of the choices tile_mac._search may take for `op` with `shape`
    (and `gather`), in every group of input-channel steps: the search takes one of the
    first group that has any fitting, and a smaller budget (emit.py's later attempts) only
    narrows each group, so whatever it takes estimates at least this. None when nothing
    fits (the search raises)."""
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    groups = _choices(shape, ctx)
    least, pieces, memo = None, None, {}
    for group in groups[:1] if gather else groups:
        for _, choice in fitting(shape, ctx, group, x_dram, y_dram, gather):
            if pieces is None:
                pieces = layer_pieces(op, shape, ctx)
            bound = busy_bound(op, ctx, shape, choice, pieces, gather, memo)
            least = bound if least is None else min(least, bound)
    return least


def busy_bound(op, ctx: Context, shape, choice, pieces: list[Piece], gather=None, memo=None) -> int:
    """events_bound of the events build_mac(op, ctx, shape, choice, gather) would
    give, in cycles: max(the MAC array's time, the vector unit's total), the MAC array's
    time its total with what must come before its first instruction and after its last
    (mac_ends). `pieces`: the conv's sub-kernels (pieces_of). `memo` (a dict, one per
    search) keeps each distinct instruction's, band's and (band, chunk, step, split)'s
    cycles: choices differing only in weight residency or loop order issue the same MAC
    and vector instructions (their DMA work differs, and a gather's follows the order)."""
    memo = {} if memo is None else memo
    work = ("work", choice.band, choice.chunk, choice.cin, choice.vector, choice.lead)
    if work not in memo:
        memo[work] = _work(op, ctx, shape, choice, pieces, memo)
    mac, vec, mac_bands = memo[work]
    busy = {Unit.MAC: mac, Unit.VEC: vec}
    parts = chunks(shape, choice)
    if gather is not None:
        _gathered(ctx, shape, choice, parts, gather, busy, memo)
    if busy[Unit.MAC]:
        busy[Unit.MAC] += sum(mac_ends(op, ctx, shape, choice, parts, mac_bands, gather, memo))
    return max(busy.values())


def _work(op, ctx: Context, shape, choice, pieces: list[Piece], memo: dict) -> tuple[int, int, frozenset]:
    """(MAC array total, vector unit total, the bands with MAC instructions) of the layer's
    conv, vconv and requantisation instructions."""
    from vpuc.compiler.lower.codegen.tile_mac import unit_rows  # (tile_mac imports this module)

    busy = {Unit.MAC: 0, Unit.VEC: 0}
    mac_bands = set()
    # chunks alike in output width, groups and input steps issue the same instructions
    kinds = Counter(
        (c.out[1] - c.out[0], c.groups, tuple(s1 - s0 for s0, s1 in c.steps)) for c in chunks(shape, choice)
    )
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
                        unit = UNIT_OF_OPCODE.get(opcode, Unit.VEC)
                        busy[unit] += count * shape.n * memo[key]
                        if unit == Unit.MAC:
                            mac_bands.add((r0, r1))
            key = ("requant", (r1 - r0) * shape.ow, width)
            if key not in memo:
                memo[key] = _requant_cycles(ctx, shape, key[1], width)
            busy[Unit.VEC] += count * shape.n * memo[key]
    return busy[Unit.MAC], busy[Unit.VEC], frozenset(mac_bands)


def mac_ends(
    op, ctx: Context, shape, choice, parts, mac_bands: frozenset, gather, memo: dict
) -> tuple[int, int]:
    """(head, tail): the MAC array's first instruction waits for its weights and input band
    (each transfer at least its own cycles after the layer's start), its last is followed by
    its tile's requantisation and, for an output in DRAM, that tile's store; each may issue
    issue_overlap cycles before what it waits for ends, the MAC wait_overlap (its first
    weight load too, with mac_load_order = "before_wait": estimate.pipeline). In either loop
    order the first tile with MAC work is image 0's first such band in chunk 0, the last
    the last image's last such band in the last chunk."""
    overlap = issue_overlap(ctx.hw)
    with_mac = [band for band in bands(shape.oh, choice.band) if band in mac_bands]
    chunk = parts[0]
    mode = ctx.target.numerics.requant
    if choice.whole:
        blocks = [(c, s, k == len(c.steps) - 1) for c in parts for k, s in enumerate(c.steps)]
    else:
        blocks = [(chunk, chunk.steps[0], len(chunk.steps) == 1)]
    w_bytes = sum(_block_bytes(shape, c, s, last, mode, ctx.hw.vector_lanes)[1] for c, s, last in blocks)
    if ("weights", w_bytes) not in memo:
        load = transfer.contiguous(Opcode.LOAD, Addr(f"blob{ctx.index}.weights"), Addr("w"), w_bytes)
        memo[("weights", w_bytes)] = _longest(ctx, [load])
    waits = [] if _weights_hidden(op, shape, choice, ctx, gather) else [memo[("weights", w_bytes)]]
    x_view, y_view = ctx.view(op.inputs[0]), ctx.view(op.output)
    if isinstance(op, vops.Dense):
        x_view, y_view = rows_view(x_view), rows_view(y_view)
    kernel, stride, dilation = shape.kernel[0], shape.strides[0], shape.dilation[0]
    i0, i1, _, _ = halo(with_mac[0], shape.h, kernel, stride, dilation, shape.pads[0])
    if gather is not None:
        waits.append(memo[("gather", 0, i0, i1)][None])
    elif ctx.in_dram(op.inputs[0]):
        key = ("load", i0, i1, chunk.steps[0])
        if key not in memo:
            memo[key] = _longest(
                ctx, transfer.band(Opcode.LOAD, x_view, 0, (i0, i1), chunk.steps[0], Addr("in"))
            )
        waits.append(memo[key])
    head = max(0, max(waits, default=0) - wait_overlap(ctx.hw, Unit.MAC))
    (r0, r1), (o0, o1) = with_mac[-1], parts[-1].out
    tail = memo[("requant", (r1 - r0) * shape.ow, o1 - o0)] - overlap
    if ctx.in_dram(op.output):
        key = ("store", r0, r1, o0, o1)
        if key not in memo:
            band = transfer.band(Opcode.STORE, y_view, shape.n - 1, (r0, r1), (o0, o1), Addr("out"))
            memo[key] = _longest(ctx, band)
        tail += memo[key] - overlap
    return head, tail


def _weights_hidden(op, shape, choice, ctx: Context, gather) -> bool:
    """Whether ranked leaves the candidate's first weight load out: hides_weights of its
    buffers as build_mac makes them."""
    if not RANK_HIDDEN or not ctx.prefetch_rooms:
        return False
    x_dram, y_dram = ctx.in_dram(op.inputs[0]), ctx.in_dram(op.output)
    buffers = _buffers(shape, choice, ctx, x_dram, y_dram, tile_count(shape, choice), gather)
    return hides_weights(buffers.values(), ctx)


def _requant_cycles(ctx: Context, shape, pixels: int, width: int) -> int:
    """One tile's requantisation, its pixels packed into the lanes as build_mac packs them
    when they are adjacent (mac_shape.lane_pack; when not, it costs more: still a bound)."""
    pixels, channels = packed_requant(pixels, width, lane_pack(shape, width, ctx.hw.vector_lanes))
    fields = dict(src=Addr("acc"), params=Addr("w"), dst=Addr("out"), pixels=pixels, channels=channels)
    return spec_cycles(Spec(Requant, fields), ctx.target)


def _longest(ctx: Context, specs) -> int:
    """The least cycles a DMA event of these transfers takes: its longest transfer's."""
    return max(spec_cycles(spec, ctx.target) for spec in specs)


def _conv_cycles(op, ctx: Context, shape, piece: Piece, opcode, geometry) -> int:
    """The cycles of one conv or vconv instruction of build_mac (mac_shape.piece_geometry;
    addresses, strides and zero point do not change an instruction's cost)."""
    rows, cin, width, groups, _, accumulate, bias = geometry
    _, _, fields = piece_geometry(shape, piece, rows)
    fields.update(
        opcode=opcode,
        src=Addr("in"),
        weights=Addr("w"),
        dst=Addr("acc"),
        in_c=cin,
        out_c=width,
        groups=groups,
        src_zp=op.in_q[0].zero_point,
        with_bias=bias,
        accumulate=accumulate,
    )
    return spec_cycles(Spec(Conv, fields), ctx.target)


def _gathered(ctx: Context, shape, choice, parts, gather, busy: dict, memo: dict) -> None:
    """Add a gather's MAC and vector work: build_mac calls it once per input band that
    differs from the one before (in the candidate's loop order), never split by channel."""
    kh, sh, dh = shape.kernel[0], shape.strides[0], shape.dilation[0]
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
            found = {unit: sum(e.cycles for e in ev.events if e.unit == unit) for unit in busy}
            last = ev.events[-1]  # what writes the tile last, that the conv waits for
            found[None] = _longest(ctx, last.specs) if last.unit == Unit.DMA else last.cycles
            memo[key] = found
        for unit in busy:
            busy[unit] += memo[key][unit]


# Whether the search ranks a candidate without a first weight load an earlier layer hides
# (ranked); off, with it: the tilings chosen before issue 21's stage-3/4 change.
RANK_HIDDEN = True


@contextmanager
def ranking_hidden(on: bool) -> Iterator[None]:
    """RANK_HIDDEN set to `on` while it lasts (emit.lower_subgraph plans both ways)."""
    global RANK_HIDDEN
    saved, RANK_HIDDEN = RANK_HIDDEN, on
    try:
        yield
    finally:
        RANK_HIDDEN = saved


def ranked(events: Events, plan) -> Events:
    """The events a candidate is ranked by: without the first load into its weight buffer
    when that buffer is live from an earlier layer (tiling.buffer found it room there), as
    prefetch.py may then hoist that load under the earlier layers' compute. Ranked with it,
    a layer alone paid its whole weights' load before its first MAC, and a tiling whose
    first block is smaller won by that head alone where the load was hidden: tinyconv's
    last two convs on `vpu` took two 16-channel chunks, whose last chunk's requantisation
    the next layer waits for, over all 32 channels at once in one instruction, 50 cycles
    fewer on the MAC array. Whether it is hidden only the program's estimate can say:
    emit.lower_subgraph plans both ways and keeps the faster program."""
    if not RANK_HIDDEN or not hides_weights(plan.buffers, events.ctx):
        return events
    name = f"L{events.ctx.index}.w"
    loads = [i for i, e in enumerate(events.events) if e.what == "weights" and (name, 0) in e.writes]
    if not loads:
        return events
    return Events(events.ctx, events.events[: loads[0]] + events.events[loads[0] + 1 :])


def hides_weights(buffers, ctx: Context) -> bool:
    """Whether the weight buffer (role "w") among `buffers` is live from an earlier layer."""
    name = f"L{ctx.index}.w"
    return any(b.name == name and b.first < ctx.index for b in buffers)


def hiding_key(shape, ctx: Context) -> tuple:
    """What decides whether a candidate's first weight load is ranked (ranked), for the
    search's memo: the nearest prefetch room's bytes (tiling.buffer), up to the largest
    weight buffer of any candidate (from there on every one fits: the same ranking)."""
    if "w" not in ctx.prefetch_roles or not ctx.prefetch_rooms or not RANK_HIDDEN:
        return ()
    return (min(ctx.prefetch_rooms[0][1], _largest_weights(shape, ctx)),)


_LARGEST: dict[tuple, int] = {}


def _largest_weights(shape, ctx: Context) -> int:
    """The bytes of the largest weight buffer of the layer's candidates (_buffers' "w")."""
    mode, lanes = ctx.target.numerics.requant, ctx.hw.vector_lanes
    key = (shape, ctx.hw, mode, streams_weights(shape, ctx))
    if key not in _LARGEST:
        largest = 0
        alike = {replace(c, band=1, order="rows", vector=(0, 1)) for g in _choices(shape, ctx) for c in g}
        for choice in alike:  # (the weight buffer reads neither band, order nor vector share)
            parts = chunks(shape, choice)
            blocks = [
                _block_bytes(shape, c, s, k == len(c.steps) - 1, mode, lanes)[1]
                for c in parts
                for k, s in enumerate(c.steps)
            ]
            slots = 1 if choice.whole or len(blocks) == 1 else 2
            largest = max(largest, aligned(sum(blocks) if choice.whole else max(blocks)) * slots)
        if len(_LARGEST) >= 4096:
            _LARGEST.clear()
        _LARGEST[key] = largest
    return _LARGEST[key]


def events_bound(events: Events) -> int:
    """The search's lower bound of a candidate's estimate (a fresh clock): _busy_bound, the
    MAC array's total with what must come before its first event (the events writing its
    weights and input, each at least its longest transfer's cycles) and after its last (the
    first event reading its accumulators, the requantisation, and the first reading what
    that writes, the store), each of which may issue issue_overlap cycles early, the MAC
    wait_overlap (estimate.pipeline). The search takes it from the shape (busy_bound), equal
    to this (tests/lower/test_mac_bound.py)."""
    busy = dict.fromkeys((Unit.MAC, Unit.VEC), 0)
    for event in events.events:
        if event.unit in busy:
            busy[event.unit] += event.cycles
    if busy[Unit.MAC]:
        busy[Unit.MAC] += sum(_events_ends(events))
    return max(busy.values())


def _events_ends(events: Events) -> tuple[int, int]:
    """(head, tail) of events_bound."""
    evs, target = events.events, events.ctx.target
    overlap = issue_overlap(target.hardware)

    def least(event) -> int:
        return max(c for _, c in spec_transfers(event, target)) if event.unit == Unit.DMA else event.cycles

    macs = [i for i, e in enumerate(evs) if e.unit == Unit.MAC]
    first, last = macs[0], macs[-1]
    writers = {}
    for event in evs[:first]:
        for key in event.writes:
            writers[key] = event
    loads = [writers[key] for key in evs[first].reads if key[0].endswith((".in", ".w")) and key in writers]
    head = max(0, max([least(e) for e in loads], default=0) - wait_overlap(target.hardware, Unit.MAC))
    after = [e for e in evs[last + 1 :] if set(e.reads) & set(evs[last].writes)]
    if not after:
        return head, 0
    requant = after[0]
    tail = requant.cycles - overlap
    stores = [e for e in evs[last + 1 :] if set(e.reads) & set(requant.writes)]
    if stores:
        tail += least(stores[0]) - overlap
    return head, tail
