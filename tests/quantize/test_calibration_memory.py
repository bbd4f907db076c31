"""Synthetic calibration memory (issue 26 item 3): samples drawn one at a time and kept in the
input's dtype (the same numbers as one float64 draw), and inputs too large for the machine
refused as the user's problem, naming the input and the bytes needed."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper

from vpuc.compiler.frontend.shapes import TensorSpec
from vpuc.compiler.quantize.calibration.data import synthetic_calibration


def test_samples_are_the_numbers_one_float64_draw_gives():
    """Ranges stay bit-identical: the stream is numpy's, drawn in order, whatever the chunking."""
    specs = [TensorSpec("x", (1, 3, 8, 8), "float32"), TensorSpec("y", (1, 7), "float32")]
    data = synthetic_calibration(specs, 5, seed=3, stream=1)
    rng = np.random.default_rng([3, 1])
    for spec in specs:
        expected = rng.standard_normal((5, *spec.shape)).astype(np.float32)
        assert data.samples[spec.name].dtype == np.float32
        assert np.array_equal(data.samples[spec.name], expected)


def _conv(path, h, w):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, h, w])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, h, w])
    weight = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], np.full(108, 0.1, np.float32))
    node = helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], name="conv")
    graph = helper.make_graph([node], "g", [x], [y], [weight])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_input_too_large_for_the_machine_is_a_user_error(tmp_path):
    """1x3x10000x10000 float32, 32 samples: 38.4 GB, under a 3 GB address-space limit."""
    limit = 3 << 30

    def before():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    model = _conv(tmp_path / "big.onnx", 10000, 10000)
    result = subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", "compile", str(model), "--target", "vpu",
         "-o", str(tmp_path / "big.vpub")],
        capture_output=True, text=True, preexec_fn=before, timeout=300, env=dict(os.environ),
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "'x'" in line and f"{32 * 3 * 10000 * 10000 * 4:,} bytes" in line, result.stderr
    assert not (tmp_path / "big.vpub").exists()


def test_a_one_megapixel_conv_compiles_for_the_vpu_in_under_1_gb(tmp_path):
    """Peak RSS of the whole compile (calibration, held-out accuracy, build) of a 3x3 conv on
    1x3x1024x1024: 3.8 GB when every sample was float64 at once (issue 26), 1.41 GB before this
    change and 0.75 GB after it on the development machine."""
    model = _conv(tmp_path / "c.onnx", 1024, 1024)
    script = (
        "import resource, sys\n"
        "from vpuc.compiler import cli\n"
        f"code = cli.main(['compile', {str(model)!r}, '--target', 'vpu', '-o', {str(tmp_path / 'c.vpub')!r}])\n"
        "print('PEAK', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, code)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=600)
    peak_line = next(line for line in result.stdout.splitlines() if line.startswith("PEAK"))
    _, peak, code = peak_line.split()
    assert code == "0", result.stderr
    assert int(peak) < 1 << 30, f"peak RSS {int(peak):,} bytes"
