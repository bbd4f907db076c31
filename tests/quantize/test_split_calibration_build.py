"""The quantiser's one build (observe.py, compat.build_host) with its kernels compiled, and
JIT-compiled, on LLVM threads (compiler/host/split_build.py, issue 23). Each kernel computes
what it computed in relax.build's single module (split_build.PARTS = 1, the path before):
ranges and parameters, the QDQ module, the accuracy report and the sensitivity must be the
same bits, and the split must really happen."""

from __future__ import annotations

import pytest
from quantize_testing import assert_same_quantisation

from vpuc.compiler.host import split_build
from vpuc.compiler.quantize import quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.targets import load_target

_BUILD_PARTS = split_build._build_parts  # before any test wraps it


def _quantize(zoo_optimised, name: str, parts: int, monkeypatch):
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    monkeypatch.setattr(split_build, "PARTS", parts)
    counts: list[int] = []

    def counting_parts(modules, *args):
        counts.append(len(modules))
        return _BUILD_PARTS(modules, *args)

    monkeypatch.setattr(split_build, "_build_parts", counting_parts)
    observe._BUILT.clear()  # else the other path's executables answer
    result = quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration, held_out=split.held_out
    )
    return result, counts


@pytest.mark.parametrize("name", ["tinyconvnet", "resnet_mini"])
def test_split_build_quantises_as_one_module(zoo_optimised, monkeypatch, name):
    single, single_counts = _quantize(zoo_optimised, name, 1, monkeypatch)
    split, split_counts = _quantize(zoo_optimised, name, 2, monkeypatch)
    assert single_counts == [] and split_counts == [2]  # the one build, in two modules
    assert_same_quantisation(split, single)
