"""A conv whose left/right padding is past the limit (its input band staged into a padded
tile, tile_staged.py) reading a channel slice of a wider tensor: one input of a concat, whose
producer writes it into the concat's storage (pixel stride the concat's channels, not its
own). A concat lives in DRAM (residency.py), a subgraph output or an intermediate: the DMA
loads the band's C bytes a pixel into the tile. Before, the code generator refused it ("no
sub-kernels ... cover it without staging its input"). Lowered, simulated, and compared bit for bit with
the numpy int8 reference (int8_reference.py)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.lower.codegen import tile_staged

from .conftest import Builder, simulate


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("concat", ["output", "intermediate"])
def test_a_staged_conv_reads_one_input_of_a_concat(vpu, monkeypatch, groups, concat):
    staged = []
    slice_specs = tile_staged.PaddedBand._slice_specs
    monkeypatch.setattr(
        tile_staged.PaddedBand,
        "_slice_specs",
        lambda band, *a: staged.append(band) or slice_specs(band, *a),
    )
    b = Builder(seed=4)
    x = b.input("x", (1, 6, 14, 4))
    left = b.conv(x, "left", 4, k=(1, 1), pads=(0, 0, 0, 0))
    right = b.conv(x, "right", 4, k=(1, 1), pads=(0, 0, 0, 0))
    cat = b.concat([left, right], "cat")
    wide = b.conv(left, "wide", 4, k=(3, 9), pads=(1, 4, 1, 5), groups=groups)
    outputs = [wide, cat if concat == "output" else b.conv(cat, "after", 4, k=(1, 1), pads=(0, 0, 0, 0))]
    _, _, got, expected = simulate(b.subgraph(outputs), vpu)
    for name in outputs:
        assert np.array_equal(got[name].reshape(expected[name].shape), expected[name]), name
    assert staged and not any(band.copy for band in staged)  # the slice loaded into the tile
