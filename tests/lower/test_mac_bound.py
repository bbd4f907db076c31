"""The MAC planner's busy-time bound from a candidate's shape (mac_bound.busy_bound) is the
one its events give (mac_bound.events_bound: the MAC array's and the vector unit's totals,
the MAC array's with the transfers before its first instruction and the requantisation and
store after its last) and at most the candidate's estimate,
for every candidate of every layer searched, on a spread of shapes: strided, dilated,
grouped and depthwise convs (their vector-unit shares on vpu-plus), batches of two, a
kernel past the conv limits (sub-kernels), channels-poor inputs (im2col gathers), a dense
layer, SRAM small enough that input channels split, and layers whose weights dominate (an FC,
a conv over a small map: input-channel steps and lead chunks). The search prunes on it before
building: were it above the events' bound it could drop the fastest candidate."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower.codegen import tile_mac
from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.mac_bound import busy_bound, events_bound, ranked
from vpuc.compiler.lower.codegen.mac_shape import _choices
from vpuc.targets import load_target

from .conftest import Builder, with_sram


def _convs(seed: int):
    b = Builder(seed)
    x = b.input("x", (1, 15, 13, 24))
    y = b.conv(x, "c1", 40, stride=(2, 2), relu=True)
    y = b.conv(y, "c2", 40, k=(1, 1), pads=(0, 0, 0, 0))
    y = b.conv(y, "dw", 40, groups=40, relu=True)
    y = b.conv(y, "dws2", 40, groups=40, stride=(2, 2))
    return b.subgraph([b.dense(y, "fc", 10)])


def _odd(seed: int):
    b = Builder(seed)
    x = b.input("x", (2, 11, 9, 16))
    y = b.conv(x, "dil", 24, dilation=(2, 2), pads=(2, 2, 2, 2))
    y = b.conv(y, "grp", 32, groups=4, stride=(1, 2))
    y = b.conv(y, "wide", 300, k=(1, 1), pads=(0, 0, 0, 0))
    return b.subgraph([b.conv(y, "deep", 20, k=(1, 1), pads=(0, 0, 0, 0))])


def _gathered(seed: int):
    b = Builder(seed)
    x = b.input("x", (1, 20, 24, 3))
    y = b.conv(x, "rgb", 40, stride=(2, 2), relu=True)
    y = b.conv(y, "big", 8, k=(9, 9), pads=(2, 2, 2, 2))
    return b.subgraph([b.conv(y, "tall", 8, k=(9, 1), pads=(3, 0, 3, 0))])


def _streamed(seed: int):
    """A conv whose weights dominate, first in its subgraph (no earlier layer to take their
    load): the search tries input-channel steps and lead chunks (mac_shape.streams_weights)."""
    b = Builder(seed)
    return b.subgraph([b.conv(b.input("x", (1, 4, 4, 72)), "small_map", 20)])


def _fc(seed: int):
    """resnet8's FC (64 -> 10) alone, as _streamed."""
    b = Builder(seed)
    return b.subgraph([b.dense(b.input("v", (1, 1, 1, 64)), "fc", 10)])


def _searched(subgraph, target, monkeypatch) -> list[tuple]:
    found = []
    search = tile_mac._search

    def recording(op, ctx, shape, x_dram, y_dram, gather=None):
        found.append((op, ctx, shape, x_dram, gather))
        return search(op, ctx, shape, x_dram, y_dram, gather)

    with monkeypatch.context() as patch:
        patch.setattr(tile_mac, "_CHOSEN", {})
        patch.setattr(tile_mac, "_search", recording)
        lower_subgraph(subgraph, target)
    return found


CASES = [
    (_convs, "vpu", 64 * 1024),
    (_convs, "vpu-plus", 1 << 20),
    (_odd, "vpu", 12 * 1024),
    (_odd, "u55-256", 48 * 1024),
    (_gathered, "vpu", 64 * 1024),
    (_gathered, "vpu-plus", 2 << 20),
    (_streamed, "u55-256", 48 * 1024),
    (_streamed, "u55-256-sram", 48 * 1024),
    (_fc, "u55-256", 48 * 1024),
    (_fc, "u55-256-sram", 48 * 1024),
]


@pytest.mark.parametrize(("build", "target", "sram"), CASES)
def test_bound_from_the_shape_is_the_events_bound(build, target, sram, monkeypatch):
    searched = _searched(build(7), with_sram(load_target(target), sram), monkeypatch)
    compared, pieces_seen, gathers, splits, cin_steps, leads = 0, 0, 0, set(), 0, set()
    for op, ctx, shape, x_dram, gather in searched:
        pieces = tile_mac.layer_pieces(op, shape, ctx)
        pieces_seen = max(pieces_seen, len(pieces))
        gathers += gather is not None
        memo: dict = {}
        for group in _choices(shape, ctx)[:1] if gather else _choices(shape, ctx):
            for choice in group:
                if choice.order == "chunks" and (choice.whole or not x_dram):
                    continue
                plan, events = tile_mac.build_mac(op, ctx, shape, choice, gather)
                events = ranked(events, plan)  # as the search ranks it (a hoisted first weight load left out)
                expected = events_bound(events)
                assert busy_bound(op, ctx, shape, choice, pieces, gather, memo) == expected, (op.name, choice)
                assert busy_bound(op, ctx, shape, choice, pieces, gather) == expected  # without the memo
                assert expected <= events.estimate(Clock()), (op.name, choice)  # a bound: sound to prune on
                compared += 1
                splits.add(choice.vector)
                cin_steps = max(cin_steps, -(-shape.cin // choice.cin))
                leads.add(choice.lead)
    assert compared > 50 and len(searched) >= 3 or build is _fc and compared > 10
    if build is _convs and target == "vpu-plus":
        assert len(splits) > 1  # the depthwise layers' vector-unit shares were among them
    if build is _gathered:
        assert gathers and pieces_seen > 1  # im2col gathers and sub-kernels were among them
    if build is _odd and target == "vpu":
        assert cin_steps > 1  # input channels split into accumulated steps
    if build in (_streamed, _fc):  # the streaming tilings: input-channel steps and lead chunks
        assert cin_steps > 1 and leads > {0}
