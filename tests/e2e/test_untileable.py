"""A VPU layer that cannot be tiled into the target's SRAM gets a reason in the partition
report and runs on the CPU: whether the op list's fits_sram check refuses it, or (with that
check switched off) the code generator's tiler does; never a crash in the tiler."""

from __future__ import annotations

import onnx
import pytest

from vpuc.compiler import compile_model
from vpuc.examples.graph_builder import GraphBuilder


def _model(path):
    b = GraphBuilder("one_conv", seed=7)
    y = b.op("Relu", [b.conv("x", "conv", 32, 64)], "relu", output="y")
    onnx.save(b.model({"x": [1, 32, 16, 16]}, {y: [1, 64, 16, 16]}), path)
    return path


@pytest.mark.parametrize(
    "extra,reason",
    [
        ("", "must fit in SRAM"),
        ("[ops.conv2d]\nfits_sram = false\n", "the VPU code generator cannot lower it"),
    ],
    ids=["op-list check", "tiler"],
)
def test_a_layer_too_big_for_sram_stays_on_the_cpu_with_a_reason(tmp_path, extra, reason):
    target = tmp_path / "tiny.toml"
    target.write_text(f'[target]\nname = "tiny"\ninherit = "vpu"\n[hardware]\nsram_bytes = 2048\n{extra}')
    artifact = compile_model(_model(tmp_path / "m.onnx"), target=target, calib_synthetic=4, reference=False)
    conv = next(op for op in artifact.report["ops"] if op["name"] == "conv")
    assert conv["device"] == "cpu" and reason in conv["reason"], conv["reason"]
    assert artifact.manifest["vpu_programs"] == []
