"""The pipeline as users meet it: the flat named list, compile_model's report, and
`vpuc optimize` (table, JSON, --dump-after, errors)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from vpuc.compiler import compile_model
from vpuc.compiler.errors import CompileError
from vpuc.compiler.frontend import import_model
from vpuc.compiler.pipeline import PASS_NAMES, PIPELINE, optimize_imported
from vpuc.examples import zoo
from vpuc.runtime.executor import Executable


def test_the_pipeline_is_one_flat_named_list_with_reasons():
    assert len(set(PASS_NAMES)) == len(PASS_NAMES)
    assert PASS_NAMES[0] == "fold_constants" and PASS_NAMES[-1] == "dce"
    assert all(step.why for step in PIPELINE)


def test_dump_after_an_unknown_pass_names_the_passes():
    imported = import_model(zoo.build("tinyconvnet"))
    with pytest.raises(CompileError, match="unknown pass 'fuse_everything' \\(passes: fold_constants, "):
        optimize_imported(imported, "cpu", dump_after="fuse_everything")


def test_compile_report_carries_the_audit_and_the_pass_timings():
    model = zoo.build("tinyconvnet")
    artifact = compile_model(model, "cpu")
    report = artifact.report
    assert [e["pattern"] for e in report["fusion"]["fused"]] == ["bn_fold"] * 4 + ["dense_bias"]
    assert report["layout"]["choice"] == "NCHW"
    assert {f"pass_{name}_s" for name in PASS_NAMES} <= set(report["timings_s"])
    (logits,) = Executable(artifact).run(zoo.sample_inputs(model)).values()
    assert logits.shape == (1, 4) and np.all(np.isfinite(logits))


def test_optimize_command_prints_the_audit_for_the_vpu(vpuc, zoo_dir):
    """The VPU build path is not there yet; `vpuc optimize` works for it all the same."""
    done = vpuc("optimize", zoo_dir / "mobilenet_mini.onnx", "--target", "vpu")
    assert done.returncode == 0, done.stderr
    assert "layout NHWC" in done.stdout and "bn_fold" in done.stdout and "clip" in done.stdout


def test_optimize_command_json_and_dump_after(vpuc, zoo_dir):
    done = vpuc("optimize", zoo_dir / "transformer_encoder.onnx", "--json", "--dump-after", "attention")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert set(out) >= {"fused", "not_fused", "layout", "timings_s", "dump"}
    assert "R.nn.attention" in out["dump"] and "R.nn.layer_norm" in out["dump"]
    assert all(set(e) == {"pattern", "nodes", "reason"} for e in out["fused"] + out["not_fused"])


def test_optimize_command_errors_are_one_line(vpuc, zoo_dir):
    done = vpuc("optimize", zoo_dir / "tinyconvnet.onnx", "--dump-after", "nope")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"vpuc optimize: --dump-after: unknown pass 'nope' (passes: {', '.join(PASS_NAMES)})"
    ]
    done = vpuc("optimize", zoo_dir / "tinyconvnet.onnx", "--target", "tpu9")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
