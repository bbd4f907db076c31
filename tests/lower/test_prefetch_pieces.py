"""A weight load hoisted into an earlier layer may be cut into pieces, one after each of that
layer's tiles' loads (codegen/prefetch.py `_spread`): the DMA unit retires transfers in
order, so one 4.7 KB flash load (4.8 K cycles at 1 B/cycle) issued early in the s2 add would
hold back every later tile's loads of the add, and issued after its last load it would
leave the flash port idle through the add. On the anchor resnet8 at u55-256 (Vela's
Shared_Sram), cut into up to 8 pieces, stage 3's weights stream from flash while the s2 add
runs, and the program is >= 2% shorter than with whole loads (PIECES = 1) and at most Vela
5.2's total for the same model and memory mode (145,637 cycles, the anchors' recorded
figure). The pieces move the same bytes: the output is the one the whole loads give."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower.codegen import prefetch
from vpuc.sim import Simulator
from vpuc.targets.isa.formats import Dma

ANCHORS = Path(__file__).resolve().parents[3] / "shared" / "anchors"
ANCHOR = ANCHORS / "resnet8" / "resnet8_int8_qdq.onnx"
VELA_SHARED_SRAM_TOTAL = 145_637  # anchors/resnet8/vela_u55_256_hee_shared_sram.json "total_cycles"


def _run():
    prepared = prepare_model(ANCHOR, "u55-256", CompileOptions(calib_synthetic=4))
    (program,) = prepared.programs
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    x = np.random.default_rng(0).integers(-128, 128, int(np.prod(program.inputs[0].shape))).astype(np.int8)
    at = program.inputs[0].dram_address
    image[at : at + x.size] = x.view(np.uint8)
    result = Simulator(prepared.target).run(program.program, image)
    out = program.outputs[0]
    output = bytes(result.dram[out.dram_address : out.dram_address + int(np.prod(out.shape))])
    ids = {layer["name"].split(";")[0]: layer["id"] for layer in program.layers}
    s3_conv2 = ids["resnet8_1/s3_conv2_bn_1/batchnorm/add_1"]
    blob = next(r for r in program.dram_map if r["name"] == f"blob{s3_conv2 - 1}.weights")
    early = [i for i in program.program.instructions if isinstance(i, Dma) and i.region
             and blob["address"] <= i.dram < blob["address"] + blob["bytes"] and i.layer < s3_conv2]  # fmt: skip
    return result.stats.total_cycles, output, early


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
def test_hoisted_weights_in_pieces_beat_whole_loads_and_vela():
    assert prefetch.PIECES == 8
    total, output, early = _run()
    assert len(early) >= 2  # s3_conv2's first block, cut over an earlier layer's tiles
    with mock.patch.object(prefetch, "PIECES", 1):
        whole_total, whole_output, whole_early = _run()
    assert len(whole_early) <= 1
    assert output == whole_output
    assert whole_total - total >= 0.02 * whole_total
    assert total <= VELA_SHARED_SRAM_TOTAL
