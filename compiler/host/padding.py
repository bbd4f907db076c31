"""Padded copies in the default schedules (compiler/host/defaults.py): a padding block
written as zeros then an in-bound copy where its padded row vectorises narrowly.

    pad[.., h, w] = x[.., h - 1, w - 1] if in bounds else 0       (one block, W + 2 wide)
      ->  pad[..] = 0                      every element, one flat loop of full vectors
          pad[.., h + 1, w + 1] = x[.., h, w]     the copy, vectorised along W

A conv's padded input is the kernel's own buffer (TVM's legalised conv2d copies it through
`pad_temp`); defaults.py schedules it at the root of a serial kernel, or inside each
chunk of a parallel one (over the rows that chunk reads).
"""

from __future__ import annotations

from tvm import s_tir, tirx

# How much wider the in-bound row's vectors must be than the padded row's for the two blocks
# to pay: 34 floats (2 lanes) against 32 (16 lanes) do; 18 (9 lanes) against 16 do not
# (resnet_mini's paddings alone: 16x34x34 6.9 -> 1.9 us; 32x18x18 0.73 -> 1.00 us).
MIN_LANE_GAIN = 4
SCHEDULE_ERRORS = (RuntimeError, ValueError)  # what a schedule primitive raises when it refuses


def decompose_narrow_padding(sch: s_tir.Schedule, block, vector_lanes: int) -> None:
    """If `block` is a padding whose padded row gets at most 1/MIN_LANE_GAIN of the lanes the
    in-bound row would (`vector_lanes` float32 lanes per register), split it with TVM's
    decompose_padding and vectorise the zero fill; the copy (still `block`) is left to the
    caller's vectorising of its innermost loop. Anything else is left as it is."""
    stmt = sch.get(block)
    own = sch.get_loops(block)[-len(stmt.iter_vars) :]
    if len(stmt.reads) != 1 or not stmt.reads[0].source.shape:
        return
    inbound = stmt.reads[0].source.shape[-1]
    if not isinstance(inbound, tirx.IntImm):
        return
    padded_lanes = _largest_divisor(int(sch.get(own[-1]).extent), vector_lanes)
    if padded_lanes * MIN_LANE_GAIN > _largest_divisor(int(inbound), vector_lanes):
        return
    try:
        if not sch.can_decompose_padding(block, own[0]):
            return
        fill = sch.decompose_padding(block, own[0])
    except SCHEDULE_ERRORS:
        return
    fill_loops = sch.get_loops(fill)[-len(own) :]
    fused = sch.fuse(*fill_loops) if len(fill_loops) > 1 else fill_loops[0]
    lanes = _largest_divisor(int(sch.get(fused).extent), vector_lanes)
    if lanes > 1:
        _, inner = sch.split(fused, [None, lanes])
        sch.vectorize(inner)


def _largest_divisor(extent: int, limit: int) -> int:
    return max(d for d in range(1, min(extent, limit) + 1) if extent % d == 0)
