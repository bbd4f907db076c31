"""The ResNet-18-sized int8 program that bench/sim_speed.py simulates, written here by a
generator of its own (not by the compiler): ResNet-18's layer sequence (224x224x3 input,
conv1, maxpool, 8 basic blocks with residual adds, global average pool, a 1000-way dense
layer) tiled onto the target's SRAM, every tile double-buffered with tokens so transfers
overlap compute, random int8 weights in a DRAM image.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np

from vpuc.sim import Add, AvgPool, Conv, Dma, End, Matmul, MaxPool, Opcode, Program, Requant, Unit

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
