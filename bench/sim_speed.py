"""Benchmark: how fast the simulator runs a ResNet-18-sized int8 program.

Stands apart from the compiler: the generator below tiles ResNet-18's layer sequence
(224x224x3 input, conv1, maxpool, 8 basic blocks with residual adds, global average pool,
a 1000-way dense layer) onto the target's SRAM, double-buffers every tile with tokens so
transfers overlap compute, and writes random int8 weights into a DRAM image. The simulator
runs it end to end; then numpy alone computes the same integer arithmetic on whole tensors
(one im2col and exact float32 matrix products per layer: the floor for a Python
simulator). Every layer's output must agree bit for bit.

    python bench/sim_speed.py [--target vpu] [--repeat 5]     (one BLAS thread unless
    OPENBLAS_NUM_THREADS is set)

Prints simulated MACs per wall second, instructions per second and the ratio of the
simulator's wall time to numpy's (goal <= 2); writes bench/out/sim_speed.json.
"""

from __future__ import annotations

import os

# One BLAS thread for the simulator and numpy alike: on this shared 2-core machine a second
# thread makes timings swing fivefold when another process holds a core (the simulator's
# per-tile products suffer most). Export the variables to measure otherwise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse
import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np
from rich.console import Console
from rich.table import Table

from vpuc.sim import Add, AvgPool, Conv, Dma, End, Matmul, MaxPool, Opcode, Program, Requant, Simulator, Unit
from vpuc.targets import load_target

OUT = Path(__file__).resolve().parent / "out" / "sim_speed.json"
ALIGN = 64
# Tokens, each from one unit to one other (docs/isa.md: one signaller, one waiter per token).
IN_READY, IN_FREE, ACC_READY, ACC_FREE, OUT_READY, OUT_FREE = 0, 1, 2, 3, 4, 5
W_FREE, RES_READY, RES_FREE, POOL_READY, POOL_FREE, PARAMS_FREE, W_READY = 6, 7, 8, 9, 10, 11, 12
CHAIN = {(Unit.DMA, Unit.MAC): IN_READY, (Unit.MAC, Unit.DMA): IN_FREE,
         (Unit.MAC, Unit.VEC): ACC_READY, (Unit.VEC, Unit.MAC): ACC_FREE,
         (Unit.VEC, Unit.DMA): OUT_READY, (Unit.DMA, Unit.VEC): POOL_READY}  # fmt: skip


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def mask(*tokens: int | None) -> int:
    return sum(1 << t for t in tokens if t is not None)


def carve(*sizes: int) -> list[int]:
    """SRAM addresses of consecutive 64-byte aligned buffers of these sizes."""
    return [sum(align(s) for s in sizes[:n]) for n in range(len(sizes))]


# --- the network: tensors and layers in a DRAM image ---------------------------------------


@dataclass
class Tensor:
    """An HWC int8 activation in DRAM."""

    addr: int
    h: int
    w: int
    c: int
    zp: int


@dataclass
class Layer:
    """conv (+ requant, relu, optional residual add), maxpool, avgpool or dense."""

    name: str
    kind: str
    src: Tensor
    dst: Tensor
    k: int = 1
    stride: int = 1
    pad: int = 0
    relu: bool = True
    weights: np.ndarray | None = None  # OHWI int8 (dense: n x k)
    bias: np.ndarray | None = None
    multiplier: np.ndarray | None = None
    addrs: tuple = ()  # DRAM addresses of weights, bias, multipliers
    residual: Tensor | None = None
    mid_zp: int = 0  # zero point between the requant and the residual add
    scales: tuple = (1.0, 1.0)


def build_resnet18(rng: np.random.Generator) -> tuple[bytearray, Tensor, list[Layer]]:
    image = bytearray()

    def put(array: np.ndarray | None = None, nbytes: int = 0) -> int:
        addr = align(len(image))
        image.extend(bytes(addr - len(image)))
        image.extend(array.tobytes() if array is not None else bytes(nbytes))
        return addr

    def tensor(h, w, c, data=None):
        return Tensor(put(data, h * w * c), h, w, c, int(rng.integers(-20, 20)))

    def params(n, k, c):  # weights, bias, multipliers that keep outputs in range
        m = 30 / (np.sqrt(k) * 60 * 74) * rng.uniform(0.7, 1.3, c)
        return (rng.integers(-127, 128, (c, *n)).astype(np.int8),
                rng.integers(-(1 << 14), 1 << 14, c).astype(np.int32), m.astype(np.float32))  # fmt: skip

    def conv(name, src, c, k, stride, relu=True, residual=None):
        size = (src.h + 2 * (k // 2) - k) // stride + 1
        w, b, m = params((k, k, src.c), k * k * src.c, c)
        scales = tuple(float(np.float32(s)) for s in rng.uniform(0.5, 1.0, 2))
        layers.append(Layer(name, "conv", src, tensor(size, size, c), k, stride, k // 2, relu, w, b,
                            m, tuple(map(put, (w, b, m))), residual, int(rng.integers(-20, 20)),
                            scales))  # fmt: skip
        return layers[-1].dst

    layers: list[Layer] = []
    x = tensor(224, 224, 3, rng.integers(-128, 128, (224, 224, 3)).astype(np.int8))
    y = conv("conv1", x, 64, 7, 2)
    layers.append(Layer("maxpool", "maxpool", y, tensor(56, 56, 64), 3, 2, 1))
    y = layers[-1].dst
    for stage, (channels, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], start=1):
        for block in range(2):
            s, name = (stride if block == 0 else 1), f"layer{stage}.{block}"
            identity = y
            if s != 1 or y.c != channels:
                identity = conv(f"{name}.downsample", y, channels, 1, s, relu=False)
            y = conv(f"{name}.conv2", conv(f"{name}.conv1", y, channels, 3, s), channels, 3, 1,
                     residual=identity)  # fmt: skip
    pool = np.float32(rng.uniform(0.5, 1.0))
    layers.append(Layer("avgpool", "avgpool", y, tensor(1, 1, 512), 7, relu=False, multiplier=pool))
    w, b, m = params((512,), 512, 1000)
    fc = Layer("fc", "dense", layers[-1].dst, tensor(1, 1, 1000), relu=False, weights=w, bias=b,
               multiplier=m, addrs=tuple(map(put, (w, b, m))))  # fmt: skip
    return image, x, [*layers, fc]


# --- the program generator -----------------------------------------------------------------


class Tile(NamedTuple):
    t: int  # index in the layer: buffers alternate by t % 2
    chunk: int  # index of the output-channel chunk: weight buffers alternate by chunk % 2
    c0: int
    r0: int
    r1: int
    more: bool  # a tile two later reuses this one's buffers


class Emitter:
    """Instructions layer by layer; each layer's tiles double-buffered through tokens."""

    def __init__(self, sram_bytes: int) -> None:
        self.sram_bytes = sram_bytes
        self.instructions: list = []
        self.names: dict[int, str] = {}

    def add(self, cls, wait=(), signal=(), **fields) -> None:
        layer = len(self.names)
        self.instructions.append(cls(layer=layer, wait=mask(*wait), signal=mask(*signal), **fields))

    def dma(self, opcode, dram, sram, nbytes, rows=1, stride=0, wait=(), signal=()) -> None:
        """A 1-D transfer, or a 2-D one of `rows` rows `stride` bytes apart in DRAM."""
        self.add(Dma, wait, signal, opcode=opcode, dram=dram, sram=sram, row_bytes=nbytes,
                 rows=rows, dram_row_stride=stride, sram_row_stride=nbytes if rows > 1 else 0)  # fmt: skip

    def layer(self, layer: Layer) -> None:
        self.names[len(self.names) + 1] = layer.name
        emit = {"conv": self.conv, "maxpool": self.maxpool, "avgpool": self.head, "dense": self.head}
        emit[layer.kind](layer)

    def fit_rows(self, out_rows: int, need) -> int:
        return max([r for r in range(1, out_rows + 1) if need(r) <= self.sram_bytes], default=0)

    @staticmethod
    def input_rows(L: Layer, r0: int, r1: int) -> tuple[int, int, int, int]:
        """First and last+1 input rows of output rows [r0, r1), and the padding above/below."""
        top, bottom = r0 * L.stride - L.pad, (r1 - 1) * L.stride - L.pad + L.k
        lo, hi = max(top, 0), min(bottom, L.src.h)
        return lo, hi, lo - top, bottom - hi

    def conv(self, L: Layer) -> None:
        src, dst, taps = L.src, L.dst, L.k * L.k * L.src.c
        res = 1 if L.residual else 0

        def need(chunk, r):  # two of each: weights+bias+multipliers, input, acc, output, residual
            weights = align(chunk * taps) + 2 * align(chunk * 4)
            tile = align(((r - 1) * L.stride + L.k) * src.w * src.c)
            return 2 * (weights + tile + align(r * dst.w * chunk) * (5 + res))

        def input_traffic(shape):  # the input is read once per chunk unless it stays resident
            chunk, rows = shape
            return (dst.c // chunk if rows < dst.h else 1) * src.h * src.w * src.c

        # the tile (output channels x rows) that fits with the least DRAM traffic, then the largest
        shapes = [(c, self.fit_rows(dst.h, lambda r, c=c: need(c, r)))
                  for c in (dst.c >> n for n in range(6)) if need(c, 1) <= self.sram_bytes]  # fmt: skip
        chunk, rows = min(shapes, key=lambda s: (input_traffic(s), -s[0] * s[1]))
        weights, bias, params = carve(chunk * taps, chunk * 4, chunk * 4)
        size = align(chunk * taps) + 2 * align(chunk * 4)
        in_bytes, out_bytes = ((rows - 1) * L.stride + L.k) * src.w * src.c, rows * dst.w * chunk
        w0, w1, *bufs = carve(size, size, *[in_bytes] * 2, *[4 * out_bytes] * 2, *[out_bytes] * 4)
        ins, accs, outs, resids = bufs[0:2], bufs[2:4], bufs[4:6], bufs[6:8]
        starts = [(j, c0, r0) for j, c0 in enumerate(range(0, dst.c, chunk)) for r0 in range(0, dst.h, rows)]
        tiles = [Tile(t, j, c0, r0, min(r0 + rows, dst.h), t + 2 < len(starts))
                 for t, (j, c0, r0) in enumerate(starts)]  # fmt: skip
        resident, chunks = rows == dst.h, dst.c // chunk

        def loads(tile: Tile) -> None:
            t, j, c0, r0, r1, _ = tile
            wbuf = (w0, w1)[j % 2]
            if r0 == 0:  # a new chunk of weights, biases and multipliers
                self.dma(Opcode.LOAD, L.addrs[0] + c0 * taps, wbuf + weights, chunk * taps,
                         wait=(W_FREE, PARAMS_FREE) if j >= 2 else ())  # fmt: skip
                self.dma(Opcode.LOAD, L.addrs[1] + c0 * 4, wbuf + bias, chunk * 4)
                self.dma(Opcode.LOAD, L.addrs[2] + c0 * 4, wbuf + params, chunk * 4, signal=[W_READY])
            if not resident or t == 0:
                lo, hi, _, _ = self.input_rows(L, r0, r1)
                self.dma(Opcode.LOAD, src.addr + lo * src.w * src.c, ins[t % 2], (hi - lo) * src.w * src.c,
                         wait=[IN_FREE if t >= 2 else None], signal=[IN_READY])  # fmt: skip
            if L.residual:
                self.dma(Opcode.LOAD, L.residual.addr + r0 * dst.w * dst.c + c0, resids[t % 2], chunk,
                         rows=(r1 - r0) * dst.w, stride=dst.c,
                         wait=[RES_FREE if t >= 2 else None], signal=[RES_READY])  # fmt: skip

        def compute(tile: Tile) -> None:
            t, j, c0, r0, r1, more = tile
            wbuf, last_of_chunk = (w0, w1)[j % 2], r1 == dst.h and j + 2 < chunks
            lo, hi, pad_top, pad_bottom = self.input_rows(L, r0, r1)
            self.add(Conv, [IN_READY if not resident or t == 0 else None, W_READY if r0 == 0 else None,
                            ACC_FREE if t >= 2 else None],
                     [ACC_READY, IN_FREE if more and not resident else None,
                      W_FREE if last_of_chunk else None],
                     src=ins[0 if resident else t % 2], weights=wbuf + weights, bias=wbuf + bias,
                     dst=accs[t % 2], in_h=hi - lo, in_w=src.w, in_c=src.c, out_c=chunk, kernel_h=L.k,
                     kernel_w=L.k,
                     stride_h=L.stride, stride_w=L.stride, pad_top=pad_top, pad_bottom=pad_bottom,
                     pad_left=L.pad, pad_right=L.pad, src_zp=src.zp, with_bias=1)  # fmt: skip
            pixels, zp = (r1 - r0) * dst.w, L.mid_zp if L.residual else dst.zp
            self.add(Requant, [ACC_READY, OUT_FREE if t >= 2 else None],
                     [ACC_FREE if more else None, None if L.residual else OUT_READY,
                      PARAMS_FREE if last_of_chunk else None],
                     src=accs[t % 2], dst=outs[t % 2], pixels=pixels, channels=chunk,
                     params=wbuf + params, dst_zp=zp,
                     clamp_min=zp if L.relu and not res else -128)  # fmt: skip
            if L.residual:
                self.add(Add, [RES_READY], [OUT_READY, RES_FREE if more else None],
                         src_a=outs[t % 2], src_b=resids[t % 2], dst=outs[t % 2], count=pixels * chunk,
                         zp_a=L.mid_zp, zp_b=L.residual.zp, dst_zp=dst.zp, clamp_min=dst.zp,
                         scale_a=L.scales[0], scale_b=L.scales[1])  # fmt: skip
            self.dma(Opcode.STORE, dst.addr + r0 * dst.w * dst.c + c0, outs[t % 2], chunk, rows=pixels,
                     stride=dst.c, wait=[OUT_READY], signal=[OUT_FREE if more else None])  # fmt: skip

        self.pipeline(tiles, loads, compute)

    def maxpool(self, L: Layer) -> None:
        src, dst = L.src, L.dst
        rows = self.fit_rows(dst.h, lambda r: 2 * align(((r - 1) * L.stride + L.k) * src.w * src.c)
                             + 2 * align(r * dst.w * dst.c))  # fmt: skip
        in_bytes = ((rows - 1) * L.stride + L.k) * src.w * src.c
        in0, in1, out0, out1 = carve(in_bytes, in_bytes, *[rows * dst.w * dst.c] * 2)
        n = -(-dst.h // rows)
        tiles = [Tile(t, 0, 0, t * rows, min(t * rows + rows, dst.h), t + 2 < n) for t in range(n)]

        def loads(tile: Tile) -> None:
            lo, hi, _, _ = self.input_rows(L, tile.r0, tile.r1)
            self.dma(Opcode.LOAD, src.addr + lo * src.w * src.c, (in0, in1)[tile.t % 2],
                     (hi - lo) * src.w * src.c, wait=[POOL_FREE if tile.t >= 2 else None],
                     signal=[POOL_READY])  # fmt: skip

        def compute(tile: Tile) -> None:
            t, _, _, r0, r1, more = tile
            lo, hi, pad_top, pad_bottom = self.input_rows(L, r0, r1)
            self.add(MaxPool, [POOL_READY, OUT_FREE if t >= 2 else None],
                     [OUT_READY, POOL_FREE if more else None], src=(in0, in1)[t % 2],
                     dst=(out0, out1)[t % 2], in_h=hi - lo, in_w=src.w, channels=src.c, kernel_h=L.k,
                     kernel_w=L.k, stride_h=L.stride, stride_w=L.stride, pad_top=pad_top,
                     pad_bottom=pad_bottom, pad_left=L.pad, pad_right=L.pad)  # fmt: skip
            self.dma(Opcode.STORE, dst.addr + r0 * dst.w * dst.c, (out0, out1)[t % 2],
                     (r1 - r0) * dst.w * dst.c, wait=[OUT_READY],
                     signal=[OUT_FREE if more else None])  # fmt: skip

        self.pipeline(tiles, loads, compute)

    @staticmethod
    def pipeline(tiles: list[Tile], loads, compute) -> None:
        """Program order: loads of tile 0, then per tile the next tile's loads, then compute."""
        loads(tiles[0])
        for t, tile in enumerate(tiles):
            if t + 1 < len(tiles):
                loads(tiles[t + 1])
            compute(tile)

    def head(self, L: Layer) -> None:
        """Global average pool or the dense layer, one step after another."""
        src, dst, load, store = L.src, L.dst, Opcode.LOAD, Opcode.STORE
        if L.kind == "avgpool":
            steps = [Dma(opcode=load, dram=src.addr, sram=0, row_bytes=src.h * src.w * src.c),
                     AvgPool(src=0, dst=65536, in_h=src.h, in_w=src.w, channels=src.c, kernel_h=src.h,
                             kernel_w=src.w, src_zp=src.zp, dst_zp=dst.zp, scale=float(L.multiplier)),
                     Dma(opcode=store, dram=dst.addr, sram=65536, row_bytes=dst.c)]  # fmt: skip
        else:
            x, w, b, m, acc, out = carve(src.c, 200 * 512, 800, 800, 800, 200)
            steps = [Dma(opcode=load, dram=src.addr, sram=x, row_bytes=src.c)]
            for c0 in range(0, dst.c, 200):
                steps += [Dma(opcode=load, dram=L.addrs[0] + c0 * 512, sram=w, row_bytes=200 * 512),
                          Dma(opcode=load, dram=L.addrs[1] + c0 * 4, sram=b, row_bytes=800),
                          Dma(opcode=load, dram=L.addrs[2] + c0 * 4, sram=m, row_bytes=800),
                          Matmul(src=x, weights=w, bias=b, dst=acc, m=1, k=512, n=200, src_zp=src.zp,
                                 with_bias=1),
                          Requant(src=acc, dst=out, params=m, pixels=1, channels=200, dst_zp=dst.zp),
                          Dma(opcode=store, dram=dst.addr + c0, sram=out, row_bytes=200)]  # fmt: skip
        for n, step in enumerate(steps):  # each waits for the one before it on another unit
            before, after = steps[max(n - 1, 0)].unit, steps[min(n + 1, len(steps) - 1)].unit
            wait = mask(CHAIN[before, step.unit]) if before != step.unit else 0
            signal = mask(CHAIN[step.unit, after]) if after != step.unit else 0
            self.instructions.append(replace(step, layer=len(self.names), wait=wait, signal=signal))


def generate_program(layers: list[Layer], sram_bytes: int) -> Program:
    emitter = Emitter(sram_bytes)
    for layer in layers:
        emitter.layer(layer)
    return Program((*emitter.instructions, End()), emitter.names)


# --- numpy alone: the same integer arithmetic on whole tensors -----------------------------


def exact_matmul(cols: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """int32 cols @ weights.T for int8 operands: float32 products over blocks of at most
    1023 taps are exact (|sum| < 2^24), the fastest exact way numpy has."""
    cols, weights = cols.astype(np.float32), weights.astype(np.float32).T
    acc = np.zeros((cols.shape[0], weights.shape[1]), dtype=np.int32)
    for k0 in range(0, cols.shape[1], 1023):
        acc += (cols[:, k0 : k0 + 1023] @ weights[k0 : k0 + 1023]).astype(np.int32)
    return acc


def requant(acc, multiplier, zp, lo=-128):
    y = acc.astype(np.float32) * multiplier
    return np.clip(np.rint(y) + np.float32(zp), lo, 127).astype(np.int8)


def numpy_conv(x: np.ndarray, L: Layer, outputs: dict) -> np.ndarray:
    h, w, c = x.shape
    padded = np.full((h + 2 * L.pad, w + 2 * L.pad, c), L.src.zp, dtype=np.int8)
    padded[L.pad : L.pad + h, L.pad : L.pad + w] = x
    windows = np.lib.stride_tricks.sliding_window_view(padded, (L.k, L.k), axis=(0, 1))
    windows = windows[:: L.stride, :: L.stride][: L.dst.h, : L.dst.w].transpose(0, 1, 3, 4, 2)
    weights = L.weights.reshape(L.dst.c, -1)
    acc = exact_matmul(windows.reshape(L.dst.h * L.dst.w, -1), weights)
    acc += L.bias - L.src.zp * weights.sum(axis=1, dtype=np.int32)
    if not L.residual:
        return requant(acc, L.multiplier, L.dst.zp, L.dst.zp if L.relu else -128)
    y = requant(acc, L.multiplier, L.mid_zp).astype(np.float32) - np.float32(L.mid_zp)
    identity = outputs[L.residual.addr].reshape(y.shape).astype(np.float32) - np.float32(L.residual.zp)
    total = np.float32(L.scales[0]) * y + np.float32(L.scales[1]) * identity
    return np.clip(np.rint(total) + np.float32(L.dst.zp), L.dst.zp, 127).astype(np.int8)


def numpy_forward(x: np.ndarray, layers: list[Layer]) -> dict[int, np.ndarray]:
    """Every layer's output by its DRAM address."""
    outputs = {layers[0].src.addr: x}
    for L in layers:
        src = outputs[L.src.addr].reshape(L.src.h, L.src.w, L.src.c)
        if L.kind == "conv":
            y = numpy_conv(src, L, outputs)
        elif L.kind == "maxpool":
            padded = np.full((src.shape[0] + 2, src.shape[1] + 2, src.shape[2]), -128, np.int8)
            padded[1:-1, 1:-1] = src
            windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(0, 1))
            y = windows[::2, ::2][: L.dst.h, : L.dst.w].max(axis=(3, 4))
        elif L.kind == "avgpool":
            total = src.sum(axis=(0, 1), dtype=np.int32) - np.int32(L.src.zp * 49)
            y = requant(total, np.float32(L.multiplier) / np.float32(49), L.dst.zp)
        else:
            acc = exact_matmul(src.reshape(1, -1), L.weights)
            acc += L.bias - L.src.zp * L.weights.sum(axis=1, dtype=np.int32)
            y = requant(acc, L.multiplier, L.dst.zp)
        outputs[L.dst.addr] = y.reshape(-1)
    return outputs


# --- the benchmark -----------------------------------------------------------------------


def best_times(repeat: int, *runs) -> tuple[list[float], list]:
    """The fastest of `repeat` wall times of each run, alternating them so that both see the
    same machine (it is shared), and each run's last result."""
    best, results = [float("inf")] * len(runs), [None] * len(runs)
    for _ in range(repeat):
        for n, run in enumerate(runs):
            start = time.perf_counter()
            results[n] = run()
            best[n] = min(best[n], time.perf_counter() - start)
    return best, results


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="vpu")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    target = load_target(args.target)
    image, x, layers = build_resnet18(np.random.default_rng(0))
    program = generate_program(layers, target.hardware.sram_bytes)
    image = np.frombuffer(bytes(image), dtype=np.uint8)
    x_array = image[x.addr : x.addr + x.h * x.w * x.c].view(np.int8)
    simulator = Simulator(target)
    (sim_s, numpy_s), (result, expected) = best_times(
        args.repeat, lambda: simulator.run(program, image), lambda: numpy_forward(x_array, layers)
    )
    for L in layers:
        got = result.dram[L.dst.addr : L.dst.addr + L.dst.h * L.dst.w * L.dst.c].view(np.int8)
        if not np.array_equal(got, expected[L.dst.addr]):
            raise SystemExit(f"sim_speed: {L.name}: the simulator and numpy disagree")
    stats = result.stats
    figures = {
        "ratio_vs_numpy": sim_s / numpy_s,
        "macs_per_s": stats.macs / sim_s,
        "instructions_per_s": stats.instructions / sim_s,
        "target": target.name,
        "blas_threads": os.environ["OPENBLAS_NUM_THREADS"],
        "sim_wall_s": sim_s,
        "numpy_wall_s": numpy_s,
        "macs": stats.macs,
        "instructions": stats.instructions,
        "simulated_cycles": stats.total_cycles,
        "simulated_ms": stats.time_us / 1000,
        "mac_utilisation": stats.mac_utilisation,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(figures, indent=2) + "\n")
    print_figures(figures)
    return 0


def print_figures(f: dict) -> None:
    title = f"simulator speed: ResNet-18 int8 on {f['target']}, BLAS threads {f['blas_threads']}"
    table = Table(title=title)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in [
        ("instructions", f"{f['instructions']:,}"),
        ("MACs", f"{f['macs']:,}"),
        ("simulated time", f"{f['simulated_cycles']:,} cycles ({f['simulated_ms']:.2f} ms)"),
        ("MAC array utilisation while busy", f"{f['mac_utilisation']:.1%}"),
        ("simulator wall time", f"{f['sim_wall_s']:.3f} s"),
        ("numpy alone, same arithmetic", f"{f['numpy_wall_s']:.3f} s"),
        ("ratio (goal <= 2)", f"{f['ratio_vs_numpy']:.2f}"),
        ("simulated MACs per wall second", f"{f['macs_per_s']:,.0f}"),
        ("instructions per wall second", f"{f['instructions_per_s']:,.0f}"),
    ]:
        table.add_row(name, value)
    Console().print(table)


if __name__ == "__main__":
    raise SystemExit(main())
