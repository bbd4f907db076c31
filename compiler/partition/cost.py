"""The partitioner's host side of the cost: host CPU cycles and host<->VPU transfer cycles
of ops described by OpViews, from the Target's figures alone (docs/partition.md).

The VPU side is not here: what a layer costs on the VPU, and whether it fits, is asked of
the code generator's layer planner (compiler/lower/codegen/oracle.py), the one answerer
(DESIGN.md, contract 6).

Host CPU, per op (cycles at host.clock_mhz):
    op_overhead_cycles + macs / macs_per_cycle + float32 bytes moved / bytes_per_cycle
    a QuantizeLinear or DequantizeLinear: (4 + 1) bytes per element / bytes_per_cycle, no
    overhead (the host build fuses it into the kernel beside it; a lower bound when alone)
Transfer of N bytes over the host link: host_link_latency_cycles + ceil(N / bytes_per_cycle)
"""

from __future__ import annotations

import math

import numpy as np

from vpuc.compiler.partition.graph import Op
from vpuc.targets import Target
from vpuc.targets.ops import OpView

MAC_KINDS = ("conv2d", "dense", "matmul")
# The op kinds `vpuc calibrate-host` (compiler/tune/calibrate.py) fits the [host] figures
# on, one probe family each; tests/partition/test_edge_layers.py holds the two equal.
HOST_FITTED_KINDS = frozenset({"conv2d", "dense", "relu", "add", "max_pool2d"})


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


def cpu_cycles(view: OpView | None, target: Target) -> int:
    """Estimated host CPU cycles of one op in float32."""
    host = target.host
    if view is None or view.kind == "reshape":
        return host.op_overhead_cycles if view is not None else 0
    moved = 4 * (sum(_count(shape) for shape, _ in view.inputs) + _count(view.output_shape))
    return host.op_overhead_cycles + -(-macs(view) // host.macs_per_cycle) + -(-moved // host.bytes_per_cycle)


def op_cpu_cycles(op: Op, target: Target) -> int:
    """Estimated host CPU cycles of one binding of the partition graph: its OpView's, or a
    Q or DQ's pass over its data (it has no OpView)."""
    if op.view is None and op.is_qdq:
        return -(-5 * _count(op.shape) // target.host.bytes_per_cycle)
    return cpu_cycles(op.view, target)


def vpu_seconds(cycles: int, target: Target) -> float:
    return cycles / (target.hardware.clock_mhz * 1e6)


def transfer_cycles(nbytes: int, target: Target) -> int:
    return target.hardware.host_link_cycles(nbytes)
