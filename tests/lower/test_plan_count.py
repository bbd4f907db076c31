"""The MAC planner builds fewer candidates and chooses the same: on MobileNet-like blocks at
several SRAM sizes and targets, tile_mac._search (its bound from the shape, the least bound
built first) against the search it replaced (every fitting candidate built in _choices'
order unless one of the same MAC and vector work was already built outside the slack; its
bound from the events) and against building every fitting candidate: the same programs and
weight blobs, and fewer candidates built than either."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower.codegen import mac_shape, tile_mac
from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.compiler.lower.codegen.estimate import Clock
from vpuc.compiler.lower.codegen.mac_shape import search_groups
from vpuc.compiler.lower.errors import LowerError
from vpuc.targets import load_target

from .conftest import Builder, with_sram


def _mobilenet_blocks(seed: int):
    b = Builder(seed)
    y = b.conv(b.input("x", (1, 32, 32, 3)), "stem", 16, stride=(2, 2), relu=True)
    for i, (cout, stride) in enumerate(((32, 1), (64, 2), (64, 1), (128, 2))):
        cin = b.tensors[y].shape[3]
        y = b.conv(y, f"dw{i}", cin, groups=cin, stride=(stride, stride), relu=True)
        y = b.conv(y, f"pw{i}", cout, k=(1, 1), pads=(0, 0, 0, 0), relu=True)
    return b.subgraph([b.dense(y, "fc", 10)])


def _previous_search(op, ctx, shape, x_dram, y_dram, gather=None):
    """The search before the bound from the shape (tile_mac at 3e4fb57), for comparison."""
    scored, fastest, busy = [], None, {}
    for group in search_groups(shape, ctx, gather is not None):
        for choice in group:
            if choice.order == "chunks" and (choice.whole or not x_dram):
                continue
            buffers = tile_mac._buffers(
                shape, choice, ctx, x_dram, y_dram, mac_shape.tile_count(shape, choice), gather
            )
            if tile_mac.working_set(list(buffers.values())) > ctx.budget:
                continue
            same_work = (choice.band, choice.chunk, choice.cin, choice.vector, choice.lead)
            if fastest is not None and busy.get(same_work, 0) > fastest * (1 + tile_mac.TRAFFIC_SLACK):
                continue
            plan, events = tile_mac.build_mac(op, ctx, shape, choice, gather)
            busy[same_work] = tile_mac._busy_bound(events)
            if fastest is not None and busy[same_work] > fastest * (1 + tile_mac.TRAFFIC_SLACK):
                continue
            cycles = tile_mac.ranked(events, plan).estimate(Clock())  # (as the search ranks, since issue 21)
            fastest = cycles if fastest is None else min(fastest, cycles)
            scored.append((cycles, plan.dram_read_bytes + plan.dram_write_bytes, choice))
        if scored:
            break
    if not scored:
        raise LowerError(f"layer '{op.name}': no tiling fits the {ctx.budget} bytes of SRAM left for it")
    return tile_mac._least_traffic(scored)


def _lowered(subgraph, target, monkeypatch, search=None, bound=None) -> tuple[bytes, bytes, int]:
    """(program, blob, candidates built by the searches)."""
    built = [0]
    build, in_search = tile_mac.build_mac, [False]
    own_search = search or tile_mac._search

    def counting_build(*args):
        built[0] += in_search[0]
        return build(*args)

    def counting_search(*args):
        in_search[0] = True
        try:
            return own_search(*args)
        finally:
            in_search[0] = False

    with monkeypatch.context() as patch:
        patch.setattr(tile_mac, "_CHOSEN", {})
        patch.setattr(tile_mac, "build_mac", counting_build)
        patch.setattr(tile_mac, "_search", counting_search)
        if bound is not None:
            patch.setattr(tile_mac, "busy_bound", bound)
        program = lower_subgraph(subgraph, target)
    return program.program.to_bytes(), program.blob, built[0]


@pytest.mark.parametrize(
    ("target", "sram"),
    [("vpu", 24 * 1024), ("vpu", 96 * 1024), ("vpu-plus", 64 * 1024), ("u55-256", 48 * 1024)],
)
def test_fewer_candidates_built_same_choices(target, sram, monkeypatch):
    subgraph, target = _mobilenet_blocks(11), with_sram(load_target(target), sram)
    *now, built_now = _lowered(subgraph, target, monkeypatch)
    *before, built_before = _lowered(subgraph, target, monkeypatch, search=_previous_search)
    *every, built_every = _lowered(subgraph, target, monkeypatch, bound=lambda *args: 0)
    assert now == before == every  # the same programs and weight blobs
    assert built_now < built_before <= built_every, (built_now, built_before, built_every)
