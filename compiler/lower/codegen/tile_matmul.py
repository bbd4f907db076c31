"""Tiling of the matrix product of two activations (attention's Q x K^T and P x V): the
MAC array with the second operand streamed as weights. A tile is one batch and a band of
rows of the first operand; the second operand's [k, n] block of that batch is loaded once
per batch; the int32 accumulators are requantised into the output like a dense layer's.
"""

from __future__ import annotations

import math

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import transfer
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.mac_shape import rows_view
from vpuc.compiler.lower.codegen.plan import Addr, Buffer, OpPlan, Spec
from vpuc.compiler.lower.codegen.tiling import (
    STORE_KEY,
    Context,
    Events,
    band_options,
    bands,
    buffer,
    count_dram,
    working_set,
)
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets.isa.formats import Matmul, Opcode, Requant
from vpuc.targets.isa.params import pack_requant_params


def _matmul_dims(op: vops.Matmul, ctx: Context) -> tuple[int, int, int, int]:
    a = ctx.placement.subgraph.tensors[op.inputs[0]].shape
    b = ctx.placement.subgraph.tensors[op.inputs[1]].shape
    return math.prod(a[:-2]), a[-2], a[-1], b[-1]  # batch, m, k, n


def _matmul_buffers(op, ctx: Context, band: int) -> dict[str, Buffer]:
    batch, m, k, n = _matmul_dims(op, ctx)
    tiles = batch * -(-m // band)
    found = {"params": buffer(ctx, "params", 8, 1)}
    if ctx.in_dram(op.inputs[1]):
        found["b"] = buffer(ctx, "b", k * n, 2 if batch > 1 else 1)
    if ctx.in_dram(op.inputs[0]):
        found["in"] = buffer(ctx, "in", band * k, 2 if tiles > 1 else 1)
    found["acc"] = buffer(ctx, "acc", band * n * 4, 2 if tiles > 1 else 1)
    if ctx.in_dram(op.output):
        found["out"] = buffer(ctx, "out", band * n, 2 if tiles > 1 else 1)
    return found


def min_matmul_bytes(op: vops.Matmul, ctx: Context) -> int:
    return working_set(list(_matmul_buffers(op, ctx, 1).values()))


def plan_matmul(op: vops.Matmul, ctx: Context) -> OpPlan:
    batch, m, k, n = _matmul_dims(op, ctx)
    for view_name in (op.inputs[0], op.inputs[1]):
        if not ctx.view(view_name).contiguous:
            raise LowerError(f"layer '{op.name}': a matrix product of a strided tensor")
    best = None
    for band in band_options(m):
        bufs = _matmul_buffers(op, ctx, band)
        if working_set(list(bufs.values())) > ctx.budget:
            continue
        plan, ev = _build_matmul(op, ctx, band, bufs)
        cycles = ev.estimate(Clock())
        if best is None or cycles < best[0]:
            best = (cycles, band)
    if best is None:
        raise LowerError(f"layer '{op.name}': no tiling fits the {ctx.budget} bytes of SRAM left for it")
    plan, ev = _build_matmul(op, ctx, best[1], _matmul_buffers(op, ctx, best[1]))
    return ev.finish(plan)


def _build_matmul(op: vops.Matmul, ctx: Context, band: int, bufs: dict[str, Buffer]):
    batch, m, k, n = _matmul_dims(op, ctx)
    mode = ctx.target.numerics.requant
    # rows of m as rows of the view, as a dense layer's (without it a [1, 1, 3, 3] product,
    # x @ x^T, stored each band 3 times too wide: fuzzer case vpu-plus-796a28fb08)
    a_view, b_view, y_view = (rows_view(ctx.view(t)) for t in (*op.inputs, op.output))
    blob_name = f"blob{ctx.index}.params"
    params = pack_requant_params(mode, op.requant.multipliers[:1])
    plan = OpPlan(
        op, ctx.index, list(bufs.values()), choice={"rows_per_tile": band}, blob=[(blob_name, params)]
    )
    plan.macs = batch * m * k * n
    ev = Events(ctx)
    ev.add(
        "weights",
        [transfer.contiguous(Opcode.LOAD, Addr(blob_name), Addr(bufs["params"].name), len(params))],
        -1.5,
        writes=[(bufs["params"].name, 0)],
    )
    step = 0
    for bi in range(batch):
        if "b" in bufs:
            b_slot = ev.slot(bufs["b"])
            b_addr = Addr(bufs["b"].name, 0, b_slot)
            specs = [
                transfer.contiguous(
                    Opcode.LOAD, Addr(b_view.storage, b_view.offset + bi * k * n), b_addr, k * n
                )
            ]
            ev.add("weights", specs, step - 1, writes=[(bufs["b"].name, b_slot)], tensors=[op.inputs[1]])
            b_reads, b_tensors = [(bufs["b"].name, b_slot)], []
        else:
            b_addr = Addr(b_view.storage, b_view.offset + bi * k * n)
            b_reads, b_tensors = [], [op.inputs[1]]
        for r0, r1 in bands(m, band):
            acc_slot = ev.slot(bufs["acc"])
            reads, tensors = list(b_reads), list(b_tensors)
            if "in" in bufs:
                in_slot = ev.slot(bufs["in"])
                src = Addr(bufs["in"].name, 0, in_slot)
                specs = transfer.band(Opcode.LOAD, a_view, 0, (bi * m + r0, bi * m + r1), (0, k), src)
                ev.add("load", specs, step - 1, writes=[(bufs["in"].name, in_slot)], tensors=[op.inputs[0]])
                reads.append((bufs["in"].name, in_slot))
            else:
                src = Addr(a_view.storage, a_view.pixel_offset(0, bi * m + r0))
                tensors.append(op.inputs[0])
            fields = dict(
                src=src,
                weights=b_addr,
                dst=Addr(bufs["acc"].name, 0, acc_slot),
                m=r1 - r0,
                k=k,
                n=n,
                src_zp=op.in_q[0].zero_point,
                weights_kn=1,
                weights_zp=op.in_q[1].zero_point,
            )
            ev.add(
                "compute",
                [Spec(Matmul, fields)],
                step,
                reads=reads,
                writes=[(bufs["acc"].name, acc_slot)],
                tensors=tensors,
            )
            rows = (bi * m + r0, bi * m + r1)
            _requant_matmul(ev, op, bufs, acc_slot, Addr(bufs["params"].name), y_view, rows, n, step)
            step += 1
    count_dram(plan, ev, ctx.hw)
    return plan, ev


def _requant_matmul(ev, op, bufs, acc_slot, params, y_view, rows, n, step) -> None:
    r0, r1 = rows
    requant = op.requant
    fields = dict(
        src=Addr(bufs["acc"].name, 0, acc_slot),
        params=params,
        pixels=r1 - r0,
        channels=n,
        per_channel=0,
        dst_zp=requant.zero_point,
        clamp_min=requant.clamp[0],
        clamp_max=requant.clamp[1],
    )
    reads = [(bufs["acc"].name, acc_slot), (bufs["params"].name, 0)]
    if "out" in bufs:
        out_slot = ev.slot(bufs["out"])
        fields["dst"] = Addr(bufs["out"].name, 0, out_slot)
        ev.add(
            "vector", [Spec(Requant, fields)], step + 0.5, reads=reads, writes=[(bufs["out"].name, out_slot)]
        )
        specs = transfer.band(Opcode.STORE, y_view, 0, (r0, r1), (0, n), Addr(bufs["out"].name, 0, out_slot))
        ev.add("store", specs, step + STORE_KEY, reads=[(bufs["out"].name, out_slot)])
    else:
        fields["dst"] = Addr(y_view.storage, y_view.pixel_offset(0, r0))
        ev.add("vector", [Spec(Requant, fields)], step + 0.5, reads=reads)
