"""VPU calls: each VPU program of an artifact as a packed function the host VM calls.

The host graph calls `call_dps_packed(symbol, inputs..., outputs...)`; the function
registered under that symbol stages the int8 inputs into the program's DRAM image (beside
its weight blob, which stays resident across calls as it would in device memory), runs the
program on the simulator, and copies the int8 outputs back. Every call is recorded: the
simulator's statistics, and the host <-> VPU transfer (one transfer per direction per call,
costed on the target's host link: host_link_latency_cycles + ceil(bytes /
host_link_bytes_per_cycle)).

With `keep_outputs` (for `--check`) a call also keeps every tensor of the subgraph as the
simulator held it (`CallRecord.tensors`): the manifest's checkpoints say where each one
lies and after which instruction it is complete, and the simulator's probes copy it then.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vpuc.runtime.errors import VpuRunError
from vpuc.sim import Probe, Program, SimError, Simulator, VpuError
from vpuc.sim.stats import SimStats
from vpuc.targets import Target


@dataclass
class CallRecord:
    """One VPU call: which program, its statistics, its transfers, its wall time."""

    subgraph: int
    stats: SimStats
    to_vpu_bytes: int
    from_vpu_bytes: int
    link_in_cycles: int  # the inputs' transfer over the host link
    link_out_cycles: int  # the outputs'
    started_s: float  # host wall clock when the call began (perf_counter)
    wall_s: float  # time spent simulating
    result: Any = field(default=None, repr=False)  # the SimResult, kept for traces
    outputs: list[np.ndarray] = field(default_factory=list, repr=False)  # kept for --check
    inputs: list[np.ndarray] = field(default_factory=list, repr=False)  # kept for --check, as staged
    tensors: dict[str, np.ndarray] = field(default_factory=dict, repr=False)  # every checkpoint's value

    @property
    def link_cycles(self) -> int:
        return self.link_in_cycles + self.link_out_cycles


class VpuCall:
    """The packed function of one VPU program."""

    def __init__(self, entry: dict[str, Any], members: dict[str, bytes], target: Target, source: str, log):
        self.entry = entry
        self.subgraph = int(entry["subgraph"])
        self.symbol = str(entry["symbol"])
        self.source = source
        self.target = target
        self.log = log
        self.keep_results = False
        self.keep_outputs = False
        try:
            self.program = Program.from_bytes(
                members[entry["program"]], source=f"{source}:{entry['program']}"
            )
        except VpuError as exc:
            raise VpuRunError(str(exc)) from None
        self.image = np.zeros(int(entry["dram_bytes"]), dtype=np.uint8)
        blob = np.frombuffer(members[entry["weights"]], dtype=np.uint8)
        self.image[: blob.size] = blob
        self.inputs = entry["inputs"]
        self.outputs = entry["outputs"]
        self.simulator = Simulator(target, dram_bytes=self.image.size)

    def __call__(self, *tensors) -> None:
        started = time.perf_counter()
        n = len(self.inputs)
        if len(tensors) != n + len(self.outputs):
            raise VpuRunError(
                f"{self.source}: subgraph {self.subgraph} takes {n} inputs and {len(self.outputs)} outputs, "
                f"the host graph passed {len(tensors)} tensors"
            )
        image = self.image.copy()
        to_vpu = 0
        for spec, tensor in zip(self.inputs, tensors[:n], strict=True):
            data = _stage(_array(tensor), spec)
            image[spec["dram_address"] : spec["dram_address"] + data.size] = data
            to_vpu += data.size
        probes = _probes(self.entry) if self.keep_outputs else {}
        try:
            taken = [probe for pieces in probes.values() for _, probe in pieces]
            result = self.simulator.run(self.program, image, probes=taken)
        except SimError as exc:
            layer = self.program.layer_names.get(self.program.instructions[exc.pc].layer, "?")
            raise VpuRunError(f"{self.source}: subgraph {self.subgraph}, layer '{layer}': {exc}") from None
        from_vpu = 0
        for spec, tensor in zip(self.outputs, tensors[n:], strict=True):
            out = _array(tensor)
            count = out.size
            data = result.dram[spec["dram_address"] : spec["dram_address"] + count]
            out[...] = _unstage(data, spec).reshape(out.shape)
            from_vpu += count
        hw = self.target.hardware
        link_in, link_out = hw.host_link_cycles(to_vpu), hw.host_link_cycles(from_vpu)
        wall = time.perf_counter() - started
        record = CallRecord(self.subgraph, result.stats, to_vpu, from_vpu, link_in, link_out, started, wall)
        record.result = result if self.keep_results else None
        if self.keep_outputs:
            record.outputs = [_array(t).copy() for t in tensors[n:]]
            record.inputs = [_array(t).copy() for t in tensors[:n]]
            record.tensors = {
                spec["name"]: _read(_assembled(probes[spec["name"]], result.captures), spec)
                for spec in _specs(self.entry)
            }
        self.log.append(record)


def _array(tensor) -> np.ndarray:
    """A numpy view of a tensor the call gets: a TVM tensor from the host VM, or a numpy
    array from the executor itself (an artifact without host code)."""
    return tensor if isinstance(tensor, np.ndarray) else np.from_dlpack(tensor)


def _specs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    return list((entry.get("checkpoints") or {}).get("tensors", []))


def _probes(entry: dict[str, Any]) -> dict[str, list[tuple[int, Probe]]]:
    """The probes of every checkpoint tensor, by name, as (offset, probe): its bytes from its
    first pixel to the end of its last, right after the instruction that completes it; or,
    when later layers overwrite some of them before that (cascaded layers interleave), its
    `pieces`, each right after an instruction that sees its bytes as the tensor's."""
    probes = {}
    for spec in _specs(entry):
        pixels, channels, stride = int(spec["pixels"]), int(spec["channels"]), int(spec["pixel_stride"])
        nbytes = (pixels - 1) * stride + channels if pixels else 0
        pieces = spec.get("pieces") or [[spec["pc"], 0, nbytes]]
        address, memory = int(spec["address"]), spec["memory"]
        probes[spec["name"]] = [
            (int(offset), Probe(int(pc), memory, address + int(offset), int(size)))
            for pc, offset, size in pieces
        ]
    return probes


def _assembled(pieces: list[tuple[int, Probe]], captures: dict[Probe, np.ndarray]) -> np.ndarray:
    """A tensor's bytes from its probes' captures."""
    raw = np.zeros(max(offset + probe.nbytes for offset, probe in pieces), np.uint8)
    for offset, probe in pieces:
        raw[offset : offset + probe.nbytes] = captures[probe]
    return raw


def _read(raw: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """The int8 tensor in its Relax shape from the bytes a probe took (pixel by pixel)."""
    pixels, channels, stride = int(spec["pixels"]), int(spec["channels"]), int(spec["pixel_stride"])
    padded = np.zeros(pixels * stride, np.uint8)
    padded[: raw.size] = raw
    return padded.reshape(pixels, stride)[:, :channels].view(np.int8).reshape(spec["shape"])


def _stage(array: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    """The bytes of an int8 tensor as the program reads them from DRAM."""
    if array.dtype != np.int8:
        raise VpuRunError(f"VPU input '{spec['name']}' is {array.dtype}, the program reads int8")
    if list(array.shape) != list(spec["shape"]):
        raise VpuRunError(
            f"VPU input '{spec['name']}' has shape {list(array.shape)}, the program reads {spec['shape']}"
        )
    return np.ascontiguousarray(array).reshape(-1).view(np.uint8)  # in its layout, as the DMA reads it


def _unstage(data: np.ndarray, spec: dict[str, Any]) -> np.ndarray:
    return data.view(np.int8)
