"""One sweep point through the real compiler: the back half (partition, lower) of the one
front half, then each VPU program on the simulator, then the point's figures.

This module and execute.py are where `vpuc sweep` joins the compiler and the simulator
(tests/unit/test_layering.py lists them beside the CLI): a point's figures are what `vpuc
compile --target POINT.toml` and `vpuc run` report for it, without the host build.

The front half (import, passes, decompose, quantise) reads, of the target, only its op list
for a QDQ model; a float model's quantiser partitions with the whole target. `front_key`
is that dependency: points with the same key share one front half.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, replace

import numpy as np

from vpuc.compiler.driver import CompileOptions, Prepared, partition_and_lower, prepare_front
from vpuc.compiler.errors import CompileError
from vpuc.compiler.partition.macs import model_macs
from vpuc.compiler.sweep import proxies
from vpuc.sim import SimError, Simulator, VpuError
from vpuc.targets import Target


@dataclass
class Front:
    """The front half of one model, what every point of it starts from (picklable)."""

    model: str
    prepared: Prepared
    options: CompileOptions
    qdq: bool
    key: str
    macs: int
    seconds: float


def front_key(target: Target, qdq: bool) -> str:
    """What of `target` the front half reads (module docstring)."""
    data = target.to_json()
    read = (
        {"ops": data.get("ops", {})}
        if qdq
        else {k: v for k, v in data.items() if k not in ("name", "description")}
    )
    return json.dumps(read, sort_keys=True)


def front_half(model: str, target: Target, options: CompileOptions) -> Front:
    start = time.perf_counter()
    prepared = prepare_front(model, target, options)
    qdq = _is_qdq(prepared)
    return Front(
        model,
        prepared,
        options,
        qdq,
        front_key(target, qdq),
        model_macs(prepared.mod),
        time.perf_counter() - start,
    )


def _is_qdq(prepared: Prepared) -> bool:
    from vpuc.compiler.quantize.qdq.model import is_qdq_module

    return is_qdq_module(prepared.imported.mod)


def evaluate(front: Front, target: Target, fronts: dict | None = None) -> dict:
    """The record of one point: status ("ok", "infeasible", "failed"), reason, figures."""
    start = time.perf_counter()
    key = front_key(target, front.qdq)
    if key != front.key:  # a float model whose quantiser reads what this point changes
        fronts = {} if fronts is None else fronts
        if key not in fronts:
            fronts[key] = front_half(front.model, target, front.options)
        front = fronts[key]
    prepared = replace(front.prepared, target=target, timings={}, partition=None, programs=[])
    try:
        partition_and_lower(prepared, front.options)
    except CompileError as exc:
        return _record("infeasible", str(exc), None, start)
    if not prepared.programs:
        return _record("infeasible", _host_only_reason(prepared.partition.report["ops"]), None, start)
    lowered = time.perf_counter()
    try:
        runs = [_simulate(program, target) for program in prepared.programs]
    except (SimError, VpuError) as exc:  # a program the simulator refuses: a vpuc bug, named
        return _record("failed", f"the simulator refused a program: {exc}", None, start)
    figures = _figures(prepared, front.macs, runs)
    record = _record("ok", None, figures, start)
    record["timings"] = {
        "back_half_s": round(lowered - start, 4),
        "simulate_s": round(time.perf_counter() - lowered, 4),
    }
    return record


MAC_OPS = ("Conv", "ConvInteger", "QLinearConv", "Gemm", "MatMul", "MatMulInteger", "QLinearMatMul")
QDQ_OPS = ("QuantizeLinear", "DequantizeLinear")


def _host_only_reason(ops: list[dict]) -> str:
    """Why nothing runs on the VPU: the most common reason of the CPU's MAC ops (else of
    its other ops, Q/DQ last), as the partition report gives it."""
    cpu = [op for op in ops if op["device"] == "cpu"]
    for pick in (lambda op: op["op"] in MAC_OPS, lambda op: op["op"] not in QDQ_OPS, lambda op: True):
        reasons = Counter(op["reason"] for op in cpu if pick(op))
        if reasons:
            reason, count = reasons.most_common(1)[0]
            return f"no layer runs on the VPU ({len(cpu)} ops on the CPU; {count} of them: {reason})"
    return "no layer runs on the VPU"


def _record(status: str, reason: str | None, figures: dict | None, start: float) -> dict:
    return {
        "status": status,
        "reason": reason,
        "figures": figures,
        "timings": {"back_half_s": round(time.perf_counter() - start, 4)},
    }


def _simulate(program, target: Target) -> dict:
    """One VPU call as the runtime makes it (runtime/vpu.py): the weight blob in DRAM, the
    inputs staged (zeros: nothing data-dependent decides timing), the link costed."""
    image = np.zeros(program.dram_bytes, dtype=np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, dtype=np.uint8)
    result = Simulator(target, dram_bytes=image.size).run(program.program, image)
    stats, hw = result.stats, target.hardware
    to_vpu = sum(int(np.prod(b.shape)) for b in program.inputs)
    from_vpu = sum(int(np.prod(b.shape)) for b in program.outputs)
    accessed = sum(_touched(r) for p in result.plans for r in (*p.reads, *p.writes))
    capacity = stats.total_cycles * hw.macs_per_cycle  # over all cycles, as vpuc run reports it
    return {
        "id": program.index,
        "cycles": stats.total_cycles,
        "dram_read_bytes": stats.dram_read_bytes,
        "dram_write_bytes": stats.dram_written_bytes,
        "sram_peak_bytes": stats.sram_peak_bytes,
        "mac_utilization": round(stats.macs / capacity, 4) if capacity else 0.0,
        "macs": stats.macs,
        "mac_capacity": capacity,
        "sram_accessed_bytes": accessed,
        "to_vpu": to_vpu,
        "from_vpu": from_vpu,
        "link_cycles": hw.host_link_cycles(to_vpu) + hw.host_link_cycles(from_vpu),
    }


def _touched(region) -> int:
    if region.block is None:
        return region.stop - region.start
    planes, rows, row_bytes, _, _ = region.block
    return planes * rows * row_bytes


def _figures(prepared: Prepared, model_macs_total: int, runs: list[dict]) -> dict:
    """docs/sweep.md defines each figure."""
    hw = prepared.target.hardware
    vpu = sum(r["cycles"] for r in runs)
    link = sum(r["link_cycles"] for r in runs)
    macs, capacity = sum(r["macs"] for r in runs), sum(r["mac_capacity"] for r in runs)
    ops = prepared.partition.report["ops"]
    figures = {
        "cycles": vpu + link,
        "vpu_cycles": vpu,
        "link_cycles": link,
        "latency_us": round((vpu + link) / hw.clock_mhz, 4),
        "dram_read_bytes": sum(r["dram_read_bytes"] for r in runs),
        "dram_write_bytes": sum(r["dram_write_bytes"] for r in runs),
        "sram_accessed_bytes": sum(r["sram_accessed_bytes"] for r in runs),
        "host_link_bytes": sum(r["to_vpu"] + r["from_vpu"] for r in runs),
        "to_vpu_bytes": sum(r["to_vpu"] for r in runs),
        "from_vpu_bytes": sum(r["from_vpu"] for r in runs),
        "sram_peak_bytes": max(r["sram_peak_bytes"] for r in runs),
        "macs": macs,
        "mac_utilization": round(macs / capacity, 4) if capacity else 0.0,
        "host_ops": sum(op["device"] == "cpu" for op in ops),
        "vpu_ops": sum(op["device"] == "vpu" for op in ops),
        "host_mac_share": round(max(0, model_macs_total - macs) / model_macs_total, 4)
        if model_macs_total
        else 0.0,
        "subgraphs": [
            {
                k: r[k]
                for k in (
                    "id",
                    "cycles",
                    "dram_read_bytes",
                    "dram_write_bytes",
                    "sram_peak_bytes",
                    "mac_utilization",
                )
            }
            for r in runs
        ],
    }
    figures["area_mm2"] = round(proxies.area_mm2(hw), 4)
    figures["energy_uj"] = round(proxies.energy_uj(hw, figures), 4)
    return figures
