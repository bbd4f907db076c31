"""The partitioner's profitability rule prices a quantised subgraph with the code
generator's own estimate: the VPU cycles in a kept subgraph's verdict are the estimate of
the program that the artifact then carries."""

from __future__ import annotations

from vpuc.compiler.driver import CompileOptions, prepare_model


def test_verdicts_use_the_code_generators_estimate(zoo_dir):
    prepared = prepare_model(zoo_dir / "tinyconvnet.onnx", "vpu", CompileOptions(calib_synthetic=8))
    kept = [v for v in prepared.partition.report["profitability"] if v["decision"] == "vpu"]
    assert len(kept) == len(prepared.programs) == 1
    assert kept[0]["vpu_cycles"] == prepared.programs[0].estimate["cycles"]
