"""Ranking a conv's tilings without the first weight load an earlier layer hides
(mac_bound.ranked; emit.lower_subgraph keeps the program the estimate finds faster).

The subgraph is tinyconvnet's trunk on `vpu`: x (16x16x3, DRAM) -> conv 8 -> conv 16 ->
max pool 2x2 -> conv 3x3 16 -> 32 ("c3", 8x8) -> conv 3x3 32 -> 32 ("c4") -> max pool -> y.
Ranked alone with its whole weights' load in front, c4 took two chunks of 16 output
channels, each one conv instruction over the 8 rows (its first 4,736-byte block loads
sooner than the 9,472 bytes of both); the load runs under the layers before either way.
By hand, from targets/vpu.toml and targets/isa/cost.py (`mac_cycles`: the first block's
weight load, mac_weight_load_cycles = 16, then every block streams its pixels while the
next loads, max(pixels, 16) each but the last, then the array's drain, mac_rows + mac_cols
= 32, plus issue_cycles = 2), a block being one 16 x 16 weight tile of one kernel tap:
- c4 as two chunks: 9 taps x 2 input blocks = 18 blocks of 64 pixels each,
  2 + 16 + 17 x 64 + 64 + 32 = 1,202 cycles, twice: 2,404;
- c4 as one chunk of 32: 36 blocks, 2 + 16 + 35 x 64 + 64 + 32 = 2,354 cycles;
- c3 likewise: 9 blocks a chunk, 2 + 16 + 8 x 64 + 64 + 32 = 626 twice (1,252), or 18 in
  one instruction, 2 + 16 + 17 x 64 + 64 + 32 = 1,202.
And c4 then waits for one requantisation of c3's 64 pixels x 32 channels instead of the
second chunk's (64 vectors either way: 5 SRAM bytes an element at 128 a cycle, 80 + 2).
"""

from __future__ import annotations

import numpy as np

from vpuc.compiler.lower.codegen import mac_bound
from vpuc.targets.isa.formats import Conv

from .conftest import Builder, simulate


def _trunk():
    b = Builder(seed=3)
    x = b.input("x", (1, 16, 16, 3))
    y = b.conv(x, "c1", 8, relu=True)
    y = b.conv(y, "c2", 16, relu=True)
    y = b.pool(y, "p2", "max", (2, 2), (2, 2))
    y = b.conv(y, "c3", 32, relu=True)
    y = b.conv(y, "c4", 32, relu=True)
    return b.subgraph([b.pool(y, "p4", "max", (2, 2), (2, 2))])


def _mac_cycles(vpu, monkeypatch, on: bool) -> tuple[dict[str, list[int]], int]:
    """Per conv layer its conv instructions' cycles, and the program's; bit-exact with the
    numpy int8 reference."""
    monkeypatch.setattr(mac_bound, "RANK_HIDDEN", on)
    program, result, outputs, expected = simulate(_trunk(), vpu)
    for name, got in outputs.items():
        np.testing.assert_array_equal(got, expected[name])
    names, timeline = program.program.layer_names, result.timeline
    found: dict[str, list[int]] = {}
    for pc, instruction in enumerate(program.program.instructions):
        if isinstance(instruction, Conv):
            found.setdefault(names[instruction.layer], []).append(timeline.end[pc] - timeline.start[pc])
    return found, result.stats.total_cycles


def test_the_last_convs_take_all_their_channels_at_once(vpu, monkeypatch):
    found, _ = _mac_cycles(vpu, monkeypatch, True)
    assert found["c3"] == [1202]
    assert found["c4"] == [2354]


def test_ranked_with_the_load_they_took_two_chunks(vpu, monkeypatch):
    """The switch off: the tilings as before (the hand figures of two chunks)."""
    found, _ = _mac_cycles(vpu, monkeypatch, False)
    assert found["c3"] == [626, 626]
    assert found["c4"] == [1202, 1202]


def test_the_program_is_no_slower(vpu, monkeypatch):
    _, before = _mac_cycles(vpu, monkeypatch, False)
    _, after = _mac_cycles(vpu, monkeypatch, True)
    assert after <= before - 50  # c3 and c4 one instruction each: 2 x 50 fewer on the MAC array


def test_a_ranking_that_does_not_fit_falls_back_to_the_tilings_as_before(vpu, monkeypatch):
    """Planned without the hidden loads first, a subgraph whose program then fits no SRAM
    (larger weight buffers) is lowered as before: the ranking never turns a program that
    fits into an error."""
    from vpuc.compiler.lower.codegen import emit
    from vpuc.compiler.lower.errors import SramError

    lowered = emit._lowered

    def failing_when_ranked_hidden(subgraph, target):
        if mac_bound.RANK_HIDDEN:
            raise SramError("does not fit")
        return lowered(subgraph, target)

    monkeypatch.setattr(emit, "_lowered", failing_when_ranked_hidden)
    program = emit.lower_subgraph(_trunk(), vpu)
    monkeypatch.setattr(mac_bound, "RANK_HIDDEN", False)
    assert program.program.instructions == emit.lower_subgraph(_trunk(), vpu).program.instructions
