"""An FC whose weights dominate streams them under its MACs (issue 21): with no earlier layer
to take its weight load (mac_shape.streams_weights), the search tries input-channel steps
and a lead chunk, so the MAC array starts on a small first block while the rest loads
into the ring's other slot. resnet8's FC (64 -> 10) at u55-256-sram, alone in its subgraph.

The cycles, by hand from targets/u55-256.toml (u55-256-sram: weights over the same AXI0 port
as the feature maps): issue_cycles 8, issued before the wait (an instruction starts 8
cycles before its last token; a conv, with mac_load_order = "before_wait", 8 + 32: its
first weight block's load runs during the wait too); dram 8 B/cycle, latency 32, burst 32, 4 transfers in flight,
one moving data at a time. A block of o output channels is o x 64 weights + 4 o of bias +
8 o of fixed-point parameters: 8 channels 608 B (76 cycles of data), 2 channels 152 B (19).
A conv of 1 pixel over 64 input channels: two 32-row weight blocks, 32 + (32 + 1 + 2 x 2) =
69 cycles (mac_weight_load_cycles 32, mac_fill_cycles 2), plus issue: 77, whatever its
output channels up to 8. A requantisation of 1 pixel: 16 lanes / 4 a cycle + 8 = 12. A
store of 2 or 8 bytes: 8 + 32 + one 32-byte burst (4) = 44.

Unsplit (the tiling before: chunks of 8 then 2; DMA order weights 1, input, weights 2):
weights 1 ends 8 + 32 + 76 = 116; the 64-byte input, behind it on the port, 116 + 8 = 124;
weights 2 124 + 19 = 143. conv 1 124 - 40 = 84 .. 161; requant 1 153 .. 165; conv 2
max(161, 143 - 40) = 161 .. 238; requant 2 230 .. 242; store 2 234 .. 278.
Split (the lead chunk of 2 first, then 8): weights 1 ends 8 + 32 + 19 = 59; input 59 + 8 =
67; weights 2 67 + 76 = 143; conv 1 67 - 40 = 27 .. 104; conv 2 max(104, 143 - 40) = 104
.. 181; requant 2 173 .. 185; store 2 177 .. 221. 221 / 278: 20.5% fewer cycles.
(Before mac_load_order: 310 and 253, each conv starting 32 cycles later.)
"""

from __future__ import annotations

import json
from unittest import mock

import numpy as np
import onnx

from tests.e2e.ort_qdq import quantize_qdq
from vpuc import runtime
from vpuc.compiler import compile_model
from vpuc.compiler.lower.codegen import mac_shape, tile_mac
from vpuc.examples.graph_builder import GraphBuilder
from vpuc.targets import load_target

from .conftest import Builder, simulate

UNSPLIT_CYCLES, SPLIT_CYCLES = 278, 221  # by hand, above
SHARE = 0.18  # the split saves at least this share of the unsplit program's cycles


def _fc():
    b = Builder(seed=6)  # 9 of its 10 outputs within the int8 range, so that a wrong sum shows
    y = b.dense(b.input("x", (1, 1, 1, 64)), "fc", 10)
    return b.subgraph([y])


def _run(target, splits: bool = True, buffers=None):
    """(program, result, outputs, expected) of the FC; `buffers` replaces the tiler's."""
    with mock.patch.object(tile_mac, "_CHOSEN", {}), mock.patch.object(mac_shape, "STREAM_SPLITS", splits):
        if buffers is None:
            return simulate(_fc(), target)
        with mock.patch.object(tile_mac, "_buffers", buffers):
            return simulate(_fc(), target)


def test_the_split_fc_streams_its_weights_under_the_macs():
    target = load_target("u55-256-sram")
    program, result, outputs, expected = _run(target)
    (layer,) = program.layers
    assert layer["tiling"]["first_chunk_channels"] == 2, layer["tiling"]
    unsplit_program, unsplit, unsplit_outputs, _ = _run(target, splits=False)
    assert "first_chunk_channels" not in unsplit_program.layers[0]["tiling"]
    name = program.outputs[0].name
    np.testing.assert_array_equal(outputs[name], expected[name])  # the numpy integer reference
    assert np.count_nonzero(np.abs(expected[name]) < 127) >= 9  # (not saturated)
    np.testing.assert_array_equal(outputs[name], unsplit_outputs[name])  # bit for bit
    assert (unsplit.stats.total_cycles, result.stats.total_cycles) == (UNSPLIT_CYCLES, SPLIT_CYCLES)
    assert result.stats.total_cycles <= (1 - SHARE) * unsplit.stats.total_cycles
    assert abs(program.estimate["cycles"] - result.stats.total_cycles) <= 0.04 * result.stats.total_cycles


def test_without_the_overlap_the_split_saves_nothing():
    """The ring of weight blocks cut to one slot: the second block's load waits for the first
    block's MACs and requantisation (which reads its parameters), so no split beats the
    unsplit program by SHARE: the saving above is the overlap's."""
    target = load_target("u55-256-sram")
    single = tile_mac._buffers

    def one_slot(*args, **kwargs):
        found = single(*args, **kwargs)
        found["w"].slots = 1
        return found

    _, unsplit, _, _ = _run(target, splits=False)
    _, result, outputs, expected = _run(target, buffers=one_slot)
    name = next(iter(outputs))
    np.testing.assert_array_equal(outputs[name], expected[name])
    assert result.stats.total_cycles > (1 - SHARE) * unsplit.stats.total_cycles


def _fc_model() -> onnx.ModelProto:
    """resnet8's classifier as a user exports it: Gemm 64 -> 10 on a [1, 64] input."""
    b = GraphBuilder("fc_stream", seed=3)
    out = b.gemm("x", "fc", 64, 10, output="logits")
    return b.model({"x": [1, 64]}, {out: [1, 10]})


def test_the_split_fc_matches_onnxruntime_and_the_unsplit_program(vpuc, tmp_path):
    """Through the whole compiler at u55-256 (weights in flash) and u55-256-sram: the FC on
    the VPU with a streamed tiling, within 1 LSB of onnxruntime's QDQ model (`vpuc run
    --check`), and bit for bit the unsplit program's outputs on the same inputs."""
    qdq = quantize_qdq(_fc_model(), tmp_path, [1, 64], seed=2, scale=2.0)[1]
    inputs = {"x": np.random.default_rng(4).normal(0, 2, (1, 64)).astype(np.float32)}
    for target in ("u55-256", "u55-256-sram"):
        artifact = compile_model(qdq, target=target, profitability=False)
        (fc,) = [row for row in artifact.report["vpu"]["layers"] if row["op"] == "dense"]
        tiling = fc["tiling"]
        assert tiling.get("first_chunk_channels") or tiling["input_channel_steps"] > 1, tiling
        path = artifact.save(tmp_path / f"{target}.vpub")
        ran = vpuc("run", path, "--check", qdq, "--json")
        assert ran.returncode == 0, ran.stderr
        check = json.loads(ran.stdout)["check"]
        assert check["passed"] and all(o["max_lsb"] <= 1 for o in check["qdq"]["outputs"]), check
        with mock.patch.object(mac_shape, "STREAM_SPLITS", False):
            unsplit = compile_model(qdq, target=target, profitability=False)
        (row,) = [row for row in unsplit.report["vpu"]["layers"] if row["op"] == "dense"]
        assert row["tiling"] != tiling
        ours = runtime.load(path).run(inputs)
        theirs = runtime.load(unsplit.save(tmp_path / f"{target}.unsplit.vpub")).run(inputs)
        for name in ours:
            np.testing.assert_array_equal(ours[name], theirs[name])
