"""The quantiser builds its in-process module (the switchable QDQ module calibration and the
accuracy report run, measurement/one_build.py; a float reference beside it where SmoothQuant
or bias absorption may rewrite the module) without the kernels' argument asserts
(compat.build_host). The calibrated ranges and the accuracy report must be bit-identical
with those of the same modules built with the asserts, TVM's default: the asserts only
check what main passes its kernels. A second quantisation of one module in one process
builds nothing (observe._built) and gives the same bits."""

from __future__ import annotations

import numpy as np
import pytest
from quantize_testing import without_timings

from vpuc.compiler import compat
from vpuc.compiler.quantize import quantize, synthetic_split
from vpuc.compiler.quantize.calibration import observe
from vpuc.targets import load_target

MODELS = ("tinyconvnet", "mobilenet_mini")


def _quantize(zoo_optimised, name: str):
    mod, provenance, imported = zoo_optimised(name, "vpu")
    split = synthetic_split(imported.inputs, 32, seed=0)
    return quantize(
        mod, load_target("vpu"), imported.onnx_model, provenance, split.calibration, held_out=split.held_out
    )


@pytest.mark.parametrize("name", MODELS)
def test_ranges_and_accuracy_equal_the_asserting_builds(zoo_optimised, monkeypatch, name):
    quick = _quantize(zoo_optimised, name)
    builds = []
    default_build = compat.build_host

    def asserting_build(mod, llvm_target):
        builds.append(mod)
        return default_build(mod, llvm_target, kernel_asserts=True)

    monkeypatch.setattr(compat, "build_host", asserting_build)
    observe._BUILT.clear()  # else the quick build's executables answer again
    asserting = _quantize(zoo_optimised, name)
    assert len(builds) == 1  # one switchable QDQ module (one_build.py)
    _assert_same(quick, asserting)
    assert len(quick.tensors) > 5


def test_a_float_model_quantised_again_builds_nothing(zoo_optimised, monkeypatch):
    """The second quantisation in one process reuses both executables (observe._built)
    and gives the same bits."""
    first = _quantize(zoo_optimised, "tinyconvnet")
    builds = []
    monkeypatch.setattr(compat, "build_host", lambda *args, **kwargs: builds.append(args))
    again = _quantize(zoo_optimised, "tinyconvnet")
    assert builds == []
    _assert_same(first, again)


def _assert_same(a, b) -> None:
    assert [t.tensor for t in a.tensors] == [t.tensor for t in b.tensors]
    for new, old in zip(a.tensors, b.tensors, strict=True):
        assert new.params.scale.tobytes() == old.params.scale.tobytes(), new.tensor
        assert new.params.zero_point.tobytes() == old.params.zero_point.tobytes(), new.tensor
    assert without_timings(a.accuracy) == without_timings(b.accuracy)


def test_the_quick_build_leaves_the_asserts_out(zoo_optimised):
    """Else the comparison above compares a build with itself."""
    mod = zoo_optimised("tinyconvnet", "vpu")[0]
    sources = [
        compat.build_host(mod, "llvm", kernel_asserts=asserts).mod.imports[0].inspect_source("ll")
        for asserts in (False, True)
    ]
    assert len(sources[0]) < 0.7 * len(sources[1])
    x = np.zeros(compat.tensor_type(mod["main"].params[0])[0], np.float32)
    with pytest.raises(Exception, match="match_cast|Check failed"):  # main still checks its inputs
        compat.virtual_machine(compat.build_host(mod, "llvm"))["main"](compat.to_tvm(x[..., :1]))
