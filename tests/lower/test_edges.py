"""Layout changes at the subgraph's edge by the program's DMA: a model input in NCHW reaches
the VPU channels-first (the host quantises it as it is, no transpose pass), the program
gathers each channel's rows into its channels-last tiles, and the result is unchanged."""

from __future__ import annotations

import numpy as np
import tvm

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.lower.codegen import tile_im2col
from vpuc.runtime import load


def test_the_input_transpose_moves_from_the_host_into_the_programs_dma(zoo_dir, tmp_path, monkeypatch):
    """tinyconvnet's 3-channel first conv as a conv (no im2col): the channel gather at the
    edge costs the VPU less than the host's transpose. With im2col (the default) its NHWC
    program is faster by more than the host's transpose costs, so the host keeps it."""
    model = zoo_dir / "tinyconvnet.onnx"
    with_im2col = prepare_model(model, "vpu", CompileOptions(calib_synthetic=8))
    assert with_im2col.programs[0].estimate["input_transpose"] == "on the host"
    monkeypatch.setattr(tile_im2col, "CHOOSE", "conv")
    prepared = prepare_model(model, "vpu", CompileOptions(calib_synthetic=8))
    (binding,) = prepared.programs[0].inputs
    assert binding.layout == "NCHW" and binding.shape == (1, 3, 16, 16)
    assert binding.scale != 1.0  # the input's own quantisation, not a placeholder
    loads = [
        i for i in prepared.programs[0].program.instructions if i.opcode.name == "LOAD" and i.row_bytes == 1
    ]
    assert len(loads) >= 3  # one gather per channel
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


def test_the_transpose_stays_on_the_host_when_the_vpu_would_pay_more(zoo_dir):
    """MobileNet's stride-2 stem reads 32x32x3: gathering it channel by channel costs the
    VPU more than the host's transpose of 3 KiB, so the host keeps it (and says so)."""
    prepared = prepare_model(zoo_dir / "mobilenet_mini.onnx", "vpu", CompileOptions(calib_synthetic=8))
    program = prepared.programs[0]
    assert program.estimate["input_transpose"] == "on the host"
    assert [b.layout for b in program.inputs] == ["NHWC"]
