"""The artifact's host library leaves out the kernels' argument asserts (compiler/host/build.py
KERNEL_ASSERTS, issue 23: a fifth of its LLVM time). The outputs must be the same bits as a
library built with them, main must still refuse an input of the wrong shape, and the library
must really be without them (else the comparison compares a build with itself)."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
import tvm
from tvm import relax

from vpuc.compiler import compat
from vpuc.compiler.driver import compile_model
from vpuc.compiler.host import build
from vpuc.runtime.executor import Executable


def _compiled(model: Path, target: str, monkeypatch, asserts: bool | None = None) -> Executable:
    """The artifact's host library as compiles build it (`asserts` None) or with the switch set."""
    if asserts is not None:
        monkeypatch.setattr(build, "KERNEL_ASSERTS", asserts)
    build._BUILT.clear()  # the memo of host libraries is not keyed by the switch
    return Executable(compile_model(model, target), time_host_ops=False)


@pytest.mark.parametrize(("name", "target"), [("opzoonet", "vpu"), ("resnet_mini", "cpu")])
def test_outputs_are_the_same_bits_without_the_asserts(zoo_dir, monkeypatch, name, target):
    without = _compiled(zoo_dir / f"{name}.onnx", target, monkeypatch)
    with_asserts = _compiled(zoo_dir / f"{name}.onnx", target, monkeypatch, asserts=True)
    libraries = [e.artifact.members["host.so"] for e in (without, with_asserts)]
    messages = [library.count(b"expected non-NULL data pointer") for library in libraries]
    assert messages[0] == 0 < messages[1], messages  # TVM's messages of an argument check
    assert len(libraries[0]) < len(libraries[1])  # opzoonet 96,696 against 181,384 bytes
    for seed in range(3):
        rng = np.random.default_rng(seed)
        inputs = {s["name"]: rng.standard_normal(s["shape"]).astype(s["dtype"]) for s in without.inputs}
        ours, theirs = without.run(inputs), with_asserts.run(inputs)
        assert list(ours) == list(theirs)
        for key in ours:
            np.testing.assert_array_equal(ours[key], theirs[key], err_msg=f"{name} {key} seed {seed}")


def test_main_still_checks_its_inputs(zoo_dir, monkeypatch):
    executable = _compiled(zoo_dir / "resnet_mini.onnx", "cpu", monkeypatch)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "host.so"
        path.write_bytes(executable.artifact.members["host.so"])
        vm = relax.VirtualMachine(tvm.runtime.load_module(str(path)), tvm.cpu())
    (spec,) = executable.inputs
    wrong = np.zeros((*spec["shape"][:-1], spec["shape"][-1] + 1), spec["dtype"])
    with pytest.raises(Exception, match="match_cast|Check failed|shape"):
        vm["main"](compat.to_tvm(wrong))
