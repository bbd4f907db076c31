"""The default CPU schedule on convolutions (compiler/host/defaults.py): the register tile
and the strided input it chooses are the intended ones, and the scheduled kernel computes
the convolution numpy computes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from conv_reference import conv_kernel, numpy_conv

from vpuc.compiler.host.defaults import ScheduleOptions, default_schedule

AVX2 = ScheduleOptions(vector_lanes=8, num_cores=1)


def _run(func, shape, x, w) -> np.ndarray:
    lib = tvm.tirx.build(func.with_attr("global_symbol", "main"), target="llvm")
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    lib["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    return out.numpy()


@pytest.mark.parametrize(
    ("channels", "filters", "size", "stride", "unrolled"),
    [
        (16, 16, 32, 1, [4, 2]),  # 4 filters x 2 vectors of an output row
        (64, 64, 8, 1, [2, 4, 1]),  # the row is one vector: 2 output rows x 4 filters
        (16, 32, 16, 2, [2, 4, 1]),  # stride 2, 8 wide: the same
    ],
)
def test_a_conv_gets_the_register_tile_and_matches_numpy(channels, filters, size, stride, unrolled):
    func, shape = conv_kernel(channels, filters, size, stride)
    scheduled = default_schedule(func, AVX2)
    extents = [int(n) for n in re.findall(r"T\.unroll\((\d+)\)", scheduled.script())]
    assert extents == unrolled * 2  # the init and the update
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, size, size)).astype(np.float32)
    w = rng.standard_normal((filters, channels, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(scheduled, shape, x, w), numpy_conv(x, w, stride), rtol=1e-4, atol=1e-4)


def test_a_strided_conv_reads_its_padded_input_de_interleaved():
    """Stride 2: the padded copy is [c, h, w % 2, w // 2], so a vector of 8 outputs reads 8
    contiguous inputs (not every other one)."""
    func, shape = conv_kernel(16, 32, 32, 2)
    scheduled = default_schedule(func, AVX2)
    assert re.search(r"pad_temp = T\.sblock_alloc_buffer\(\(1, 16, 34, 2, 17\)\)", scheduled.script())
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    np.testing.assert_allclose(_run(scheduled, shape, x, w), numpy_conv(x, w, 2), rtol=1e-4, atol=1e-4)
