"""Layout changes at the subgraph's edge by the program's DMA: a model input in NCHW reaches
the VPU channels-first (the host quantises it as it is, no transpose pass), the program's
interleaving loads put each band's channels last, and the result is unchanged. The host
transposes an input only where the program cannot take it channels-first, and says why."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import tvm

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower.codegen.emit import lower_subgraph
from vpuc.compiler.lower.reader.edges import mark_edge, take_channels_first
from vpuc.runtime import load
from vpuc.sim import Simulator
from vpuc.targets import load_target

from .conftest import Builder
from .int8_reference import run_subgraph

TARGETS = ("vpu", "vpu-plus", "u55-256")


def _stem(channels: int) -> Builder:
    """x 1x12x10xC -> conv 3x3 (8 channels, relu) -> conv 3x3 stride 2 -> max pool 2x2."""
    b = Builder(seed=channels)
    x = b.input("x", (1, 12, 10, channels))
    y = b.conv(x, "stem", 8, relu=True)
    y = b.conv(y, "mid", 16, stride=(2, 2))
    b.pool(y, "pool", "max", (2, 2), (2, 2))
    return b


def _run_nchw(program, subgraph, target, x_nhwc: np.ndarray) -> np.ndarray:
    """The program run on the simulator with x in DRAM channels-first: its output."""
    image = np.zeros(program.dram_bytes, np.uint8)
    image[: len(program.blob)] = np.frombuffer(program.blob, np.uint8)
    (binding,) = program.inputs
    assert binding.layout == "NCHW" and binding.shape == x_nhwc.transpose(0, 3, 1, 2).shape
    nchw = np.ascontiguousarray(x_nhwc.transpose(0, 3, 1, 2))
    image[binding.dram_address : binding.dram_address + nchw.size] = nchw.reshape(-1).view(np.uint8)
    result = Simulator(target).run(program.program, image)
    (out,) = program.outputs
    return (
        result.dram[out.dram_address : out.dram_address + math.prod(out.shape)]
        .view(np.int8)
        .reshape(out.shape)
    )


@pytest.mark.parametrize("target_name", TARGETS)
@pytest.mark.parametrize("channels", [1, 3, 4])
def test_a_channels_first_input_is_interleaved_by_the_dma_and_the_result_is_unchanged(target_name, channels):
    """Bit-exact with the numpy int8 reference on the NHWC tensor; the first conv keeps the
    NHWC program's lowering, its bands loaded by interleaving loads (one plane: a plain
    load), so the program costs within 5% of the NHWC one."""
    target = load_target(target_name)
    nhwc_graph = _stem(channels).subgraph(["pool"])
    nchw_graph = replace(nhwc_graph, tensors=dict(nhwc_graph.tensors))
    assert take_channels_first(nchw_graph, {0}) == {}
    nhwc, nchw = lower_subgraph(nhwc_graph, target), lower_subgraph(nchw_graph, target)
    assert nchw.layers[0]["tiling"].get("lowering") == nhwc.layers[0]["tiling"].get("lowering")
    loads = [i for i in nchw.program.instructions if i.opcode.name == "LOAD" and i.interleave]
    assert len(loads) >= (1 if channels > 1 else 0) and all(i.planes == channels for i in loads)
    assert nchw.estimate["cycles"] <= 1.05 * nhwc.estimate["cycles"], (nchw.estimate, nhwc.estimate)
    x = np.random.default_rng(1).integers(-128, 128, (1, 12, 10, channels)).astype(np.int8)
    expected = run_subgraph(nhwc_graph, {"x": x}, target.numerics.requant)["pool"]
    np.testing.assert_array_equal(_run_nchw(nchw, nchw_graph, target, x), expected)


def test_an_input_read_whole_stays_with_the_host_which_says_why():
    """A concatenation reads its inputs whole (into channel slices), not band by band: the
    host transposes that input, and the report gives the reason and the host's cycles, by
    hand from targets/vpu.toml [host]: a float32 read and write of 1x8x8x3,
    1336 + ceil(8 x 192 / 52) = 1336 + 30."""
    b = Builder()
    x = b.input("x", (1, 8, 8, 3))
    y = b.conv(x, "conv", 5)
    b.concat([y, x], "cat")
    subgraph = b.subgraph(["cat"])
    refused = take_channels_first(subgraph, {0})
    assert refused == {"x": "'x' is read whole (by Concat), not band by band by the program's loads"}
    assert subgraph.tensors["x"].host_layout is None
    target = load_target("vpu")

    class Program:
        estimate: dict = {}

    marked = mark_edge(Program(), refused, {"x": (1, 8, 8, 3)}, target)
    assert marked.estimate["input_transpose"] == "on the host: " + refused["x"]
    assert marked.estimate["input_transpose_host_cycles"] == 1336 + 30


def test_the_input_transpose_moves_from_the_host_into_the_programs_dma(zoo_dir, tmp_path):
    """tinyconvnet (a float model, NCHW input): the host quantises x as it is, the program
    takes it channels-first whatever the first conv's lowering, no permute_dims is left
    before the VPU call, and the VPU's output is the reference's bit for bit."""
    model = zoo_dir / "tinyconvnet.onnx"
    prepared = prepare_model(model, "vpu", CompileOptions(calib_synthetic=8))
    (program,) = prepared.programs
    assert program.estimate["input_transpose"] == "by the VPU's DMA"
    assert program.estimate["input_transpose_host_cycles"] == 0
    (binding,) = program.inputs
    assert binding.layout == "NCHW" and binding.shape == (1, 3, 16, 16)
    assert binding.scale != 1.0  # the input's own quantisation, not a placeholder
    assert any(
        i.opcode.name == "LOAD" and i.interleave and i.planes == 3 for i in program.program.instructions
    )
    artifact = build_artifact(model, prepared)
    from vpuc.compiler.lower import join_host

    host = join_host(prepared.partition.mod, prepared.programs)
    ops = [b.value.op.name for block in host["main"].body.blocks for b in block.bindings
           if isinstance(b.value, tvm.relax.Call) and isinstance(b.value.op, tvm.ir.Op)]  # fmt: skip
    assert "relax.permute_dims" not in ops[: ops.index("relax.call_dps_packed")]
    executable = load(artifact.save(tmp_path / "t.vpub"))
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    executable.record_outputs()
    executable.run({"input": x})
    (call,) = executable.last_run.calls
    captured, _ = executable.reference_run({"input": x})
    np.testing.assert_array_equal(call.outputs[0], captured[0][0])


def test_a_stem_the_host_used_to_keep_is_taken_channels_first(zoo_dir):
    """MobileNet's stride-2 stem reads 32x32x3: the program takes it channels-first (it was
    "on the host" while a channel's gather cost a byte a cycle)."""
    prepared = prepare_model(zoo_dir / "mobilenet_mini.onnx", "vpu", CompileOptions(calib_synthetic=8))
    program = prepared.programs[0]
    assert program.estimate["input_transpose"] == "by the VPU's DMA"
    assert [b.layout for b in program.inputs] == ["NCHW"]
