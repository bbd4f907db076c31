"""The vector unit's softmax: one instruction over rows of int8 logits (docs/softmax.md).

One of the operation modules gathered by ops.py. The arithmetic is numerics.softmax_rows;
reference.softmax defines it row by row. The table holds 256 int32 entries, the exps for
x - max = -255..0 scaled by 2^T; the run stops when a row's sum of exps does not fit int32
(the compiler picks T so that it does) or the table's last entry (exp 0) is not positive.
Cost (targets/isa/cost.py): three passes over the row's vectors and one reciprocal per row;
with softmax_passes_in = "dram" each pass's round trip through DRAM, its bytes counted too.
"""

from __future__ import annotations

import numpy as np

from vpuc.sim.errors import OpError
from vpuc.sim.machine import Plan, State, require, require_positive, touched
from vpuc.sim.numerics import INT32_MAX, softmax_rows
from vpuc.sim.vector import require_table
from vpuc.targets.isa.cost import instruction_cycles, softmax_round_trip_bytes
from vpuc.targets.isa.formats import Softmax, Unit
from vpuc.targets.isa.params import LUT_ENTRIES


def plan_softmax(instruction: Softmax, state: State) -> Plan:
    i = instruction
    require_table(state)
    require_positive(i, "rows", "depth", "shift")
    require(i.shift <= 63, "field 'shift' must be at most 63, got {}", i.shift)
    reads, writes = touched(i, state)
    dram = softmax_round_trip_bytes(state.hardware, i.rows * i.depth)  # its passes' round trips
    return Plan(
        Unit.VEC, instruction_cycles(i, state.hardware), reads=reads, writes=writes,
        dram_read_bytes=dram, dram_written_bytes=dram,
    )  # fmt: skip


def run_softmax(instruction: Softmax, state: State) -> None:
    i = instruction
    x = state.sram.view(i.src, (i.rows, i.depth), np.int8)
    table = state.sram.view(i.table, (LUT_ENTRIES,), np.int32)
    if table[-1] <= 0 or np.any(table < 0):
        raise OpError("softmax table: entries must be >= 0 and the last (exp 0) > 0")
    worst = int(table.max()) * i.depth  # the largest sum a row can reach
    if worst > INT32_MAX:
        raise OpError(f"softmax: a row's sum of exps can reach {worst}, beyond int32 (max entry * depth)")
    y = softmax_rows(x, table, i.multiplier, i.shift, i.dst_zp)
    state.sram.view(i.dst, (i.rows, i.depth), np.int8)[...] = y
