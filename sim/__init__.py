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

import importlib

# the names load on first use (PEP 562): `vpuc --help` imports sim/commands.py without the simulator
_EXPORTS = {
    "AsmError": "vpuc.sim.errors",
    "DecodeError": "vpuc.sim.errors",
    "IsaError": "vpuc.sim.errors",
    "SimError": "vpuc.sim.errors",
    "VpuError": "vpuc.sim.errors",
    "DEFAULT_DRAM_BYTES": "vpuc.sim.simulator",
    "Probe": "vpuc.sim.simulator",
    "SimResult": "vpuc.sim.simulator",
    "Simulator": "vpuc.sim.simulator",
    "LayerStats": "vpuc.sim.stats",
    "SimStats": "vpuc.sim.stats",
    "UnitStats": "vpuc.sim.stats",
    "to_chrome_trace": "vpuc.sim.trace",
    "write_chrome_trace": "vpuc.sim.trace",
    "Add": "vpuc.targets.isa",
    "AvgPool": "vpuc.targets.isa",
    "Clip": "vpuc.targets.isa",
    "Conv": "vpuc.targets.isa",
    "Dma": "vpuc.targets.isa",
    "End": "vpuc.targets.isa",
    "Instruction": "vpuc.targets.isa",
    "Lut": "vpuc.targets.isa",
    "Softmax": "vpuc.targets.isa",
    "Matmul": "vpuc.targets.isa",
    "MaxPool": "vpuc.targets.isa",
    "Mul": "vpuc.targets.isa",
    "Opcode": "vpuc.targets.isa",
    "Program": "vpuc.targets.isa",
    "Requant": "vpuc.targets.isa",
    "Unit": "vpuc.targets.isa",
    "assemble": "vpuc.targets.isa",
    "decode": "vpuc.targets.isa",
    "disassemble": "vpuc.targets.isa",
    "encode": "vpuc.targets.isa",
    "format_instruction": "vpuc.targets.isa",
    "read_program": "vpuc.targets.isa",
}


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value


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
    "Softmax",
    "Matmul",
    "MaxPool",
    "Mul",
    "Opcode",
    "Probe",
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
