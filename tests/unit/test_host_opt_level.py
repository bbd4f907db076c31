"""The artifact's host library is built at LLVM -O2 (compiler/host/build.py HOST_OPT_LEVEL,
issue 23: -O3's extra loop passes cost ocr_cls's host build 0.7 s of CPU). The outputs must
be the same bits as TVM's default -O3 library's, and the level must really reach LLVM (else
the comparison compares a build with itself)."""

from __future__ import annotations

import numpy as np
import pytest

from vpuc.compiler.driver import CompileOptions, build_artifact, prepare_model
from vpuc.compiler.host import build
from vpuc.runtime.executor import Executable


def _libraries(model, target: str, monkeypatch) -> dict[int, Executable]:
    """The artifact built at -O2 (the default) and at -O3 from one prepared model."""
    prepared = prepare_model(model, target, CompileOptions())
    built = {}
    for level in (build.HOST_OPT_LEVEL, 3):
        monkeypatch.setattr(build, "HOST_OPT_LEVEL", level)
        build._BUILT.clear()  # the memo of host libraries is not keyed by the level
        built[level] = Executable(build_artifact(model, prepared), time_host_ops=False)
    return built


@pytest.mark.parametrize(("name", "target"), [("opzoonet", "vpu"), ("resnet_mini", "cpu")])
def test_outputs_are_the_same_bits_at_o2(zoo_dir, monkeypatch, name, target):
    assert build.HOST_OPT_LEVEL == 2
    built = _libraries(zoo_dir / f"{name}.onnx", target, monkeypatch)
    o2, o3 = built[2], built[3]
    libraries = [e.artifact.members["host.so"] for e in (o2, o3)]
    assert libraries[0] != libraries[1]  # opzoonet on vpu 76,248 against 96,696 bytes
    for seed in range(3):
        rng = np.random.default_rng(seed)
        inputs = {s["name"]: (2 * rng.standard_normal(s["shape"])).astype(s["dtype"]) for s in o2.inputs}
        ours, theirs = o2.run(inputs), o3.run(inputs)
        assert list(ours) == list(theirs)
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=f"{name} {key} seed {seed}")


def test_the_level_reaches_llvm_only_for_the_library(zoo_dir):
    """relax.build gets the level; the manifest's host target (what `vpuc run` checks the CPU
    against) and the tuner's target do not carry it."""
    from vpuc.compiler.host.target import resolve_host_target
    from vpuc.targets import load_target

    host = resolve_host_target(load_target("vpu"))
    assert int(build.llvm_target(host).attrs["opt-level"]) == build.HOST_OPT_LEVEL
    assert "opt-level" not in host.to_json()["target"]
    assert "opt-level" not in host.target.export()
