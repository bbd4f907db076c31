"""The profitability rule layer by layer at a subgraph's edge (compiler/partition/edges.py):
a first conv with one input channel (a KWS net's) lowered as a conv costs the VPU one tap
per output pixel per cycle, and moves to the CPU when that is cheaper there, figures checked
by hand from the target's [host] and [hardware] tables; as an im2col (the planner's choice,
half the cycles) it still does at stride 1; a first conv with 16 input channels stays."""

from __future__ import annotations

import re

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from vpuc.compiler.lower.codegen import tile_im2col

H, W, COUT = 49, 10, 8


def _model(cin: int, kh: int, kw: int):
    """Conv(cin -> 8, kh x kw) -> Relu -> Conv 1x1 (8 -> 16) -> Relu -> Conv 3x3 -> Relu."""
    rng = np.random.default_rng(0)
    shapes = {"w0": (COUT, cin, kh, kw), "w1": (16, COUT, 1, 1), "w2": (16, 16, 3, 3)}
    inits = [numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n) for n, s in shapes.items()]
    nodes = [
        helper.make_node("Conv", ["x", "w0"], ["c0"], name="first"),
        helper.make_node("Relu", ["c0"], ["r0"], name="relu0"),
        helper.make_node("Conv", ["r0", "w1"], ["c1"], name="second"),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="third", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["y"], name="relu2"),
    ]
    out = [1, 16, H - kh + 1, W - kw + 1]
    graph = helper.make_graph(
        nodes,
        "edge",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, H, W])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def _rows(report) -> dict[str, dict]:
    return {row["name"]: row for row in report["ops"]}


def test_one_channel_first_conv_as_a_conv_moves_to_the_cpu_by_hand_figures(partition, monkeypatch):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")  # lowered as a conv, not an im2col
    rows = _rows(partition(_model(1, 10, 4), "vpu"))
    assert rows["first"]["device"] == rows["relu0"]["device"] == "cpu"
    assert {rows[n]["device"] for n in ("second", "relu1", "third", "relu2")} == {"vpu"}
    figures = re.search(
        r"at the edge of VPU subgraph 0, it costs less here \(CPU ([\d.]+) us \+ host<->VPU "
        r"transfers \+([\d.]+) us vs VPU ([\d.]+) us\)",
        rows["first"]["reason"],
    )
    assert figures, rows["first"]["reason"]
    cpu_us, transfer_us, vpu_us = (float(g) for g in figures.groups())
    # CPU, targets/vpu.toml [host]: 2000 MHz, 14 MACs and 52 bytes a cycle, 1336 cycles an op.
    # The conv: 40x7 outputs x 8 channels x 40 taps = 89,600 MACs; float32 bytes of x (490),
    # the weight (320) and the output (2,240). The Relu: 2,240 elements, reads and writes
    # them. The input's NCHW -> NHWC view (one channel: a reshape) moves with it: one op.
    conv = 1336 + 89_600 // 14 + -(-4 * (490 + 320 + 2240) // 52)  # 1336 + 6400 + 235
    relu = 1336 + 2240 // 14 + -(-4 * (2240 + 2240) // 52)  # 1336 + 160 + 345
    assert cpu_us == round((conv + relu + 1336) / 2000, 2) == 5.57
    # Transfers, [hardware]: 2000 cycles + bytes / 8 at 1000 MHz. Before: x crosses (490 int8
    # bytes); after: the Relu's output (2,240 bytes).
    assert transfer_us == round(((2000 + 2240 // 8) - (2000 + -(-490 // 8))) / 1000, 2) == 0.22
    # VPU: one input channel feeds one tap of one pixel a cycle, 8 <= 16 output channels in
    # one column pass: at least 280 pixels x 40 taps cycles at 1000 MHz.
    assert vpu_us >= 280 * 40 / 1000 > cpu_us + transfer_us


def test_one_channel_first_conv_moves_to_the_cpu_even_as_an_im2col_of_kernel_rows(partition, monkeypatch):
    monkeypatch.setattr(tile_im2col, "CHOOSE", "rows")
    rows = _rows(partition(_model(1, 10, 4), "vpu"))
    assert rows["first"]["device"] == rows["relu0"]["device"] == "cpu"
    figures = re.search(r"\(CPU ([\d.]+) us \+ host<->VPU transfers \+([\d.]+) us vs VPU ([\d.]+) us\)",
                        rows["first"]["reason"])  # fmt: skip
    assert figures, rows["first"]["reason"]
    cpu_us, transfer_us, vpu_us = (float(g) for g in figures.groups())
    assert (cpu_us, transfer_us) == (5.57, 0.22)  # as above, by hand
    # The im2col of kernel rows (10 rows x 1 channel fill one block:
    # 4 taps x 280 pixels = 1,120 MAC cycles), but its gather writes 1-byte runs: 10 kernel
    # rows x 40 output rows x 10 columns = 4,000 SRAM-side cycles, and 10 loads of 2 issue +
    # 64 latency cycles: at least 4.66 us at 1000 MHz, half the conv's 11.2 us.
    assert 11.2 > vpu_us >= (4000 + 10 * 66) / 1000
    assert vpu_us > cpu_us + transfer_us


def test_one_channel_first_conv_stays_on_the_vpu_as_a_column_window(partition):
    """The cheapest lowering now: the column window (4 kernel columns x 1 channel a wide
    pixel, 10 kernel rows: 10 blocks x 280 pixels + 16 + 32 = 2,848 MAC cycles, 2.85 us, for
    one band load of whole rows), below the CPU's 5.57 us + 0.22 us of transfers."""
    rows = _rows(partition(_model(1, 10, 4), "vpu"))
    assert rows["first"]["device"] == rows["relu0"]["device"] == "vpu", rows["first"]["reason"]


def test_sixteen_channel_first_conv_stays_on_the_vpu(partition):
    # 47x8 pixels x 9 taps, 16 input channels a cycle: ~3,400 cycles (3.4 us); the CPU's
    # 433,152 MACs alone take 30,939 cycles (15.5 us).
    rows = _rows(partition(_model(16, 3, 3), "vpu"))
    assert {row["device"] for row in rows.values()} == {"vpu"}, rows["first"]["reason"]


def test_without_profitability_nothing_moves(partition):
    rows = _rows(partition(_model(1, 10, 4), "vpu", profitability=False))
    assert {row["device"] for row in rows.values()} == {"vpu"}


def _softmax_head():
    """MatMul (10 -> 16) -> Relu -> Softmax: the Softmax ends the subgraph."""
    weight = numpy_helper.from_array(
        np.random.default_rng(0).standard_normal((10, 16)).astype(np.float32), "w0"
    )
    nodes = [
        helper.make_node("MatMul", ["x", "w0"], ["m"], name="fc"),
        helper.make_node("Relu", ["m"], ["r"], name="relu"),
        helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes,
        "softmax_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])],
        [weight],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


def test_a_softmax_is_not_priced_by_host_figures_not_fitted_on_it(partition, monkeypatch):
    # u55-256-sram's host prices the Softmax at 500 + 16 / 2 + 4 x (16 + 16) / 4 = 540 cycles
    # at 400 MHz (1.35 us), below its VPU time, but that counts no exponential: the host
    # figures are fitted on convs, dense layers, Relu, Add and MaxPool, and the Softmax stays.
    # (On u55-256 the whole head goes to the CPU: its FC's weights come from flash.)
    from vpuc.compiler.partition import edges

    assert _rows(partition(_softmax_head(), "u55-256-sram"))["softmax"]["device"] == "vpu"
    fitted = edges.fitted_kinds()
    monkeypatch.setattr(edges, "fitted_kinds", lambda: fitted | {"softmax"})
    moved = _rows(partition(_softmax_head(), "u55-256-sram"))["softmax"]
    assert moved["device"] == "cpu" and "(CPU 1.35 us + host<->VPU transfers +0.00 us" in moved["reason"]


def test_the_fitted_kinds_are_the_kinds_calibrate_host_probes():
    """The edge rule prices only kinds whose host figures `vpuc calibrate-host` fitted: the
    partitioner's list (it may not import the command) must name exactly the probes' kinds."""
    from vpuc.compiler.partition import edges
    from vpuc.compiler.tune.calibrate import probes

    assert edges.fitted_kinds() == frozenset(probe.view.kind for probe in probes())
