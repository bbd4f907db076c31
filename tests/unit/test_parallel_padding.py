"""A parallel conv's padding (compiler/host/defaults.py): the chunks split the output's rows,
each chunk pads only the input rows it reads (its rows and the 3x3 window's halo) inside the
parallel loop, and a padding whose padded row vectorises narrowly (34 floats: 2 lanes) is
written as zeros then an in-bound copy. Expected values: numpy's np.pad and a convolution by
its definition; the row counts are worked by hand (32 output rows in 2 chunks: 16 rows and a
halo of 2)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from conv_reference import conv_kernel, numpy_conv
from tvm import te, topi

from vpuc.compiler.host.defaults import ScheduleOptions, default_schedule

AVX512_TWO_CORES = ScheduleOptions(vector_lanes=16, num_cores=2)
AVX2_TWO_CORES = ScheduleOptions(vector_lanes=8, num_cores=2)


def _build(func):
    return tvm.tirx.build(func.with_attr("global_symbol", "main"), target="llvm")


def _pad_rows_per_chunk(script: str) -> int:
    """The row extent of the loops over the padded copy that sit inside the parallel loop."""
    parallel = script.index("T.parallel(")
    grid = re.search(r"for ax0, ax1, ax2, ax3\w* in T\.grid\(1, \d+, (\d+), \d+\)", script[parallel:])
    assert grid, "no padded copy inside the parallel loop"
    return int(grid.group(1))


@pytest.mark.parametrize("options", [AVX512_TWO_CORES, AVX2_TWO_CORES], ids=["avx512", "avx2"])
def test_each_chunk_pads_only_its_own_rows_and_the_conv_matches_numpy(options):
    """16 -> 16 channels, 32x32, 3x3 (2.4M MACs, parallel): chunk k computes output rows
    16k..16k+15, so it pads input rows 16k-1..16k+16: 18 rows of the 34."""
    func, shape = conv_kernel(16, 16, 32, 1)
    scheduled = default_schedule(func, options)
    script = scheduled.script()
    assert script.count("T.parallel(2)") == 1
    assert _pad_rows_per_chunk(script) == 18
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 16, 32, 32)).astype(np.float32)
    w = rng.standard_normal((16, 16, 3, 3)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    _build(scheduled)["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), numpy_conv(x, w, 1), rtol=1e-4, atol=1e-4)


def test_a_strided_parallel_conv_pads_its_rows_in_the_chunk_and_matches_numpy():
    """Stride 2, 32 -> 64 channels, 32x32 -> 16x16 (4.7M MACs): output rows 8k..8k+7 read
    padded rows 16k..16k+16, 17 rows per chunk, de-interleaved along w (2 x 17)."""
    func, shape = conv_kernel(32, 64, 32, 2)
    script = default_schedule(func, AVX2_TWO_CORES).script()
    parallel = script.index("T.parallel(2)")
    assert re.search(r"T\.grid\(1, 32, 17, 2, 17\)", script[parallel:])
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 32, 32)).astype(np.float32)
    w = rng.standard_normal((64, 32, 3, 3)).astype(np.float32)
    out = tvm.runtime.tensor(np.zeros(shape, np.float32))
    _build(default_schedule(func, AVX2_TWO_CORES))["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), numpy_conv(x, w, 2), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    ("channels", "size", "lanes", "decomposed"),
    [
        (16, 32, 16, True),  # 34 wide: 2 lanes padded, 16 in bound
        (16, 32, 8, True),  # 2 lanes against 8
        (32, 16, 16, False),  # 18 wide: 9 lanes padded, 16 in bound: 9 x 4 > 16
        (64, 8, 16, False),  # 10 wide: 10 lanes, 8 in bound
    ],
)
def test_a_narrow_padding_is_zeros_then_a_copy_and_equals_np_pad(channels, size, lanes, decomposed):
    x = te.placeholder((1, channels, size, size), name="x")
    func = te.create_prim_func([x, topi.nn.pad(x, [0, 0, 1, 1], [0, 0, 1, 1], name="pad_temp")])
    scheduled = default_schedule(func, ScheduleOptions(vector_lanes=lanes, num_cores=1))
    script = scheduled.script()
    assert ('T.sblock("pad_temp_pad_const")' in script) == decomposed
    if decomposed:  # the copy's row of `size` floats in full vectors
        assert f"T.vectorized({min(size, lanes)})" in script
    data = np.random.default_rng(2).standard_normal((1, channels, size, size)).astype(np.float32)
    out = tvm.runtime.tensor(np.full((1, channels, size + 2, size + 2), np.nan, np.float32))
    _build(scheduled)["main"](tvm.runtime.tensor(data), out)
    assert np.array_equal(out.numpy(), np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1))))


def test_a_computed_producer_stays_at_the_root_computed_once():
    """Dequantised weights (int8 x scale) feed the parallel conv too: each chunk reads all of
    them, so computing them in the chunks would do it twice on one thread. Only the padded
    copy moves into the chunks."""
    x = te.placeholder((1, 16, 32, 32), name="x")
    wq = te.placeholder((16, 16, 3, 3), name="wq", dtype="int8")
    w = te.compute(wq.shape, lambda *i: wq(*i).astype("float32") * 0.5, name="dequant")
    func = te.create_prim_func([x, wq, topi.nn.conv2d_nchw(x, w, 1, 1, 1)])
    script = default_schedule(func, AVX512_TWO_CORES).script()
    parallel = script.index("T.parallel(2)")
    assert script.index('T.sblock("dequant")') < parallel < script.index('T.sblock("pad_temp")')
