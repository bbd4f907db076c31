"""Emission: a Subgraph becomes a VpuProgram (instructions, weight blob, DRAM map, figures).

    place tensors (residency.py) -> plan every layer (tiling.py) -> move one-off constant
    loads into earlier layers (prefetch.py) -> allocate SRAM and DRAM (memory.py) -> resolve
    every event's addresses -> order and synchronise (sync.py)

The first attempt keeps each layer's buffers apart from the next layer's (their lifetimes
overlap by one layer), so a layer's first loads never wait for the previous layer's last
reads of the same bytes; when the greedy SRAM allocation cannot fit that, buffers may share
bytes with their neighbours' (the tokens order them), and then the layers are planned again
with smaller budgets.
Layer ids are op positions + 1; their names are the ONNX nodes the partition report uses.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import cascade, mac_bound, prefetch
from vpuc.compiler.lower.codegen.checkpoints import Deferred
from vpuc.compiler.lower.codegen.layer_plan import min_working_set, plan_op
from vpuc.compiler.lower.codegen.memory import AllocationError, allocate_sram, constant_bytes, layout_dram
from vpuc.compiler.lower.codegen.plan import Addr, Buffer, OpPlan, Storage
from vpuc.compiler.lower.codegen.residency import Placement, place
from vpuc.compiler.lower.codegen.sync import synchronise
from vpuc.compiler.lower.codegen.tiling import Context
from vpuc.compiler.lower.errors import LowerError, SramError
from vpuc.targets import Target, roofline
from vpuc.targets.isa.asm import disassemble
from vpuc.targets.isa.attribution import charge_layers
from vpuc.targets.isa.formats import End, Instruction, IsaError
from vpuc.targets.isa.params import requant_param_bytes
from vpuc.targets.isa.program import Program
from vpuc.targets.roofline import Work, vector_cycles

ATTEMPTS = (
    (1.0, True),
    (1.0, False),
    (0.8, False),
    (0.6, False),
    (0.4, False),
    (0.25, False),
)  # (budget factor, apart)


@dataclass(frozen=True)
class Binding:
    """A subgraph input or output: where the runtime puts or finds it in DRAM."""

    name: str
    shape: tuple[int, ...]
    scale: float
    zero_point: int
    dram_address: int
    layout: str  # "NHWC" (as the Relax shape says) or "NCHW" (transposed by the program's DMA)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "dtype": "int8",
            "layout": self.layout,
            "quantization": {"scale": self.scale, "zero_point": self.zero_point},
            "dram_address": self.dram_address,
        }


@dataclass
class VpuProgram:
    """One lowered subgraph."""

    symbol: str
    index: int
    program: Program
    blob: bytes
    dram_bytes: int
    inputs: list[Binding]
    outputs: list[Binding]
    layers: list[dict[str, Any]]
    estimate: dict[str, Any]
    dram_map: list[dict[str, Any]] = field(default_factory=list)
    # where each layer's operands and result can be read while the program runs (the
    # per-layer part of `vpuc run --check`), worked out when first read: most programs the
    # partitioner's estimates lower are never written (checkpoints.py, Deferred)
    deferred_checkpoints: Deferred | None = field(default=None, repr=False, compare=False)

    @property
    def checkpoints(self) -> dict[str, Any]:
        return self.deferred_checkpoints() if self.deferred_checkpoints is not None else {}

    def assembly(self) -> str:
        """The program's assembly, each layer's lowering (an im2col) noted under its .layer."""
        notes = {layer["id"]: layer["tiling"].get("lowering") for layer in self.layers}
        lines = []
        for line in disassemble(self.program).splitlines():
            lines.append(line)
            if line.startswith(".layer ") and notes.get(int(line.split()[1])):
                lines.append(f"# lowered as {notes[int(line.split()[1])]}")
        return "\n".join(lines) + "\n"


def lower_subgraph(subgraph: vops.Subgraph, target: Target) -> VpuProgram:
    """The program of one subgraph; LowerError names the layer that cannot be lowered.
    Where an earlier layer may take a layer's first weight load (its weight buffer live from
    there: prefetch.py), the layers are planned twice, each candidate tiling ranked without
    that load (mac_bound.ranked) and with it, and the program the estimate finds faster is
    kept (a tie, or the first not fitting SRAM: the one ranked with it). Ranked alone, a
    layer cannot see whether the load is hidden in the program, nor what its hand-over to
    the next layer costs."""
    try:
        program, hiding = _lowered(subgraph, target)
    except LowerError:
        if not mac_bound.RANK_HIDDEN:
            raise
        program, hiding = None, True
    if not hiding:
        return program
    with mac_bound.ranking_hidden(False):
        other, _ = _lowered(subgraph, target)
    return program if program and program.estimate["cycles"] < other.estimate["cycles"] else other


def _lowered(subgraph: vops.Subgraph, target: Target) -> tuple[VpuProgram, bool]:
    """(the program, whether any layer's first weight load was ranked as hidden)."""
    hw = target.hardware
    resident = hw.feature_maps_in == "sram"
    placement = place(subgraph, hw.sram_bytes, lambda op, p: min_working_set(op, p, target), resident)
    failure = None
    for factor, apart in ATTEMPTS:
        plans = _plan_layers(subgraph, placement, target, factor)
        prefetch.choose(plans, placement, target)
        buffers = [b for plan in plans for b in plan.buffers]
        if apart:
            for b in buffers:
                b.last = b.last + 1
        try:
            sram_peak = allocate_sram(list(placement.storages.values()), buffers, hw.sram_bytes)
            prefetch.refine_waits(plans, placement)
            break
        except AllocationError as exc:
            failure = exc
    else:
        raise SramError(
            f"{subgraph.symbol}: its layers do not fit SRAM ({hw.sram_bytes} bytes) together: {failure}"
        )
    hiding = mac_bound.RANK_HIDDEN and any(
        b.name == f"L{p.index}.w" and b.first < p.index for p in plans for b in p.buffers
    )
    return _emit(subgraph, placement, plans, target, sram_peak), hiding


def _plan_layers(subgraph, placement: Placement, target: Target, factor: float) -> list[OpPlan]:
    """Each layer planned with the SRAM the resident tensors leave it (times `factor`); the
    room left beside the buffers of the layers before (prefetch.rooms) decides during which
    of them its weights or table may load."""
    plans, key = [], 0.0
    sram = target.hardware.sram_bytes
    free: list[int] = []  # per layer: SRAM bytes no resident tensor, buffer or prefetch takes
    for index, op in enumerate(subgraph.ops):
        budget = int((sram - placement.resident_bytes_at(index)) * factor)
        rooms = prefetch.rooms(plans, free, index)
        context = Context(target, placement, index, budget, key, rooms, prefetch.PREFETCH_ROLES)
        try:
            plan = plan_op(op, context, subgraph.constants)
        except LowerError as exc:
            raise LowerError(str(exc), exc.members or op.members) from None
        plan.key_base = key
        plans.append(plan)
        key = max([key, *(e.key for e in plan.events)]) + 2
        for b in plan.buffers:  # its prefetches take their room from the layers they span
            for t in range(b.first, index):
                free[t] -= b.nbytes
        resident = max(placement.resident_bytes_at(index), placement.resident_bytes_at(index + 1))
        free.append(int((sram - resident) * factor) - plan.working_set_bytes)
    return plans


def _emit(subgraph, placement: Placement, plans: list[OpPlan], target: Target, sram_peak: int) -> VpuProgram:
    storages = dict(placement.storages)
    blob_parts = {name: constant_bytes(array) for name, array in subgraph.constants.items()}
    for plan in plans:
        for name, data in plan.blob:
            storages[name] = Storage(name, len(data), "dram", -1, len(subgraph.ops), "constant")
            blob_parts[name] = data
    dram = layout_dram(list(storages.values()), blob_parts)
    buffers = {b.name: b for plan in plans for b in plan.buffers}
    resolve = _resolver(storages, buffers)
    cascade.choose(plans, placement, target, resolve)
    instructions, keys = [], []
    for plan in plans:
        for event in plan.events:
            for spec in event.specs:
                try:
                    instructions.append(spec.build(resolve, layer=plan.index + 1))
                except IsaError as exc:
                    raise LowerError(f"layer '{plan.op.name}': {exc}", plan.op.members) from None
                keys.append(event.key)
    ordered = synchronise(instructions, keys, target.numerics.requant)
    names = {plan.index + 1: plan.op.name for plan in plans}
    program = Program((*ordered, End()), names, source=subgraph.symbol)
    layers, estimate = _figures(subgraph, placement, plans, target, sram_peak)
    return VpuProgram(
        symbol=subgraph.symbol,
        index=subgraph.index,
        program=program,
        blob=dram.blob,
        dram_bytes=dram.size,
        inputs=[_binding(subgraph, storages, placement, n) for n in subgraph.inputs],
        outputs=[_binding(subgraph, storages, placement, n) for n in subgraph.outputs],
        layers=layers,
        estimate=estimate,
        dram_map=_dram_map(storages),
        deferred_checkpoints=Deferred(subgraph, placement, storages, program, target.numerics.requant),
    )


def _resolver(storages: dict[str, Storage], buffers: dict[str, Buffer]):
    def resolve(addr: Addr) -> int:
        if addr.base in buffers:
            buf = buffers[addr.base]
            return buf.address + addr.slot * buf.slot_bytes + addr.offset
        return storages[addr.base].address + addr.offset

    return resolve


def _binding(subgraph, storages, placement: Placement, name: str) -> Binding:
    spec = subgraph.tensors[name]
    view = placement.views[name]
    storage = storages[view.storage]
    if view.offset or storage.home != "dram":
        raise LowerError(f"{subgraph.symbol}: tensor '{name}' is not a whole DRAM tensor")
    if view.nchw:  # the host hands it over channels-first
        n, h, w, c = spec.shape
        return Binding(name, (n, c, h, w), spec.q.scale, spec.q.zero_point, storage.address, "NCHW")
    return Binding(name, spec.shape, spec.q.scale, spec.q.zero_point, storage.address, "NHWC")


def _figures(subgraph, placement, plans: list[OpPlan], target: Target, sram_peak: int):
    """Per layer and subgraph: estimated cycles (the events on one clock), MACs, DRAM bytes."""
    cycles, spans = prefetch.estimate_cycles(plans, placement, target)
    layers = []
    for plan, (before, end) in zip(plans, spans, strict=True):
        layers.append(
            {
                "id": plan.index + 1,
                "name": plan.op.name,
                "op": plan.op.kind,
                "nodes": list(plan.op.nodes),
                "output": plan.op.output,  # the subgraph tensor it writes
                "macs": plan.macs,
                "estimate_cycles": end - before,
                "dram_read_bytes": plan.dram_read_bytes,
                "dram_write_bytes": plan.dram_write_bytes,
                "tiling": plan.choice,
                "roofline": roofline.to_json(target.hardware, layer_work(plan, subgraph, target)),
            }
        )
    for layer, (charged, _) in zip(layers, charge_layers(spans), strict=True):
        layer["estimate_cycles"] = charged  # the rule the run's table uses (attribution.py)
    weights = sum(len(data) for plan in plans for _, data in plan.blob) + sum(
        a.size for a in subgraph.constants.values()
    )
    macs = sum(plan.macs for plan in plans)
    hw = target.hardware
    return layers, {
        "cycles": cycles,
        "macs": macs,
        "mac_utilization": macs / max(1, cycles * hw.mac_rows * hw.mac_cols),
        "dram_read_bytes": sum(p.dram_read_bytes for p in plans),
        "dram_write_bytes": sum(p.dram_write_bytes for p in plans),
        "weight_bytes": weights,
        "roofline": roofline.to_json(hw, program_work(plans, subgraph, target)),
        "sram_peak_bytes": sram_peak,
        "spilled_tensors": list(placement.spilled),
    }


def layer_work(plan: OpPlan, subgraph, target: Target) -> Work:
    """The work of one layer no program can skip (targets/roofline.py): its MACs, its
    weights once (weight_bytes) and its input and output where they cross DRAM (the
    subgraph's boundary), its vector work at the target's rates."""
    op = plan.op
    boundary = set(subgraph.inputs) | set(subgraph.outputs)
    crossing = sum(subgraph.tensors[t].nbytes for t in {*op.inputs, op.output} if t in boundary)
    kind = "mac" if isinstance(op, vops.MAC_OPS) else op.kind
    taps = op.kernel[0] * op.kernel[1] if isinstance(op, vops.Pool) else 1
    vector = vector_cycles(target.hardware, kind, subgraph.tensors[op.output].nbytes, taps)
    depthwise = 0
    if isinstance(op, vops.Conv) and op.groups > 1:
        channels = subgraph.tensors[op.inputs[0]].nhwc[3]
        depthwise = plan.macs if op.groups == channels == op.weights.shape[0] else 0
    return Work(plan.macs, depthwise, weight_bytes(plan, target) + crossing, vector)


def weight_bytes(plan: OpPlan, target: Target) -> int:
    """A layer's constant bytes no program can skip: a conv's or dense layer's int8 weights,
    int32 biases and requantisation parameters as the op has them (a lowering that repacks
    them with zeros, as a packed column window does, moves more), else its blob (tables)."""
    op = plan.op
    if isinstance(op, vops.Conv | vops.Dense) and op.weights is not None:
        out_c = op.out_channels
        return op.weights.size + 4 * out_c + requant_param_bytes(target.numerics.requant, out_c)
    return sum(len(data) for _, data in plan.blob)


def program_work(plans: list[OpPlan], subgraph, target: Target) -> Work:
    """A program's work: its layers' MACs and vector work, their weights and the subgraph's
    other constants once, its inputs and outputs (the layers' own compulsory bytes would
    count a tensor two layers share twice)."""
    work = sum((layer_work(plan, subgraph, target) for plan in plans), Work())
    weights = sum(weight_bytes(plan, target) for plan in plans)
    constants = sum(a.size for a in subgraph.constants.values())
    boundary = sum(subgraph.tensors[t].nbytes for t in {*subgraph.inputs, *subgraph.outputs})
    return replace(work, compulsory_bytes=weights + constants + boundary)


def _dram_map(storages: dict[str, Storage]) -> list[dict[str, Any]]:
    rows = [
        {"name": s.name, "role": s.role, "address": s.address, "bytes": s.nbytes}
        for s in storages.values()
        if s.home == "dram"
    ]
    return sorted(rows, key=lambda r: r["address"])


def as_instructions(program: VpuProgram) -> list[Instruction]:
    return list(program.program.instructions)
