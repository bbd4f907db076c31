"""A streamed layer's first weight blocks may load up to PREFETCH_DEPTH layers with events
back (codegen/prefetch.py): on the anchor resnet8 at u55-256 (Vela's Shared_Sram, weights
from flash at 1 B/cycle) the flash port idles through the adds and the compute-bound convs
before stage 3, whose 55 KB of weights are then the program's critical path. With 4 layers
back, s3_conv2's first weight block (4704 B) loads during s2_conv2 or the s2 add (cut into
pieces over its tiles, test_prefetch_pieces.py), four or three layers with events before it,
which 2 layers back cannot reach, and the program is >= 1.5% shorter
(bench/vs_vela.py's schedule figure; docs/targets.md, "Prefetching further back")."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower.codegen import prefetch
from vpuc.sim import Simulator
from vpuc.targets.isa.formats import Dma

ANCHOR = Path(__file__).resolve().parents[3] / "shared" / "anchors" / "resnet8" / "resnet8_int8_qdq.onnx"


def _run():
    prepared = prepare_model(ANCHOR, "u55-256", CompileOptions(calib_synthetic=4))
    (program,) = prepared.programs
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    total = Simulator(prepared.target).run(program.program, image).stats.total_cycles
    ids = {layer["name"].split(";")[0]: layer["id"] for layer in program.layers}
    s2_conv2, s3_conv2 = (
        ids["resnet8_1/s2_conv2_bn_1/batchnorm/add_1"],
        ids["resnet8_1/s3_conv2_bn_1/batchnorm/add_1"],
    )
    blob = next(r for r in program.dram_map if r["name"] == f"blob{s3_conv2 - 1}.weights")
    hosts = {i.layer for i in program.program.instructions if isinstance(i, Dma) and i.region
             and blob["address"] <= i.dram < blob["address"] + blob["bytes"]}  # fmt: skip
    return total, min(hosts), s2_conv2


@pytest.mark.skipif(not ANCHOR.is_file(), reason="the anchors (../shared/anchors) are not on this machine")
def test_stage_3_weights_load_four_layers_back():
    assert prefetch.PREFETCH_DEPTH == 4
    total, first_host, s2_conv2 = _run()
    assert first_host in (s2_conv2, s2_conv2 + 1)  # s2_conv2 or the s2 add after it
    with mock.patch.object(prefetch, "PREFETCH_DEPTH", 2):
        near_total, near_host, _ = _run()
    assert near_host > s2_conv2
    assert near_total - total >= 0.015 * near_total
