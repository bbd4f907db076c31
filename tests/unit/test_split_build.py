"""The host build's kernels compiled on LLVM threads (compiler/host/split_build.py, issue 23):
the kernels dealt into two TIR modules built at once, and their object files written at once
on export. A kernel computes what it computed in one module, so the artifact's outputs must
be the same bits as relax.build's single module (split_build.PARTS = 1, the path before),
and the split must really happen (else the comparison compares a build with itself)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.driver import compile_model
from vpuc.compiler.host import build, split_build
from vpuc.runtime.executor import Executable

_BUILD_PARTS = split_build._build_parts  # before any test wraps it


def _compiled(model, target: str, parts: int, monkeypatch) -> tuple[Executable, list[int]]:
    """The artifact compiled with `parts` LLVM modules, and the module counts it built."""
    monkeypatch.setattr(split_build, "PARTS", parts)
    counts: list[int] = []

    def counting_parts(modules, *args):
        counts.append(len(modules))
        return _BUILD_PARTS(modules, *args)

    monkeypatch.setattr(split_build, "_build_parts", counting_parts)
    build._BUILT.clear()  # the memo of host libraries is not keyed by the split
    return Executable(compile_model(model, target), time_host_ops=False), counts


@pytest.mark.parametrize(("name", "target"), [("opzoonet", "vpu"), ("resnet_mini", "cpu")])
def test_outputs_are_the_same_bits_as_one_module(zoo_dir, monkeypatch, name, target):
    model = zoo_dir / f"{name}.onnx"
    single, single_counts = _compiled(model, target, 1, monkeypatch)
    split, split_counts = _compiled(model, target, 2, monkeypatch)
    assert single_counts == [] and split_counts[-1] == 2  # the host build's: two modules
    for seed in range(3):
        rng = np.random.default_rng(seed)
        inputs = {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in split.inputs}
        ours, theirs = split.run(inputs), single.run(inputs)
        assert list(ours) == list(theirs)
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=f"{name} {key} seed {seed}")
