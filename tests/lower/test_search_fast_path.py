"""The search's fast path changes no program (issue 23, compile time): three switches, each
sparing work whose result the search already has or cannot use, must give the programs,
weight blobs and estimates the search gives without them.

- im2col_gather.BAND_MEMO: a gather keeps each band's events (and their cycles) for the
  next candidate that fills the same band;
- tile_im2col.PRUNE: plan_conv skips an im2col whose busy-time bound is outside the slack
  of a lowering it has estimated (the bound's candidates kept for the search that follows);
- tiling.KEEP_FIXED: an Events keeps what its estimate reads of the events whatever the
  clock (units, cycles, keys, dependencies, transfers); prefetch.choose's trials re-estimate
  the layers they do not change with the same Events.

The reference is the compile with all three off, every memo of the code generator empty on
both sides (the lowering memo, the planner's answers, the MAC search's memo), on anchor
models whose first layer is lowered as an im2col or a column window and whose weights are
prefetched, on vpu and u55-256."""

from __future__ import annotations

from pathlib import Path
from unittest import mock

import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.lower import memo
from vpuc.compiler.lower.codegen import im2col_gather, oracle, tile_im2col, tile_mac, tiling

ROOT = Path(__file__).resolve().parents[2]
ANCHORS = ROOT.parent / "shared" / "anchors"
MODELS = {
    "tinyconv_nchw": ANCHORS / "tinyconv" / "tinyconv_int8_qdq_nchw.onnx",
    "resnet8": ANCHORS / "resnet8" / "resnet8_int8_qdq.onnx",
    "tflite_dscnn": ROOT / "tests" / "fixtures" / "tf2onnx" / "tflite_dscnn.onnx",
    "tflite_mobilenet": ROOT / "tests" / "fixtures" / "tf2onnx" / "tflite_mobilenet.onnx",
}
CASES = [
    ("tflite_mobilenet", "vpu"),
    ("tflite_dscnn", "vpu"),
    ("resnet8", "u55-256"),
    ("tinyconv_nchw", "u55-256"),
]


def _compiled(model: Path, target: str, fast: bool) -> tuple[list, int]:
    """The programs as (instructions, blob, estimate, layers' tilings), and how many MAC
    candidates were built, from empty memos."""
    built = []
    build = tile_mac.build_mac

    def counting(*args, **kwargs):
        built.append(1)
        return build(*args, **kwargs)

    with (
        mock.patch.object(memo, "_LOWERED", {}),
        mock.patch.object(oracle, "_ANSWERS", {}),
        mock.patch.object(tile_mac, "_CHOSEN", {}),
        mock.patch.object(tile_mac, "_BOUNDED", {}),
        mock.patch.object(tile_mac, "build_mac", counting),
        mock.patch.object(im2col_gather, "BAND_MEMO", fast),
        mock.patch.object(tile_im2col, "PRUNE", fast),
        mock.patch.object(tiling, "KEEP_FIXED", fast),
    ):
        programs = prepare_model(model, target, CompileOptions()).programs
    found = [
        (p.program.instructions, p.blob, p.estimate, [layer["tiling"] for layer in p.layers])
        for p in programs
    ]
    return found, len(built)


@pytest.mark.parametrize(("name", "target"), CASES)
def test_the_fast_path_compiles_the_programs_of_the_full_search(name, target):
    model = MODELS[name]
    if not model.is_file():
        pytest.skip(f"{model} is not on this machine (../shared/anchors)")
    fast, fast_built = _compiled(model, target, fast=True)
    full, full_built = _compiled(model, target, fast=False)
    assert fast and fast == full
    assert fast_built <= full_built, (fast_built, full_built)
    if name == "tflite_mobilenet":  # its first conv: an im2col whose bound is outside the slack
        assert fast_built < full_built, (fast_built, full_built)


def test_an_im2col_outside_the_slack_is_not_planned(monkeypatch):
    """tflite_mobilenet's first conv on vpu: the packed column window is the fastest
    lowering, and the patches' and kernel rows' gathers bound above its slack, so plan_conv
    plans fewer im2cols than it has, yet keeps the lowering the full search keeps."""
    model = MODELS["tflite_mobilenet"]
    planned, kinds = [], []
    real = tile_im2col._planned

    def recording(op, ctx, gather):
        planned.append(gather.kind)
        return real(op, ctx, gather)

    def offered(op, ctx):
        found = [g for g in (tile_im2col.gather_of(op, ctx), tile_im2col.rows_of(op, ctx),
                             *tile_im2col.columns_of(op, ctx)) if g is not None]  # fmt: skip
        kinds.extend(g.kind for g in found)
        return real_plan(op, ctx)

    real_plan = tile_im2col.plan_conv
    monkeypatch.setattr(tile_im2col, "_planned", recording)
    monkeypatch.setattr(tile_im2col, "plan_conv", offered)
    with mock.patch.object(memo, "_LOWERED", {}), mock.patch.object(oracle, "_ANSWERS", {}), \
            mock.patch.object(tile_mac, "_CHOSEN", {}):  # fmt: skip
        programs = prepare_model(model, "vpu", CompileOptions()).programs
    assert "patches" in kinds and "packed" in kinds
    assert "patches" not in planned and "packed" in planned
    first = programs[0].layers[0]["tiling"]
    assert "output columns a pixel" in first.get("lowering", ""), first


@pytest.mark.parametrize("kind", ["patches", "rows", "columns", "copy"])
def test_a_gathers_kept_bands_are_the_events_it_builds(vpu, kind):
    """A band filled again into another slot, under another key or into another tile gets
    the events a gather without the memo builds (its transfers' addresses name the slot),
    for each gather kind and a padded band (the zero-point fill) and an inner one."""
    from vpuc.compiler.lower.codegen.im2col_gather import ColumnCopy, ColumnWindow, Gather, RowGather
    from vpuc.compiler.lower.codegen.plan import Addr, View
    from vpuc.compiler.lower.codegen.tiling import Context, Events

    cls = {"patches": Gather, "rows": RowGather, "columns": ColumnWindow, "copy": ColumnCopy}[kind]
    view = View("x", 64, (2, 9, 7, 3), 3)
    gather = cls(view, "x", (3, 3), (1, 1), (1, 1, 1, 1), (9, 7), -5)
    calls = [(n, rows, Addr(name, 0, slot), key) for n in (0, 1) for rows in ((0, 3), (3, 6), (0, 3))
             for name, slot in (("L0.in", 0), ("L0.in", 1), ("L2.in", 1)) for key in (0.0, 4.0)]  # fmt: skip

    def built(memo: bool) -> list:
        ev = Events(Context(vpu, None, 0, 0))
        with mock.patch.object(im2col_gather, "BAND_MEMO", memo):
            fresh = cls(**{f: getattr(gather, f) for f in gather.__dataclass_fields__})
            for n, rows, tile, key in calls:
                fresh(ev, n, rows, tile, key)
        return [(e.unit, [(s.cls, s.fields) for s in e.specs], e.key, e.what, e.cycles, e.reads, e.writes,
                 e.tensors) for e in ev.events]  # fmt: skip

    kept = built(True)
    assert kept == built(False)
    assert len({str(e[1]) for e in kept}) >= 2 * 2 * 3  # images x bands x tiles: the calls differ
