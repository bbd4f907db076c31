"""The simulator: checks a program, schedules it, runs its int8 arithmetic, reports statistics.

The entry point of vpuc.sim for the runtime and the CLI:

    result = Simulator(load_target("vpu")).run(program, dram_image)
    result.stats.total_cycles, result.stats.to_json(), result.dram (final DRAM bytes)

A run has four steps, each of which may stop with a SimError naming the pc and the
instruction: (1) the program's shape (END last, tokens one-to-one), (2) every
instruction's Plan (field checks, bounds, cost), (3) the schedule (timing.py; deadlocks)
and the race check (hazards.py), (4) the functional execution in program order (ops.py).
Nothing data-dependent decides timing, so (1)-(3) never touch memory contents.

`probes` copy bytes out of memory during step (4): a Probe (pc, memory, address, nbytes)
is taken right after the instruction at `pc` has run (pc -1: before the first), so a
tensor the program overwrites later is seen as it was then (`vpuc run --check` reads
every layer's inputs and output so, runtime/check.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from vpuc.sim.errors import OpError, SimError, VpuError
from vpuc.sim.hazards import check_races
from vpuc.sim.machine import Plan, State
from vpuc.sim.memory import Memory, as_byte_array
from vpuc.sim.ops import OPS
from vpuc.sim.stats import SimStats, collect_stats
from vpuc.sim.timing import Timeline, check_tokens, schedule
from vpuc.targets import Target
from vpuc.targets.isa.asm import format_instruction
from vpuc.targets.isa.formats import Instruction, Opcode
from vpuc.targets.isa.program import Program, as_program

DEFAULT_DRAM_BYTES = 64 << 20


class Probe(NamedTuple):
    """`nbytes` at `address` of `memory` ("sram" or "dram"), right after the instruction at
    `pc` has run (-1: before the program starts)."""

    pc: int
    memory: str
    address: int
    nbytes: int


@dataclass(frozen=True)
class SimResult:
    """One run: its statistics, its schedule, the final DRAM and SRAM bytes, and the bytes
    each probe took (uint8 arrays by Probe)."""

    target: Target
    program: Program
    plans: tuple[Plan, ...]
    timeline: Timeline
    stats: SimStats
    dram: np.ndarray
    sram: np.ndarray
    captures: dict[Probe, np.ndarray] = field(default_factory=dict)


class Simulator:
    """A VPU of `target`; DRAM holds `dram_bytes` (or the image given to `run`, if larger).

    `check_races=False` skips the race check (hazards.py) for programs known to be safe.
    """

    def __init__(
        self, target: Target, dram_bytes: int = DEFAULT_DRAM_BYTES, check_races: bool = True
    ) -> None:
        if target.hardware is None:
            raise VpuError(f"target '{target.name}' has no VPU (kind '{target.kind}')")
        self.target = target
        self.dram_bytes = dram_bytes
        self.check_races = check_races
        # The last program's static analysis (plans, schedule, race check): none of it reads
        # memory contents, so a program run again (every inference of a model) skips it.
        self._analysed: tuple[Program, int, tuple[Plan, ...], Timeline] | None = None

    def run(
        self,
        program: Program | Iterable[Instruction] | bytes,
        dram: np.ndarray | bytes | None = None,
        *,
        host_to_vpu_bytes: int = 0,
        vpu_to_host_bytes: int = 0,
        probes: Iterable[Probe] = (),
    ) -> SimResult:
        """Run `program` on a DRAM initialised from `dram` (bytes at address 0).

        The host byte counts are only accounted (stats.host_link_cycles); moving them is the
        runtime's business. The caller's `dram` is never modified: read `result.dram`.
        """
        program = as_program(program)
        state = self._fresh_state(dram)
        instructions = program.instructions
        plans, timeline = self._analyse(program, state)
        by_pc: dict[int, list[Probe]] = {}
        for probe in probes:
            by_pc.setdefault(probe.pc, []).append(_checked(probe, state))
        captures: dict[Probe, np.ndarray] = {}
        _capture(by_pc.get(-1, ()), state, captures)
        for pc, (instruction, plan) in enumerate(zip(instructions, plans, strict=True)):
            try:
                OPS[instruction.opcode].run(instruction, state)
            except OpError as exc:
                raise SimError(pc, format_instruction(instruction), str(exc)) from None
            state.forget_overwritten(plan.writes)
            if pc in by_pc:
                _capture(by_pc[pc], state, captures)
        stats = collect_stats(
            self.target,
            instructions,
            plans,
            timeline,
            program.layer_names,
            (host_to_vpu_bytes, vpu_to_host_bytes),
        )
        return SimResult(
            self.target, program, plans, timeline, stats, state.dram.data, state.sram.data, captures
        )

    def _analyse(self, program: Program, state: State) -> tuple[tuple[Plan, ...], Timeline]:
        """Shape, plans, tokens, schedule and races: data-independent, so cached for the
        program last run on a DRAM of the same size."""
        cached = self._analysed
        if cached is not None and cached[0] is program and cached[1] == state.dram.size_bytes:
            return cached[2], cached[3]
        instructions = program.instructions
        _check_shape(instructions)
        plans = tuple(_plan(pc, i, state) for pc, i in enumerate(instructions))
        check_tokens(instructions, plans)
        timeline = schedule(instructions, plans, state.hardware)
        if self.check_races:
            check_races(instructions, plans, timeline)
        self._analysed = (program, state.dram.size_bytes, plans, timeline)
        return plans, timeline

    def _fresh_state(self, image: np.ndarray | bytes | None) -> State:
        hardware = self.target.hardware
        image = None if image is None else as_byte_array(image)
        size = self.dram_bytes if image is None else max(self.dram_bytes, image.size)
        dram = Memory("DRAM", size, image)
        return State(hardware, self.target.numerics.requant, Memory("SRAM", hardware.sram_bytes), dram)


def _checked(probe: Probe, state: State) -> Probe:
    memory = {"sram": state.sram, "dram": state.dram}.get(probe.memory)
    if memory is None:
        raise VpuError(f"probe {probe}: memory '{probe.memory}' is neither 'sram' nor 'dram'")
    if probe.address < 0 or probe.nbytes < 0 or probe.address + probe.nbytes > memory.size_bytes:
        raise VpuError(f"probe {probe}: outside {probe.memory} ({memory.size_bytes} bytes)")
    return probe


def _capture(probes, state: State, captures: dict[Probe, np.ndarray]) -> None:
    for probe in probes:
        memory = state.sram if probe.memory == "sram" else state.dram
        captures[probe] = memory.data[probe.address : probe.address + probe.nbytes].copy()


def _check_shape(instructions: tuple[Instruction, ...]) -> None:
    if not instructions:
        raise VpuError("the program is empty: it needs at least an END")
    last = len(instructions) - 1
    for pc, instruction in enumerate(instructions):
        if instruction.opcode == Opcode.END and pc != last:
            raise SimError(
                pc,
                format_instruction(instruction),
                f"END is not the last instruction ({last - pc} follow it)",
            )
    if instructions[last].opcode != Opcode.END:
        raise SimError(last, format_instruction(instructions[last]), "the program ends without END")


def _plan(pc: int, instruction: Instruction, state: State) -> Plan:
    try:
        return OPS[instruction.opcode].plan(instruction, state)
    except OpError as exc:
        raise SimError(pc, format_instruction(instruction), str(exc)) from None
