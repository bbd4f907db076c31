"""A 1x1 stride-2 convolution (a ResNet projection) as TVM legalises it: its input is first
copied (an identity `pad_temp`), and the default schedule writes that copy de-interleaved
like a 3x3 strided conv's padded input, so its vector loads are contiguous; the result is
the convolution numpy computes."""

from __future__ import annotations

import re

import numpy as np
import tvm
from tvm import te, topi

from vpuc.compiler.host.defaults import ScheduleOptions, default_schedule


def test_a_1x1_stride_2_conv_reads_its_input_copy_de_interleaved():
    x = te.placeholder((1, 16, 32, 32), name="x")
    w = te.placeholder((32, 16, 1, 1), name="w")
    func = te.create_prim_func([x, w, topi.nn.conv2d_nchw(x, w, 2, 0, 1)])
    scheduled = default_schedule(func, ScheduleOptions(vector_lanes=8, num_cores=1))
    assert re.search(r"pad_temp = T\.sblock_alloc_buffer\(\(1, 16, 32, 2, 16\)\)", scheduled.script())
    rng = np.random.default_rng(0)
    xa = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    wa = rng.standard_normal((32, 16, 1, 1)).astype(np.float32)
    lib = tvm.tirx.build(scheduled.with_attr("global_symbol", "main"), target="llvm")
    out = tvm.runtime.tensor(np.zeros((1, 32, 16, 16), np.float32))
    lib["main"](tvm.runtime.tensor(xa), tvm.runtime.tensor(wa), out)
    expected = np.einsum("chw,fc->fhw", xa[0, :, ::2, ::2].astype(np.float64), wa[:, :, 0, 0])
    np.testing.assert_allclose(out.numpy()[0], expected, rtol=1e-4, atol=1e-4)
