"""The manifest of a .vpub artifact, checked before anything runs (docs/artifact.md).

Artifact.load has already verified the format, the version and every member's sha256;
this checks what the manifest says against itself and its members: every key the runtime
reads has the right type, each VPU program's members exist, its instructions decode and
number what the manifest says, its inputs and outputs lie inside its DRAM image. A
hand-edited manifest gets one line naming the key, never a traceback.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vpuc.runtime.artifact import ArtifactError
from vpuc.sim import DecodeError, Program
from vpuc.targets import Target, TargetError
from vpuc.targets.loader import target_from_json


def check_manifest(manifest: dict[str, Any], members: dict[str, bytes], source: str) -> Target:
    """The artifact's target; ArtifactError naming the first key that is wrong."""
    for key in ("inputs", "outputs"):
        _tensor_list(manifest.get(key), f"{source}: manifest {key}")
    recorded = manifest.get("target")
    if isinstance(recorded, dict):  # the op list decided the partition; running needs the machine
        recorded = {k: v for k, v in recorded.items() if k != "ops"}
    try:
        target = target_from_json(recorded, f"{source}: manifest target")
    except TargetError as exc:
        raise ArtifactError(str(exc)) from None
    programs = manifest.get("vpu_programs", [])
    if not isinstance(programs, list):
        raise ArtifactError(f"{source}: manifest vpu_programs: must be a list")
    if programs and target.hardware is None:
        raise ArtifactError(f"{source}: manifest vpu_programs: the target '{target.name}' has no VPU")
    symbols = set()
    for k, entry in enumerate(programs):
        where = f"{source}: manifest vpu_programs[{k}]"
        _program(entry, members, where)
        if entry["symbol"] in symbols:
            raise ArtifactError(f"{where}.symbol: '{entry['symbol']}' is used twice")
        symbols.add(entry["symbol"])
    host = manifest.get("host", {})
    if isinstance(host, dict) and "calls" in host:
        counts = len(manifest["inputs"]), len(manifest["outputs"])
        _host_calls(host, *counts, symbols, f"{source}: manifest host")
        if "reference" in manifest and "module" not in manifest["reference"]:
            raise ArtifactError(f"{source}: manifest reference: no 'module', and no host library to hold it")
    return target


def _host_calls(host: dict[str, Any], inputs: int, outputs: int, symbols: set[str], where: str) -> None:
    """The VPU calls of an artifact without host code (compiler/host/calls.py): each names a
    program, reads model inputs or earlier calls' outputs, and the returns are the outputs."""
    calls = host["calls"]
    if not isinstance(calls, list) or not calls:
        raise ArtifactError(f"{where}.calls: must be a non-empty list")
    written: list[int] = []
    for k, call in enumerate(calls):
        here = f"{where}.calls[{k}]"
        if not isinstance(call, dict) or call.get("symbol") not in symbols:
            raise ArtifactError(f"{here}.symbol: names no VPU program of the artifact")
        if not isinstance(call.get("args"), list):
            raise ArtifactError(f"{here}.args: must be a list")
        for i, ref in enumerate(call["args"]):
            _ref(ref, inputs, written, f"{here}.args[{i}]")
        outs = call.get("outputs")
        if not isinstance(outs, list) or not all(isinstance(o, dict) for o in outs):
            raise ArtifactError(f"{here}.outputs: must be a list of {{shape, dtype}}")
        _tensor_list([{**o, "name": f"output {j}"} for j, o in enumerate(outs)], f"{here}.outputs")
        written.append(len(outs))
    returns = host.get("returns")
    if not isinstance(returns, list) or len(returns) != outputs:
        raise ArtifactError(f"{where}.returns: must list the {outputs} model output(s)")
    for i, ref in enumerate(returns):
        _ref(ref, inputs, written, f"{where}.returns[{i}]")


def _ref(ref: Any, inputs: int, written: list[int], where: str) -> None:
    """{"input": i} (a model input) or {"call": k, "output": j} (an earlier call's output)."""
    ok = isinstance(ref, dict) and all(isinstance(v, int) and not isinstance(v, bool) for v in ref.values())
    if ok and set(ref) == {"input"}:
        ok = 0 <= ref["input"] < inputs
    elif ok and set(ref) == {"call", "output"}:
        ok = 0 <= ref["call"] < len(written) and 0 <= ref["output"] < written[ref["call"]]
    else:
        ok = False
    if not ok:
        raise ArtifactError(f"{where}: {ref!r} is not a model input or an earlier call's output")


def _program(entry: Any, members: dict[str, bytes], where: str) -> None:
    if not isinstance(entry, dict):
        raise ArtifactError(f"{where}: must be an object")
    for key, kind in (
        ("subgraph", int),
        ("symbol", str),
        ("program", str),
        ("weights", str),
        ("dram_bytes", int),
    ):
        if not isinstance(entry.get(key), kind) or isinstance(entry.get(key), bool):
            raise ArtifactError(f"{where}.{key}: missing or not a {kind.__name__}")
    for key in ("program", "weights"):
        if entry[key] not in members:
            raise ArtifactError(f"{where}.{key}: member '{entry[key]}' is not in the artifact")
    try:
        program = Program.from_bytes(members[entry["program"]], source=entry["program"])
    except DecodeError as exc:
        raise ArtifactError(f"{where}.program: {exc}") from None
    if entry.get("instructions", len(program)) != len(program):
        raise ArtifactError(
            f"{where}.instructions: says {entry['instructions']}, the program has {len(program)}"
        )
    blob = len(members[entry["weights"]])
    if blob > entry["dram_bytes"]:
        raise ArtifactError(f"{where}.dram_bytes: {entry['dram_bytes']} is smaller than its weights ({blob})")
    for key in ("inputs", "outputs"):
        for i, binding in enumerate(_tensor_list(entry.get(key), f"{where}.{key}")):
            _binding(binding, entry["dram_bytes"], f"{where}.{key}[{i}]")
    if not isinstance(entry.get("layers", []), list):
        raise ArtifactError(f"{where}.layers: must be a list")
    _checkpoints(entry.get("checkpoints", {}), entry["dram_bytes"], len(program), f"{where}.checkpoints")


def _checkpoints(value: Any, dram_bytes: int, instructions: int, where: str) -> None:
    """Where `--check` reads each tensor: inside the program's DRAM (the simulator refuses
    a probe outside its SRAM), after an instruction the program has (-1: before the first)."""
    if not isinstance(value, dict) or not isinstance(value.get("tensors", []), list):
        raise ArtifactError(f"{where}: must be an object with a list 'tensors'")
    for i, spec in enumerate(value.get("tensors", [])):
        here = f"{where}.tensors[{i}]"
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ArtifactError(f"{here}.name: missing or not a string")
        for key in ("address", "pixels", "channels", "pixel_stride", "pc"):
            number = spec.get(key)
            if not isinstance(number, int) or isinstance(number, bool) or number < (-1 if key == "pc" else 0):
                raise ArtifactError(f"{here}.{key}: missing or not a non-negative integer")
        if spec.get("memory") not in ("sram", "dram"):
            raise ArtifactError(f"{here}.memory: {spec.get('memory')!r} is not 'sram' or 'dram'")
        if spec["pc"] >= instructions:
            raise ArtifactError(f"{here}.pc: {spec['pc']} is past the program's {instructions} instructions")
        end = spec["address"] + max(spec["pixels"] - 1, 0) * spec["pixel_stride"] + spec["channels"]
        if spec["memory"] == "dram" and end > dram_bytes:
            raise ArtifactError(f"{here}: bytes up to {end} lie outside the program's DRAM ({dram_bytes})")
        _pieces(spec.get("pieces", []), end - spec["address"], instructions, here)
        shape = spec.get("shape")
        integers = isinstance(shape, list) and all(
            isinstance(d, int) and not isinstance(d, bool) for d in shape
        )
        if not integers or spec["pixels"] * spec["channels"] != int(np.prod(shape, dtype=np.int64)):
            raise ArtifactError(f"{here}.shape: {spec.get('shape')} does not hold pixels x channels")
    if not isinstance(value.get("layers", []), list):
        raise ArtifactError(f"{where}.layers: must be a list")


def _pieces(value: Any, span: int, instructions: int, where: str) -> None:
    """A tensor's probes when one cannot see it all: [pc, offset, nbytes] inside its span."""
    if not isinstance(value, list):
        raise ArtifactError(f"{where}.pieces: must be a list")
    for k, piece in enumerate(value):
        fits = isinstance(piece, list) and len(piece) == 3
        fits = fits and all(isinstance(n, int) and not isinstance(n, bool) for n in piece)
        inside = fits and -1 <= piece[0] < instructions and 0 <= piece[1] <= piece[1] + piece[2] <= span
        if not inside:
            raise ArtifactError(f"{where}.pieces[{k}]: {piece!r} is not [pc, offset, nbytes] inside the "
                                "program and the tensor")  # fmt: skip


def _binding(binding: dict[str, Any], dram_bytes: int, where: str) -> None:
    address = binding.get("dram_address")
    if not isinstance(address, int) or isinstance(address, bool) or address < 0:
        raise ArtifactError(f"{where}.dram_address: missing or not a non-negative integer")
    if binding["dtype"] != "int8":
        raise ArtifactError(f"{where}.dtype: a VPU program reads int8, not {binding['dtype']}")
    end = address + int(np.prod(binding["shape"], dtype=np.int64))
    if end > dram_bytes:
        raise ArtifactError(
            f"{where}: bytes [{address}, {end}) lie outside the program's DRAM ({dram_bytes})"
        )
    if binding.get("layout", "NHWC") not in ("NHWC", "NCHW"):
        raise ArtifactError(f"{where}.layout: '{binding['layout']}' is not NHWC or NCHW")


def _tensor_list(value: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ArtifactError(f"{where}: must be a list")
    for i, spec in enumerate(value):
        if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
            raise ArtifactError(f"{where}[{i}].name: missing or not a string")
        shape = spec.get("shape")
        if not isinstance(shape, list) or not all(
            isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape
        ):
            raise ArtifactError(f"{where}[{i}].shape: must be a list of non-negative integers")
        try:
            if not isinstance(spec.get("dtype"), str):
                raise TypeError
            np.dtype(spec["dtype"])
        except TypeError:
            raise ArtifactError(f"{where}[{i}].dtype: {spec.get('dtype')!r} is not a dtype") from None
    return value
