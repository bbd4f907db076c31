"""Helpers for the quantiser tests: the frontend and the graph passes the compiler runs
before quantisation. (A module of its own: a bare `conftest` import would clash with other
test folders' conftest modules.)

`optimised(model, target)` returns (module, provenance, imported); results for zoo models
are cached per (model, target) for the session: each is built once.
"""

from __future__ import annotations

from functools import cache

from vpuc.compiler import compat
from vpuc.compiler.frontend import import_model
from vpuc.compiler.pipeline import optimize_imported
from vpuc.examples import zoo
from vpuc.targets import load_target


def optimised(model, target_name: str = "vpu"):
    imported = import_model(model)
    result = optimize_imported(imported, load_target(target_name))
    return result.mod, result.provenance, imported


@cache
def optimised_zoo(name: str, target_name: str = "vpu"):
    return optimised(zoo.build(name), target_name)


def without_timings(report):
    """A report with every `timings_s` left out (two compiles' reports differ only there)."""
    if isinstance(report, dict):
        return {k: without_timings(v) for k, v in report.items() if k != "timings_s"}
    if isinstance(report, list):
        return [without_timings(v) for v in report]
    return report


def assert_same_quantisation(new, old) -> None:
    """Two quantise() results alike: the same tensors with byte-equal scales and zero points,
    the same QDQ module (its int8 weights and int32 biases are constants of it), the same
    accuracy report but for timings, and a report with a sensitivity and layers."""
    assert len(new.tensors) >= 3
    assert [t.tensor for t in new.tensors] == [t.tensor for t in old.tensors]
    for a, b in zip(new.tensors, old.tensors, strict=True):
        assert a.params.scale.tobytes() == b.params.scale.tobytes(), a.tensor
        assert a.params.zero_point.tobytes() == b.params.zero_point.tobytes(), a.tensor
    assert compat.structural_equal(new.mod, old.mod)
    assert without_timings(new.accuracy) == without_timings(old.accuracy)
    assert new.accuracy["sensitivity"] and new.accuracy["layers"]
