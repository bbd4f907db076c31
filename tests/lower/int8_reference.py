"""The VPU op list run by the numpy integer reference (sim/reference.py), op by op on
whole tensors: the expected bits of every tensor of a subgraph, computed without the
tiler, the memory planner, the emitter or the simulator. Tests compare the simulated
program with it bit for bit."""

from __future__ import annotations

import numpy as np

from vpuc.compiler.lower import ops as vops
from vpuc.sim import reference as ref
from vpuc.targets.isa.params import quantize_multiplier


def requantize(acc: np.ndarray, requant: vops.Requantize, mode: str) -> np.ndarray:
    lo, hi = requant.clamp
    if mode == "float32":
        return ref.requant_float32(acc, requant.multipliers, requant.zero_point, lo, hi)
    pairs = [quantize_multiplier(float(m)) for m in requant.multipliers]
    mult = np.array([p[0] for p in pairs]) if len(pairs) > 1 else pairs[0][0]
    shift = np.array([p[1] for p in pairs]) if len(pairs) > 1 else pairs[0][1]
    return ref.requant_fixed_point(acc, mult, shift, requant.zero_point, lo, hi)


def run_subgraph(subgraph: vops.Subgraph, inputs: dict[str, np.ndarray], mode: str) -> dict[str, np.ndarray]:
    """Every tensor's int8 value (in its Relax shape), inputs given by name."""
    values = {name: np.asarray(a, np.int8) for name, a in inputs.items()}
    values.update({name: np.asarray(a, np.int8) for name, a in subgraph.constants.items()})
    for op in subgraph.ops:
        shape = subgraph.tensors[op.output].shape
        args = [values[name] for name in op.inputs]
        values[op.output] = _run(op, args, subgraph, mode).reshape(shape)
    return values


def _nhwc(subgraph, name, value):
    return value.reshape(subgraph.tensors[name].nhwc)


def _run(op, args, subgraph, mode):
    if isinstance(op, vops.Conv | vops.Dense):
        x = _nhwc(subgraph, op.inputs[0], args[0])
        if isinstance(op, vops.Dense):
            x = x.reshape(1, -1, 1, x.shape[-1])
            w = op.weights.reshape(op.weights.shape[0], 1, 1, -1)
            stride, dilation, pads, groups = (1, 1), (1, 1), (0, 0, 0, 0), 1
        else:
            w, stride, dilation, groups = op.weights, op.strides, op.dilation, op.groups
            top, left, bottom, right = op.padding
            pads = (top, bottom, left, right)
        out = []
        for image in x:
            acc = ref.conv2d(image, w, zp=op.in_q[0].zero_point, stride=stride, dilation=dilation, pads=pads,
                             groups=groups, bias=op.bias)  # fmt: skip
            out.append(requantize(acc, op.requant, mode))
        return np.stack(out)
    if isinstance(op, vops.Matmul):
        a, b = args
        m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
        a3, b3 = a.reshape(-1, m, k), b.reshape(-1, k, n)
        out = [
            ref.matmul(a3[i], b3[i].T, zp=op.in_q[0].zero_point, w_zp=op.in_q[1].zero_point)
            for i in range(len(a3))
        ]
        return np.stack([requantize(acc, op.requant, mode) for acc in out])
    if isinstance(op, vops.Pool):
        x = _nhwc(subgraph, op.inputs[0], args[0])
        top, left, bottom, right = op.padding
        pads = (top, bottom, left, right)
        if op.mode == "max":
            return np.stack([ref.maxpool(image, op.kernel, op.strides, pads) for image in x])
        return np.stack([ref.avgpool(image, op.kernel, op.strides, pads, zp=op.in_q[0].zero_point, scale=op.scale,
                                     dst_zp=op.out_q.zero_point, lo=op.clamp[0], hi=op.clamp[1],
                                     count_include_pad=op.count_include_pad) for image in x])  # fmt: skip
    if isinstance(op, vops.Add):
        return ref.add(args[0], args[1], zp_a=op.in_q[0].zero_point, zp_b=op.in_q[1].zero_point, scale_a=op.scale_a,
                       scale_b=op.scale_b, zp=op.out_q.zero_point, lo=op.clamp[0], hi=op.clamp[1])  # fmt: skip
    if isinstance(op, vops.Mul):
        a = _nhwc(subgraph, op.inputs[0], args[0])
        b = args[1].reshape(-1) if op.broadcast else _nhwc(subgraph, op.inputs[1], args[1])
        return ref.mul(a, b, zp_a=op.in_q[0].zero_point, zp_b=op.in_q[1].zero_point, scale=op.scale,
                       zp=op.out_q.zero_point, lo=op.clamp[0], hi=op.clamp[1])  # fmt: skip
    if isinstance(op, vops.Lut):
        return ref.lut(args[0], op.table)
    if isinstance(op, vops.Rescale):
        return ref.add(args[0], args[0], zp_a=op.in_q[0].zero_point, scale_a=op.multiplier, scale_b=0.0,
                       zp=op.out_q.zero_point, lo=op.clamp[0], hi=op.clamp[1])  # fmt: skip
    if isinstance(op, vops.Concat):
        return np.concatenate([_nhwc(subgraph, n, a) for n, a in zip(op.inputs, args, strict=True)], axis=-1)
    if isinstance(op, vops.Reshape):
        return args[0]
    if isinstance(op, vops.Softmax):
        x = args[0]
        rows = ref.softmax(x.reshape(-1, x.shape[-1]), op.table, op.multiplier, op.shift, op.out_q.zero_point)
        return rows.reshape(x.shape)
    raise AssertionError(f"no reference for {op.kind}")
