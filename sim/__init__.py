"""The VPU simulator: ISA, functional int8 semantics, timing model, statistics and traces.

Imports only `vpuc.targets`, where the ISA it executes is defined (vpuc.targets.isa: the
formats, the program container, the assembly and each instruction's cost; the names are
re-exported here for convenience). The compiler never imports this package; the runtime
runs every VPU call here:

    from vpuc.sim import Program, Simulator
    result = Simulator(target).run(Program.from_bytes(blob), dram_image)
    result.stats.to_json(); result.dram; vpuc.sim.trace.to_chrome_trace(result)

Map: machine.py/memory.py (state, plans) -> dma.py, mac.py, vector.py, pool.py (each
opcode's checks and arithmetic, with its cost from targets/isa/cost.py; ops.py is the
dispatch table) -> timing.py (schedule), hazards.py (race check) -> simulator.py (the
run) -> stats.py, trace.py. reference.py is the plain-numpy definition every operation is tested against.
"""

from vpuc.sim.errors import AsmError, DecodeError, IsaError, SimError, VpuError
from vpuc.sim.simulator import DEFAULT_DRAM_BYTES, SimResult, Simulator
from vpuc.sim.stats import LayerStats, SimStats, UnitStats
from vpuc.sim.trace import to_chrome_trace, write_chrome_trace
from vpuc.targets.isa import (
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
    Mul,
    Opcode,
    Program,
    Requant,
    Unit,
    assemble,
    decode,
    disassemble,
    encode,
    format_instruction,
    read_program,
)

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
    "Mul",
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
