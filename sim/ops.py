"""The dispatch table: every opcode's plan (checks, cost, bytes touched) and run (arithmetic).

The simulator looks instructions up here and nowhere else; each unit's semantics live in
its own module: dma.py, mac.py, vector.py, pool.py, softmax.py.
"""

from __future__ import annotations

from vpuc.sim import dma, mac, pool, softmax, vector
from vpuc.sim.machine import OpHandler, Plan, State
from vpuc.targets.isa.formats import End, Opcode, Unit


def plan_end(instruction: End, state: State) -> Plan:
    """END does no work: it completes when every unit has drained."""
    return Plan(Unit.CTRL, 0)


def run_end(instruction: End, state: State) -> None:
    return None


OPS: dict[Opcode, OpHandler] = {
    Opcode.LOAD: OpHandler(dma.plan_dma, dma.run_load),
    Opcode.STORE: OpHandler(dma.plan_dma, dma.run_store),
    Opcode.CONV: OpHandler(mac.plan_conv, mac.run_conv),
    Opcode.MATMUL: OpHandler(mac.plan_matmul, mac.run_matmul),
    Opcode.REQUANT: OpHandler(vector.plan_requant, vector.run_requant),
    Opcode.ADD: OpHandler(vector.plan_add, vector.run_add),
    Opcode.MUL: OpHandler(vector.plan_mul, vector.run_mul),
    Opcode.CLIP: OpHandler(vector.plan_clip, vector.run_clip),
    Opcode.LUT: OpHandler(vector.plan_lut, vector.run_lut),
    Opcode.SOFTMAX: OpHandler(softmax.plan_softmax, softmax.run_softmax),
    Opcode.MAXPOOL: OpHandler(pool.plan_pool, pool.run_maxpool),
    Opcode.AVGPOOL: OpHandler(pool.plan_pool, pool.run_avgpool),
    Opcode.VCONV: OpHandler(mac.plan_vconv, mac.run_conv),
    Opcode.END: OpHandler(plan_end, run_end),
}
