"""Checkpoints (compiler/lower/codegen/checkpoints.py): where `vpuc run --check` reads each
tensor while the program runs. Cascaded layers interleave, so a band of a tensor may be
read by its consumer and its bytes taken by a later layer before the producer writes its
last band: one probe after the producer's last instruction would read the later layer's
bytes there (resnet_mini on vpu-plus failed `--check` so, 253 LSB at block1/conv2 while
its logits were exact). Such a tensor is read in pieces, each while its bytes are the
tensor's."""

from __future__ import annotations

import numpy as np

from vpuc.compiler.lower.codegen.checkpoints import NEVER, pieces, windows
from vpuc.sim import Probe, Simulator
from vpuc.targets import load_target
from vpuc.targets.isa.formats import Clip
from vpuc.targets.isa.program import Program

from .conftest import Builder, simulate


def test_a_band_overwritten_before_the_last_band_is_written_is_read_before_that():
    """T: 4 pixels x 8 channels at SRAM 1000. Layer 1 writes pixels 0-1 (pc 0), layer 2 reads
    them (pc 1), layer 3 takes T's first 8 bytes for itself (pc 2), layer 1 writes pixels 2-3
    (pc 3). By hand: bytes 0-7 are T's after pc 0 or 1, bytes 8-15 from pc 0 on, bytes 16-31
    from pc 3 on; so a probe after pc 1 takes bytes 0-15 and one after pc 3 bytes 16-31."""
    program = Program(
        [
            Clip(layer=1, src=0, dst=1000, count=16),
            Clip(layer=2, src=1000, dst=2000, count=16),
            Clip(layer=3, src=3000, dst=1000, count=8),
            Clip(layer=1, src=16, dst=1016, count=16),
            Clip(layer=2, src=1016, dst=2016, count=16),
        ]
    )
    spec = {"memory": "sram", "address": 1000, "pixels": 4, "channels": 8, "pixel_stride": 8, "pc": 3}
    [(first, end)] = windows(program, "float", [spec], [{1}])
    assert first.tolist() == [0] * 16 + [3] * 16
    assert end.tolist() == [2] * 8 + [NEVER] * 24
    assert pieces(first, end, np.ones(32, bool), 3) == [[1, 0, 16], [3, 16, 16]]


def test_bytes_between_pixels_bridge_two_runs_read_at_the_same_pc():
    """4 pixels of 2 channels at a stride of 4 bytes, the first written at pc 0 and
    overwritten at pc 5, the others written at pc 6: the gap bytes are no one's, so the
    three pixels read after pc 7 are one run, the gaps between them taken along."""
    mask = np.array([1, 1, 0, 0] * 3 + [1, 1], bool)
    first = np.array([0] * 4 + [6] * 10, np.int64)
    end = np.array([5] * 4 + [NEVER] * 10, np.int64)
    assert pieces(first, end, mask, 7) == [[4, 0, 2], [7, 4, 10]]


def _resnet_block():
    """resnet_mini's first block and the start of its second, from a 3-channel 32x32 input:
    on vpu-plus the two convs of block 1, its add and block 2's first conv are cascaded one
    onto the next, and that conv's accumulators take the bytes of block 1's second conv's
    first rows (read by the add already) before that conv's last band is written."""
    b = Builder(seed=3)
    x = b.input("x", (1, 32, 32, 3))
    stem = b.conv(x, "stem", 16)
    conv2 = b.conv(b.conv(stem, "c1", 16), "c2", 16)
    add = b.add(conv2, stem, "add")
    conv4 = b.conv(b.conv(add, "c3", 32, stride=(2, 2)), "c4", 32)
    down = b.conv(add, "down", 32, k=(1, 1), stride=(2, 2), pads=(0, 0, 0, 0))
    return b.subgraph([b.add(conv4, down, "add2")])


def test_every_checkpoint_reads_its_tensor_as_the_numpy_reference_computes_it():
    target = load_target("vpu-plus")
    program, _, _, expected = simulate(_resnet_block(), target)
    tensors = program.checkpoints["tensors"]
    assert any("pieces" in spec for spec in tensors)  # the case this test is about
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    rng = np.random.default_rng(1)  # the inputs simulate() gave
    for binding in program.inputs:
        x = rng.integers(-128, 128, binding.shape).astype(np.int8)
        image[binding.dram_address : binding.dram_address + x.size] = x.reshape(-1).view(np.uint8)
    probes = {}
    for spec in tensors:  # as docs/artifact.md defines `pieces`: [pc, offset, nbytes]
        span = (spec["pixels"] - 1) * spec["pixel_stride"] + spec["channels"]
        taken = spec.get("pieces", [[spec["pc"], 0, span]])
        probes[spec["name"]] = [(o, Probe(pc, spec["memory"], spec["address"] + o, n)) for pc, o, n in taken]
    result = Simulator(target).run(
        program.program, image, probes=[p for ps in probes.values() for _, p in ps]
    )
    for spec in tensors:
        raw = np.zeros(spec["pixels"] * spec["pixel_stride"], np.uint8)
        for offset, probe in probes[spec["name"]]:
            raw[offset : offset + probe.nbytes] = result.captures[probe]
        got = raw.reshape(spec["pixels"], -1)[:, : spec["channels"]].view(np.int8)
        want = expected[spec["name"]].reshape(spec["pixels"], spec["channels"])
        assert (got != want).sum() == 0, spec["name"]
