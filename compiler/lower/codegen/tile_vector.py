"""Tiling of the vector unit's layers: max/average/global pooling, add, mul, lookup-table
activations, softmax and rescales (relu, clip, a requantising reshape).

A tile is (image, a band of output rows) with every channel. Operands come from their
resident SRAM (contiguous) or are loaded band by band from DRAM into a ring; outputs go to
their resident SRAM or through a staging ring to DRAM. A pooling band reads its halo. Small
operands (a lookup table, a channel vector broadcast by a mul) are loaded once. A softmax
row is a pixel's channels, so every band holds whole rows.

Rescale is `add` with a zero second term: y = clamp(rne(M (x - zx)) + zy); a relu that
keeps its input's quantisation is a `clip`.
"""

from __future__ import annotations

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import transfer
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.plan import Addr, OpPlan, Spec, View
from vpuc.compiler.lower.codegen.tiling import (
    STORE_KEY,
    Context,
    Events,
    band_options,
    bands,
    buffer,
    count_dram,
    halo,
    working_set,
)
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.cost import SOFTMAX_TABLE_BYTES
from vpuc.targets.isa.formats import Add, AvgPool, Clip, Lut, MaxPool, Mul, Opcode, Softmax
from vpuc.targets.isa.params import LUT_ENTRIES

MAX_WINDOW = 255  # kernel fields are 8-bit


def _geometry(op: vops.Op, ctx: Context):
    """(kernel, strides, padding) of the rows a band reads: a window for pools, 1x1 else."""
    if isinstance(op, vops.Pool):
        return op.kernel, op.strides, op.padding
    return (1, 1), (1, 1), (0, 0, 0, 0)


def _operands(op: vops.Op, ctx: Context) -> list[str]:
    """The inputs read band by band (a broadcast or constant second operand is apart)."""
    if isinstance(op, vops.Mul) and op.broadcast:
        return [op.inputs[0]]
    return list(op.inputs)


def _buffers(op: vops.Op, ctx: Context, band: int, tiles: int) -> dict:
    (kh, _), (sh, _), _ = _geometry(op, ctx)
    n, oh, ow, c = ctx.view(op.output).shape
    found = {}
    for i, name in enumerate(_operands(op, ctx)):
        if ctx.in_dram(name) or not ctx.view(name).contiguous:
            _, h, w, cin = ctx.view(name).shape
            rows = min(h, (band - 1) * sh + kh) if isinstance(op, vops.Pool) else band
            found[f"in{i}"] = buffer(ctx, f"in{i}", rows * w * cin, 2 if tiles > 1 else 1)
    if isinstance(op, vops.Mul) and op.broadcast and ctx.in_dram(op.inputs[1]):
        found["b"] = buffer(ctx, "b", c, 1)
    if isinstance(op, vops.Lut):
        found["table"] = buffer(ctx, "table", LUT_ENTRIES, 1, prefetch=True)
    if isinstance(op, vops.Softmax):
        found["table"] = buffer(ctx, "table", SOFTMAX_TABLE_BYTES, 1, prefetch=True)
    if ctx.in_dram(op.output) or not ctx.view(op.output).contiguous:
        found["out"] = buffer(ctx, "out", band * ow * c, 2 if tiles > 1 else 1)
    return found


def min_vector_bytes(op: vops.Op, ctx: Context) -> int:
    return working_set(list(_buffers(op, ctx, 1, 2).values()))


def fitting_bands(op: vops.Op, ctx: Context) -> list[int]:
    """The output rows a tile may take within ctx.budget (LowerError: a pooling window past
    the kernel fields)."""
    if isinstance(op, vops.Pool) and max(op.kernel) > MAX_WINDOW:
        raise LowerError(
            f"layer '{op.name}': a pooling window of {op.kernel[0]}x{op.kernel[1]} (at most {MAX_WINDOW})"
        )
    n, oh, _, _ = ctx.view(op.output).shape
    return [
        band
        for band in band_options(oh)
        if working_set(list(_buffers(op, ctx, band, n * -(-oh // band)).values())) <= ctx.budget
    ]


def plan_vector(op: vops.Op, ctx: Context, constants: dict) -> OpPlan:
    best = None
    for band in fitting_bands(op, ctx):
        plan, ev = _build(op, ctx, band)
        cycles = ev.estimate(Clock())
        if best is None or cycles < best[0]:
            best = (cycles, band)
    if best is None:
        raise LowerError(f"layer '{op.name}': no tiling fits the {ctx.budget} bytes of SRAM left for it")
    plan, ev = _build(op, ctx, best[1])
    return ev.finish(plan)


def _build(op: vops.Op, ctx: Context, band: int):
    n, oh, ow, c = ctx.view(op.output).shape
    tiles = n * -(-oh // band)
    bufs = _buffers(op, ctx, band, tiles)
    plan = OpPlan(op, ctx.index, list(bufs.values()), choice={"rows_per_tile": min(band, oh)})
    ev = Events(ctx)
    fixed = _load_fixed(op, ctx, bufs, ev, plan)
    (kh, kw), (sh, sw), pads = _geometry(op, ctx)
    step = 0
    for image in range(n):
        for r0, r1 in bands(oh, band):
            sources, reads, tensors = [], [], []
            for i, name in enumerate(_operands(op, ctx)):
                view = ctx.view(name)
                i0, i1, pad_top, pad_bottom = halo((r0, r1), view.shape[1], kh, sh, 1, pads[0])
                if f"in{i}" in bufs:
                    buf = bufs[f"in{i}"]
                    slot = ev.slot(buf)
                    addr = Addr(buf.name, 0, slot)
                    specs = transfer.band(Opcode.LOAD, view, image, (i0, i1), (0, view.shape[3]), addr)
                    ev.add("load", specs, step - 1, writes=[(buf.name, slot)], tensors=[name])
                    reads.append((buf.name, slot))
                else:
                    addr = Addr(view.storage, view.pixel_offset(image, i0))
                    tensors.append(name)
                sources.append((addr, i1 - i0, pad_top, pad_bottom))
            y_view = ctx.view(op.output)
            if "out" in bufs:
                out_slot = ev.slot(bufs["out"])
                dst, writes = Addr(bufs["out"].name, 0, out_slot), [(bufs["out"].name, out_slot)]
            else:
                dst, writes = Addr(y_view.storage, y_view.pixel_offset(image, r0)), []
            specs = _compute(op, ctx, sources, fixed, dst, (r1 - r0) * ow, c)
            ev.add(
                "vector",
                specs,
                step,
                reads=reads + fixed.reads,
                writes=writes,
                tensors=tensors + fixed.tensors,
            )
            if "out" in bufs:
                store = transfer.band(Opcode.STORE, y_view, image, (r0, r1), (0, c), dst)
                ev.add("store", store, step + STORE_KEY, reads=[(bufs["out"].name, out_slot)])
            step += 1
    count_dram(plan, ev, ctx.hw)
    return plan, ev


class _Fixed:
    """Operands loaded once: a lookup table, a broadcast channel vector."""

    def __init__(self) -> None:
        self.table: Addr | None = None
        self.b: Addr | None = None
        self.reads: list = []
        self.tensors: list[str] = []


def _load_fixed(op: vops.Op, ctx: Context, bufs: dict, ev: Events, plan: OpPlan) -> _Fixed:
    fixed = _Fixed()
    if isinstance(op, vops.Lut | vops.Softmax):
        name = f"blob{ctx.index}.table"
        table = np.asarray(op.table, dtype=np.int8 if isinstance(op, vops.Lut) else "<i4").tobytes()
        plan.blob.append((name, table))
        fixed.table = Addr(bufs["table"].name)
        load = transfer.contiguous(Opcode.LOAD, Addr(name), fixed.table, len(table))
        ev.add("weights", [load], -1.5, writes=[(bufs["table"].name, 0)])
        fixed.reads.append((bufs["table"].name, 0))
    if isinstance(op, vops.Mul) and op.broadcast:
        view = ctx.view(op.inputs[1])
        if "b" in bufs:
            fixed.b = Addr(bufs["b"].name)
            load = transfer.contiguous(Opcode.LOAD, Addr(view.storage, view.offset), fixed.b, view.shape[3])
            ev.add("weights", [load], -1.5, writes=[(bufs["b"].name, 0)], tensors=[op.inputs[1]])
            fixed.reads.append((bufs["b"].name, 0))
        else:
            fixed.b = Addr(view.storage, view.offset)
            fixed.tensors.append(op.inputs[1])
    return fixed


def _compute(
    op: vops.Op, ctx: Context, sources, fixed: _Fixed, dst: Addr, pixels: int, channels: int
) -> list[Spec]:
    count = pixels * channels
    (a, in_rows, pad_top, pad_bottom), *rest = sources
    if isinstance(op, vops.Pool):
        return [_pool(op, ctx, a, in_rows, pad_top, pad_bottom, dst, channels)]
    x_q, y_q = op.in_q[0], op.out_q
    if isinstance(op, vops.Add):
        b = rest[0][0]
        return [
            Spec(
                Add,
                dict(
                    src_a=a,
                    src_b=b,
                    dst=dst,
                    count=count,
                    zp_a=x_q.zero_point,
                    zp_b=op.in_q[1].zero_point,
                    dst_zp=y_q.zero_point,
                    clamp_min=op.clamp[0],
                    clamp_max=op.clamp[1],
                    scale_a=op.scale_a,
                    scale_b=op.scale_b,
                ),
            )
        ]
    if isinstance(op, vops.Mul):
        b = fixed.b if op.broadcast else rest[0][0]
        return [
            Spec(
                Mul,
                dict(
                    src_a=a,
                    src_b=b,
                    dst=dst,
                    pixels=pixels,
                    channels=channels,
                    broadcast_b=int(op.broadcast),
                    zp_a=x_q.zero_point,
                    zp_b=op.in_q[1].zero_point,
                    dst_zp=y_q.zero_point,
                    clamp_min=op.clamp[0],
                    clamp_max=op.clamp[1],
                    scale=op.scale,
                ),
            )
        ]
    if isinstance(op, vops.Lut):
        return [Spec(Lut, dict(src=a, dst=dst, table=fixed.table, count=count))]
    if isinstance(op, vops.Softmax):
        fields = dict(src=a, dst=dst, table=fixed.table, rows=pixels, depth=channels, dst_zp=y_q.zero_point)
        return [Spec(Softmax, dict(fields, shift=op.shift, multiplier=op.multiplier))]
    if isinstance(op, vops.Rescale):
        if np.float32(op.multiplier) == np.float32(1.0) and x_q.zero_point == y_q.zero_point:
            return [
                Spec(Clip, dict(src=a, dst=dst, count=count, clamp_min=op.clamp[0], clamp_max=op.clamp[1]))
            ]
        return [
            Spec(
                Add,
                dict(
                    src_a=a,
                    src_b=a,
                    dst=dst,
                    count=count,
                    zp_a=x_q.zero_point,
                    zp_b=0,
                    dst_zp=y_q.zero_point,
                    clamp_min=op.clamp[0],
                    clamp_max=op.clamp[1],
                    scale_a=op.multiplier,
                    scale_b=0.0,
                ),
            )
        ]
    raise LowerError(f"layer '{op.name}': no vector lowering for {op.kind}")


def _pool(
    op: vops.Pool, ctx: Context, src: Addr, in_rows: int, pad_top: int, pad_bottom: int, dst: Addr, c: int
):
    _, _, w, _ = ctx.view(op.inputs[0]).shape
    fields = dict(
        src=src,
        dst=dst,
        in_h=in_rows,
        in_w=w,
        channels=c,
        kernel_h=op.kernel[0],
        kernel_w=op.kernel[1],
        stride_h=op.strides[0],
        stride_w=op.strides[1],
        pad_top=pad_top,
        pad_bottom=pad_bottom,
        pad_left=op.padding[1],
        pad_right=op.padding[3],
    )
    if op.mode == "max":
        return Spec(MaxPool, fields)
    fields.update(
        src_zp=op.in_q[0].zero_point,
        dst_zp=op.out_q.zero_point,
        clamp_min=op.clamp[0],
        clamp_max=op.clamp[1],
        count_include_pad=int(op.count_include_pad),
        scale=op.scale,
    )
    return Spec(AvgPool, fields)


def contiguous_view(view: View) -> bool:
    return view.contiguous
