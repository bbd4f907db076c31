"""Helpers for the code generator's tests: build VPU op lists directly (no ONNX, no Relax),
lower them, run the program on the simulator and compare with the numpy int8 reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.sim import Simulator
from vpuc.targets import load_target

from .int8_reference import run_subgraph


@pytest.fixture(scope="session")
def vpu():
    return load_target("vpu")


def with_sram(target, sram_bytes: int):
    return dataclasses.replace(target, hardware=dataclasses.replace(target.hardware, sram_bytes=sram_bytes))


class Builder:
    """A subgraph under construction, with seeded random weights and data."""

    def __init__(self, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.tensors: dict[str, vops.TensorSpec] = {}
        self.ops: list[vops.Op] = []
        self.inputs: list[str] = []
        self.constants: dict[str, np.ndarray] = {}

    def q(self) -> vops.QParams:
        return vops.QParams(float(self.rng.uniform(0.01, 0.05)), int(self.rng.integers(-20, 20)))

    def tensor(self, name: str, shape, q=None) -> str:
        self.tensors[name] = vops.TensorSpec(name, tuple(shape), q or self.q())
        return name

    def input(self, name: str, shape) -> str:
        self.inputs.append(self.tensor(name, shape))
        return name

    def conv(self, x: str, name: str, cout: int, k=(3, 3), stride=(1, 1), pads=(1, 1, 1, 1), dilation=(1, 1),
             groups=1, relu=False) -> str:  # fmt: skip
        n, h, w, cin = self.tensors[x].shape
        oh = (h + pads[0] + pads[2] - dilation[0] * (k[0] - 1) - 1) // stride[0] + 1
        ow = (w + pads[1] + pads[3] - dilation[1] * (k[1] - 1) - 1) // stride[1] + 1
        weights = self.rng.integers(-127, 128, (cout, *k, cin // groups)).astype(np.int8)
        bias = self.rng.integers(-3000, 3000, cout).astype(np.int32)
        out = self.tensor(name, (n, oh, ow, cout))
        y = self.tensors[out].q
        span = 1.0 / (40.0 * np.sqrt(k[0] * k[1] * cin / groups))  # outputs spread over int8
        multipliers = self.rng.uniform(0.5, 1.5, cout).astype(np.float32) * np.float32(span)
        clamp = (y.zero_point, 127) if relu else (-128, 127)
        x_q = self.tensors[x].q
        self.ops.append(
            vops.Conv(
                name,
                (name,),
                (x,),
                out,
                (x_q,),
                y,
                weights=weights,
                bias=bias,
                requant=vops.Requantize(multipliers, y.zero_point, clamp),
                strides=stride,
                padding=pads,
                dilation=dilation,
                groups=groups,
            )  # fmt: skip
        )
        return out

    def dense(self, x: str, name: str, n_out: int) -> str:
        shape = self.tensors[x].shape
        k = shape[-1]
        weights = self.rng.integers(-127, 128, (n_out, k)).astype(np.int8)
        out = self.tensor(name, (*shape[:-1], n_out))
        y = self.tensors[out].q
        multipliers = np.full(n_out, 1.0 / (40.0 * np.sqrt(k)), np.float32)
        self.ops.append(
            vops.Dense(
                name,
                (name,),
                (x,),
                out,
                (self.tensors[x].q,),
                y,
                weights=weights,
                bias=self.rng.integers(-1000, 1000, n_out).astype(np.int32),
                requant=vops.Requantize(multipliers, y.zero_point),
            )  # fmt: skip
        )
        return out

    def pool(self, x: str, name: str, mode: str, k, stride, pads=(0, 0, 0, 0)) -> str:
        n, h, w, c = self.tensors[x].shape
        oh = (h + pads[0] + pads[2] - k[0]) // stride[0] + 1
        ow = (w + pads[1] + pads[3] - k[1]) // stride[1] + 1
        x_q = self.tensors[x].q
        out = self.tensor(name, (n, oh, ow, c), x_q if mode == "max" else None)
        y = self.tensors[out].q
        self.ops.append(
            vops.Pool(
                name,
                (name,),
                (x,),
                out,
                (x_q,),
                y,
                mode=mode,
                kernel=k,
                strides=stride,
                padding=pads,
                scale=float(np.float32(x_q.scale) / np.float32(y.scale)),
            )  # fmt: skip
        )
        return out

    def add(self, a: str, b: str, name: str) -> str:
        out = self.tensor(name, self.tensors[a].shape)
        qa, qb, y = self.tensors[a].q, self.tensors[b].q, self.tensors[out].q
        self.ops.append(
            vops.Add(
                name,
                (name,),
                (a, b),
                out,
                (qa, qb),
                y,
                scale_a=float(np.float32(qa.scale) / np.float32(y.scale)),
                scale_b=float(np.float32(qb.scale) / np.float32(y.scale)),
            )  # fmt: skip
        )
        return out

    def concat(self, inputs: list[str], name: str) -> str:
        n, h, w, _ = self.tensors[inputs[0]].shape
        channels = sum(self.tensors[i].shape[-1] for i in inputs)
        q = self.tensors[inputs[0]].q
        out = self.tensor(name, (n, h, w, channels), q)
        self.ops.append(vops.Concat(name, (name,), tuple(inputs), out, (q,) * len(inputs), q))
        return out

    def subgraph(self, outputs: list[str]) -> vops.Subgraph:
        return vops.Subgraph("test_sg", dict(self.tensors), list(self.ops), list(self.inputs), outputs,
                             constants=dict(self.constants))  # fmt: skip


def simulate(subgraph: vops.Subgraph, target, seed: int = 1):
    """Lower, run on the simulator from random inputs; (program, result, outputs, expected)."""
    program = lower_subgraph(subgraph, target)
    rng = np.random.default_rng(seed)
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    inputs = {}
    for binding in program.inputs:
        x = rng.integers(-128, 128, binding.shape).astype(np.int8)
        inputs[binding.name] = x
        image[binding.dram_address : binding.dram_address + x.size] = x.reshape(-1).view(np.uint8)
    result = Simulator(target).run(program.program, image)
    outputs = {
        b.name: result.dram[b.dram_address : b.dram_address + int(np.prod(b.shape))]
        .view(np.int8)
        .reshape(b.shape)
        for b in program.outputs
    }
    expected = run_subgraph(subgraph, inputs, target.numerics.requant)
    return program, result, outputs, expected


def u55_square_array():
    """u55-256 with the 16 x 16 MAC array (16-cycle weight load, no row slices, 2 depthwise
    pixels a cycle, 16 + 16 cycles of fill and drain, the weight load after the wait) it had
    before issue 21's array geometry, its mac_drain_cycles and mac_load_order: the DMA-order cases computed by
    hand on it (test_store_order.py, test_weight_stream.py) keep their figures; every other
    u55-256 figure is the target's own."""
    import dataclasses

    from vpuc.targets import load_target

    u55 = load_target("u55-256")
    square = {"mac_rows": 16, "mac_cols": 16, "mac_weight_load_cycles": 16, "mac_row_slice": 0,
              "mac_grouped_pixels_per_cycle": 2, "mac_drain_cycles": -1,
              "mac_load_order": "after_wait"}  # fmt: skip
    return dataclasses.replace(u55, hardware=dataclasses.replace(u55.hardware, **square))
