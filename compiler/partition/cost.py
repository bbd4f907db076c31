"""The partitioner's cost model: estimated VPU cycles, host CPU cycles and host<->VPU
transfer cycles of ops described by OpViews, from the Target's figures alone.

The compiler never imports the simulator; this model is its own, documented in
docs/partition.md, and tests keep it close to what the simulator measures.

VPU, per op (cycles at hardware.clock_mhz):
    MAC ops   compute = out_pixels * ceil(K / mac_rows) * ceil(N / mac_cols) (per group),
              K = reduction length (Cin/groups * kh * kw, or the dense K), N = out channels
    vector    compute = ceil(elements * window / vector_lanes)
    reshape   0
    memory    every op streams its inputs, weights and output through DRAM:
              dram_latency_cycles per tensor + ceil(bytes / dram_bytes_per_cycle)
    op        max(compute, memory) (DMA overlaps compute) + ceil(out / lanes) epilogue
Host CPU, per op (cycles at host.clock_mhz):
    op_overhead_cycles + macs / macs_per_cycle + float32 bytes moved / bytes_per_cycle
Transfer of N bytes over the host link: host_link_latency_cycles + ceil(N / bytes_per_cycle)
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.targets import Target
from vpuc.targets.ops import OpView

MAC_KINDS = ("conv2d", "dense", "matmul")


def _count(shape: tuple[int, ...]) -> int:
    return int(np.prod(shape, dtype=np.int64)) if shape else 1


def macs(view: OpView) -> int:
    """Multiply-accumulates (or elementwise operations for non-MAC ops) of one op."""
    out = _count(view.output_shape)
    if view.kind == "conv2d":
        kh, kw = view.attrs.get("kernel", (1, 1))
        cin_per_group = view.attrs.get("in_channels", 1) // max(view.attrs.get("groups", 1), 1)
        return out * cin_per_group * kh * kw
    if view.kind in ("dense", "matmul"):
        return out * view.input_shape(0)[-1]
    window = math.prod(view.attrs.get("pool", (1, 1)))
    if view.kind == "global_avg_pool":
        return _count(view.input_shape(0))
    return out * window


def vpu_compute_cycles(view: OpView, target: Target) -> int:
    hw = target.hardware
    if view.kind == "reshape":
        return 0
    if view.kind not in MAC_KINDS:
        return -(-macs(view) // hw.vector_lanes)
    out = view.output_shape
    if view.kind == "conv2d":
        kh, kw = view.attrs.get("kernel", (1, 1))
        groups = max(view.attrs.get("groups", 1), 1)
        k = view.attrs.get("in_channels", 1) // groups * kh * kw
        n = view.attrs.get("out_channels", 1) // groups
        pixels = _count(out) // max(view.attrs.get("out_channels", 1), 1)
        return groups * pixels * -(-k // hw.mac_rows) * -(-n // hw.mac_cols)
    k, n = view.input_shape(0)[-1], out[-1]
    rows = _count(out) // max(n, 1)
    return rows * -(-k // hw.mac_rows) * -(-n // hw.mac_cols)


def vpu_memory_cycles(view: OpView, target: Target) -> int:
    """DMA cycles to stream the op's int8 inputs (weights included) and output, plus the
    int32 bias and requantisation scales of a MAC op."""
    hw = target.hardware
    tensors = [shape for shape, _ in view.inputs] + [view.output_shape]
    total = sum(hw.dram_cycles(_count(shape)) for shape in tensors)
    if view.kind in ("conv2d", "dense"):
        total += hw.dram_cycles(8 * view.attrs.get("out_channels", 1))
    return total


def vpu_cycles(view: OpView, target: Target) -> int:
    """Estimated VPU cycles of one op (with its fused epilogue)."""
    if view.kind == "reshape":
        return 0
    epilogue = -(-_count(view.output_shape) // target.hardware.vector_lanes)
    return max(vpu_compute_cycles(view, target), vpu_memory_cycles(view, target)) + epilogue


def cpu_cycles(view: OpView | None, target: Target) -> int:
    """Estimated host CPU cycles of one op in float32."""
    host = target.host
    if view is None or view.kind == "reshape":
        return host.op_overhead_cycles if view is not None else 0
    moved = 4 * (sum(_count(shape) for shape, _ in view.inputs) + _count(view.output_shape))
    return host.op_overhead_cycles + -(-macs(view) // host.macs_per_cycle) + -(-moved // host.bytes_per_cycle)


def vpu_seconds(cycles: int, target: Target) -> float:
    return cycles / (target.hardware.clock_mhz * 1e6)


def transfer_cycles(nbytes: int, target: Target) -> int:
    return target.hardware.host_link_cycles(nbytes)
