"""The MAC planner's speedups change no choice: its memo (tile_mac._CHOSEN, per layer
geometry and context) and the busy-time bound that skips estimating a candidate.

Each subgraph is lowered at several SRAM sizes (which change the budgets, so the tilings);
the programs and weight blobs must be the bytes an unmemoised, unpruned search gives."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower import ops as vops
from vpuc.compiler.lower.codegen import tile_mac, tiling
from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.compiler.lower.codegen.mac_shape import search_groups
from vpuc.compiler.lower.codegen.plan import Addr, Spec
from vpuc.compiler.lower.codegen.tiling import Events
from vpuc.targets import load_target
from vpuc.targets.isa.cost import instruction_cycles
from vpuc.targets.isa.formats import Conv, Opcode

from .conftest import Builder, with_sram

SRAM_SIZES = (12 * 1024, 14 * 1024, 16 * 1024, 64 * 1024)  # four different tilings


def _subgraph(seed: int):
    b = Builder(seed)
    x = b.input("x", (1, 15, 13, 24))
    y = b.conv(x, "c1", 40, stride=(2, 2), relu=True)
    y = b.conv(y, "c2", 40, k=(1, 1), pads=(0, 0, 0, 0))
    y = b.conv(y, "dw", 40, groups=40, relu=True)
    return b.subgraph([b.dense(y, "fc", 10)])


def _lowered(subgraph, target) -> tuple[bytes, bytes]:
    program = lower_subgraph(subgraph, target)
    return program.program.to_bytes(), program.blob


def _reference(subgraph, target, monkeypatch) -> tuple[bytes, bytes]:
    """Without the memo and without the bound (every fitting candidate estimated)."""
    with monkeypatch.context() as patch:
        patch.setattr(tile_mac, "_CHOSEN", {})
        patch.setattr(tile_mac, "busy_bound", lambda *args: 0)
        found = _lowered(subgraph, target)
        assert len(tile_mac._CHOSEN) > 0  # the patched memo was the one used
    return found


def test_memoised_plans_equal_a_fresh_search(vpu, monkeypatch):
    subgraph = _subgraph(3)
    monkeypatch.setattr(tile_mac, "_CHOSEN", {})
    for sram in SRAM_SIZES + SRAM_SIZES:  # the second round reads the memo only
        target = with_sram(vpu, sram)
        assert _lowered(subgraph, target) == _reference(subgraph, target, monkeypatch), sram
    tilings = {
        str([layer["tiling"] for layer in lower_subgraph(subgraph, with_sram(vpu, s)).layers])
        for s in SRAM_SIZES
    }
    assert len(tilings) == len(SRAM_SIZES)  # the sizes do reach different choices
    keys = len(tile_mac._CHOSEN)
    _lowered(subgraph, with_sram(vpu, SRAM_SIZES[0]))
    assert len(tile_mac._CHOSEN) == keys  # a repeated lowering searched nothing new


def test_another_subgraph_with_the_same_shapes_is_not_confused(vpu, monkeypatch):
    """Same geometry, other weights and quantisation: the memo may give the same tiling,
    but the program carries this subgraph's weights and requantisation."""
    monkeypatch.setattr(tile_mac, "_CHOSEN", {})
    target = with_sram(vpu, SRAM_SIZES[1])
    first, second = _subgraph(3), _subgraph(4)
    _lowered(first, target)
    assert _lowered(second, target) == _reference(second, target, monkeypatch)


@pytest.mark.parametrize("sram", SRAM_SIZES)
def test_busy_bound_never_exceeds_the_estimate(vpu, monkeypatch, sram):
    """The bound is sound: for every candidate the search builds, the MAC array's or the
    vector unit's total busy time is at most the estimate's cycles (else pruning on it
    could drop the fastest candidate)."""
    pairs = []
    estimate = Events.estimate

    def checked(self, clock, output=None):
        cycles = estimate(self, clock, output)
        pairs.append((tile_mac._busy_bound(self), cycles))
        return cycles

    monkeypatch.setattr(tile_mac, "_CHOSEN", {})
    monkeypatch.setattr(Events, "estimate", checked)
    lower_subgraph(_subgraph(5), with_sram(vpu, sram))
    assert len(pairs) > 4
    assert all(bound <= cycles for bound, cycles in pairs), [p for p in pairs if p[0] > p[1]]
    assert any(bound > 0 for bound, _ in pairs)


@pytest.mark.parametrize("sram", SRAM_SIZES[:2])
def test_busy_bound_is_one_per_band_chunk_and_split(vpu, monkeypatch, sram):
    """The search skips building a candidate whose (band, chunk, input step, vector split)
    it already built outside the slack: that candidate issues the same MAC and vector
    instructions, only its weights' residency and its loop order differ (DMA work and
    addresses), so its busy-time bound is the same. Every candidate of every layer built,
    the bounds of one (band, chunk, cin, vector) agree."""
    searched = []
    search = tile_mac._search

    def recording(op, ctx, shape, x_dram, y_dram, gather=None):
        searched.append((op, ctx, shape, x_dram, gather))
        return search(op, ctx, shape, x_dram, y_dram, gather)

    monkeypatch.setattr(tile_mac, "_CHOSEN", {})
    monkeypatch.setattr(tile_mac, "_search", recording)
    lower_subgraph(_subgraph(6), with_sram(vpu, sram))
    variants = 0
    for op, ctx, shape, x_dram, gather in searched:
        bounds: dict[tuple, set] = {}
        for group in search_groups(shape, ctx, gather is not None):
            for choice in group:
                if choice.order == "chunks" and (choice.whole or not x_dram):
                    continue
                _, events = tile_mac.build_mac(op, ctx, shape, choice, gather)
                key = (choice.band, choice.chunk, choice.cin, choice.vector, choice.lead)
                bounds.setdefault(key, set()).add(tile_mac._busy_bound(events))
        assert all(len(found) == 1 for found in bounds.values()), op.name
        variants += len(bounds)
    assert len(searched) >= 4 and variants > 20
    splits = {c.vector for _, ctx, shape, _, _ in searched for c in search_groups(shape, ctx, False)[0]}
    assert len(splits) > 1  # the depthwise layer's vector splits are among them


def test_layers_of_one_geometry_share_one_search(vpu, monkeypatch):
    """Two layers alike but for their names, positions and weights (a MobileNet's repeated
    blocks) are searched once: the search's ranking reads neither (tile_mac._search_key),
    and the program is still the bytes an unmemoised search gives. Once per ranking: the
    layers whose weights an earlier layer may load are planned twice (emit.lower_subgraph:
    ranked without that load, then with it), the first layer once (nothing before it)."""
    b = Builder(7)
    b.q = lambda: vops.QParams(0.02, 3)  # one quantisation for every tensor
    y = b.input("x", (1, 12, 12, 16))
    for name in ("first", "second", "third", "last"):  # the input and output are in DRAM
        y = b.conv(y, name, 16)
    subgraph = b.subgraph([y])
    searched = []
    search = tile_mac._search

    def recording(op, ctx, shape, x_dram, y_dram, gather=None):
        searched.append((op.name, ctx.index))
        return search(op, ctx, shape, x_dram, y_dram, gather)

    target = with_sram(vpu, SRAM_SIZES[-1])
    monkeypatch.setattr(tile_mac, "_CHOSEN", {})
    monkeypatch.setattr(tile_mac, "_search", recording)
    found = _lowered(subgraph, target)
    assert [name for name, _ in searched] == ["first", "second", "last", "second", "last"], searched
    monkeypatch.setattr(tile_mac, "_search", search)
    assert found == _reference(subgraph, target, monkeypatch)


def test_instruction_cycles_memo_answers_what_the_isa_charges(monkeypatch):
    """tiling.spec_cycles, memoised by the spec's class, field names and values (addresses
    as 0), gives the ISA's cost function's cycles (targets/isa/cost.py, the simulator's) for
    instructions that differ only in opcode, in a field present or left to its default, or
    in their addresses; asked twice, the memo's answer."""
    target = load_target("vpu-plus")  # vconv: a depthwise conv on the vector unit
    fields = dict(in_h=6, in_w=7, in_c=16, out_c=16, kernel_h=3, kernel_w=3, groups=16, pad_top=1)
    specs = [
        Spec(Conv, {**fields, "src": Addr("x", 64), "weights": Addr("w"), "dst": Addr("acc", 0, 1)}),
        Spec(Conv, {**fields, "src": Addr("y", 8), "weights": Addr("v", 4), "dst": Addr("acc")}),
        Spec(
            Conv, {**fields, "opcode": Opcode.VCONV, "src": Addr("x"), "weights": Addr("w"), "dst": Addr("a")}
        ),
        Spec(Conv, {**fields, "pad_bottom": 1, "src": Addr("x"), "weights": Addr("w"), "dst": Addr("acc")}),
        Spec(Conv, {**fields, "stride_h": 2, "src": Addr("x"), "weights": Addr("w"), "dst": Addr("acc")}),
    ]
    monkeypatch.setattr(tiling, "_CYCLES", {})
    expected = [instruction_cycles(spec.build(lambda addr: 0), target.hardware) for spec in specs]
    assert len(set(expected)) == 4  # the opcode and the padding and stride change the cost
    for _ in range(2):
        assert [tiling.spec_cycles(spec, target) for spec in specs] == expected
