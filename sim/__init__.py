"""The VPU simulator: ISA, functional int8 semantics, timing model, statistics and traces.

Imports only `vpuc.targets`. The compiler never imports this package (it has its own cost
model); the runtime runs every VPU call here:

    from vpuc.sim import Program, Simulator
    result = Simulator(target).run(Program.from_bytes(blob), dram_image)
    result.stats.to_json(); result.dram; vpuc.sim.trace.to_chrome_trace(result)

Map: isa.py (opcodes, formats, encoding) -> program.py (binary container) and asm.py
(text) -> machine.py/memory.py (state, plans) -> dma.py, mac.py, vector.py, pool.py
(each opcode's checks, cost and arithmetic; ops.py is the dispatch table) ->
timing.py (schedule), hazards.py (race check) -> simulator.py (the run) -> stats.py,
trace.py. reference.py is the plain-numpy definition every operation is tested against.
"""

from vpuc.sim.asm import assemble, disassemble, format_instruction, read_program
from vpuc.sim.errors import AsmError, DecodeError, IsaError, SimError, VpuError
from vpuc.sim.isa import (
    Add,
    AvgPool,
    Clip,
    Conv,
    Dma,
    End,
    Instruction,
    Lut,
    Matmul,
    MaxPool,
    Opcode,
    Requant,
    Unit,
    decode,
    encode,
)
from vpuc.sim.program import Program
from vpuc.sim.simulator import DEFAULT_DRAM_BYTES, SimResult, Simulator
from vpuc.sim.stats import LayerStats, SimStats, UnitStats
from vpuc.sim.trace import to_chrome_trace, write_chrome_trace

__all__ = [
    "DEFAULT_DRAM_BYTES",
    "Add",
    "AsmError",
    "AvgPool",
    "Clip",
    "Conv",
    "DecodeError",
    "Dma",
    "End",
    "Instruction",
    "IsaError",
    "LayerStats",
    "Lut",
    "Matmul",
    "MaxPool",
    "Opcode",
    "Program",
    "Requant",
    "SimError",
    "SimResult",
    "SimStats",
    "Simulator",
    "Unit",
    "UnitStats",
    "VpuError",
    "assemble",
    "decode",
    "disassemble",
    "encode",
    "format_instruction",
    "read_program",
    "to_chrome_trace",
    "write_chrome_trace",
]
