"""The partitioner's cost model: estimated VPU cycles, host CPU cycles and host<->VPU
transfer cycles of ops described by OpViews, from the Target's figures alone.

The compiler never imports the simulator; this model is its own, documented in
docs/partition.md, and tests keep it close to what the simulator measures.

VPU, per op (cycles at hardware.clock_mhz), by the ISA's cost functions (targets/isa/cost.py,
the simulator's too; docs/isa.md):
    conv      mac_cycles: blocks of weights per kernel tap, each max(pixels, weight load)
    dense     mac_cycles with m pixels
    pooling   ceil(channels/lanes) * out pixels * window
    others    ceil(elements/lanes); reshape 0
    memory    every op streams its inputs, weights and output through DRAM:
              dram_latency_cycles per tensor + ceil(bytes / dram_bytes_per_cycle)
    op        max(compute, memory) (DMA overlaps compute) + requant epilogue of MAC ops,
              ceil(channels/lanes) * pixels
Host CPU, per op (cycles at host.clock_mhz):
    op_overhead_cycles + macs / macs_per_cycle + float32 bytes moved / bytes_per_cycle
Transfer of N bytes over the host link: host_link_latency_cycles + ceil(N / bytes_per_cycle)
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.targets import Target
from vpuc.targets.isa.cost import mac_cycles
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
    """Cycles of the op's own unit, by the cost functions of docs/isa.md."""
    hw = target.hardware
    if view.kind == "reshape":
        return 0
    if view.kind == "conv2d":
        return _conv_cycles(view, target)
    if view.kind in ("dense", "matmul"):
        k, n = view.input_shape(0)[-1], view.output_shape[-1]
        return mac_cycles(hw, 1, k, n, _count(view.output_shape) // max(n, 1))
    channels, pixels = _channels_pixels(view.output_shape)
    if view.kind in ("max_pool2d", "avg_pool2d", "global_avg_pool"):
        window = math.prod(view.attrs.get("pool", (1, 1)))
        if view.kind == "global_avg_pool":
            window = _count(view.input_shape(0)) // max(channels, 1) // max(pixels, 1)
        return -(-channels // hw.vector_lanes) * pixels * window
    return -(-_count(view.output_shape) // hw.vector_lanes)


def _conv_cycles(view: OpView, target: Target) -> int:
    """conv: the ISA's MAC cost (targets/isa/cost.py) of the whole layer as one instruction."""
    groups = max(view.attrs.get("groups", 1), 1)
    cin_g = max(view.attrs.get("in_channels", 1) // groups, 1)
    cout_g = max(view.attrs.get("out_channels", 1) // groups, 1)
    kh, kw = view.attrs.get("kernel", (1, 1))
    _, pixels = _channels_pixels(view.output_shape)
    return mac_cycles(target.hardware, groups, cin_g, cout_g, pixels, kh * kw)


def _channels_pixels(shape: tuple[int, ...]) -> tuple[int, int]:
    """(channels, pixels) of a logical NCHW tensor, or of a [..., C] matrix."""
    if len(shape) == 4:
        return shape[1], shape[0] * shape[2] * shape[3]
    channels = shape[-1] if shape else 1
    return channels, _count(shape) // max(channels, 1)


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
    """Estimated VPU cycles of one op: its unit's cycles or its DMA, whichever is longer
    (they overlap), then the requantisation epilogue of a MAC op."""
    if view.kind == "reshape":
        return 0
    epilogue = 0
    if view.kind in ("conv2d", "dense", "matmul"):
        channels, pixels = _channels_pixels(view.output_shape)
        epilogue = -(-channels // target.hardware.vector_lanes) * pixels
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
