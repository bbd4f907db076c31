"""Issue 20, item 3: the SRAM fit check of a conv whose input band is staged (its left/right
padding past the limit, tile_staged.py) counts the staged tile. Before, it counted the conv's
own band, so at SRAM sizes where the tile did not fit beside the resident input the
partitioner kept the input resident and the code generator then failed ("no sub-kernels
... cover"): the conv fell to the host with a wrong reason. Now the fit check spills the input
to DRAM (the staged band is then loaded by the DMA) or, below the tile's size, says the layer
does not fit SRAM.

The form is test_wide_kernels's depthwise 3x9 conv with padding [1, 8, 1, 8] reading the
output of a 1x1 conv (resident in SRAM), on `vpu` with its SRAM shrunk; checked against
onnxruntime's QDQ reference (`vpuc run --check`, within 1 LSB)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from test_whole_models import _run_check
from test_wide_kernels import _wide

from tests.e2e.ort_qdq import quantize_qdq
from vpuc.compiler import compile_model
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.targets import load_target

FORM = dict(kernel=(3, 9), pads=(1, 8, 1, 8), cin=8, cout=8, group=8)
SRAM_SIZES = range(3000, 5001, 250)  # bytes: from below the staged tile's need to above


def _shrunk(sram_bytes: int):
    target = load_target("vpu")
    return replace(target, hardware=replace(target.hardware, sram_bytes=sram_bytes))


@pytest.fixture
def qdq_path(tmp_path, monkeypatch):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")  # the staged conv, not an im2col
    model, shape = _wide(**FORM)
    return quantize_qdq(model, tmp_path, shape)[1]


@pytest.mark.parametrize("sram_bytes", SRAM_SIZES)
def test_a_staged_conv_either_runs_on_the_vpu_or_says_it_does_not_fit_sram(
    vpuc, tmp_path, qdq_path, sram_bytes
):
    artifact = compile_model(qdq_path, target=_shrunk(sram_bytes), profitability=False)
    wide = {o["name"]: o for o in artifact.report["partition"]["ops"]}["wide"]
    if wide["device"] == "vpu":
        assert "staged" in wide["reason"]
        _run_check(vpuc, artifact.save(tmp_path / "m.vpub"), qdq_path)
    else:
        assert "must fit in SRAM" in wide["reason"], wide["reason"]


def test_the_fit_check_counts_the_staged_tile(qdq_path):
    """At 4000 bytes the resident input and the staged tile do not fit together: the fit check
    spills the input (before: kept it resident and the staged plan found no room)."""
    artifact = compile_model(qdq_path, target=_shrunk(4000), profitability=False)
    wide = {o["name"]: o for o in artifact.report["partition"]["ops"]}["wide"]
    assert wide["device"] == "vpu", wide["reason"]
