"""Helpers for the quantiser tests: the frontend and the graph passes the compiler runs
before quantisation. (A module of its own: a bare `conftest` import would clash with other
test folders' conftest modules.)

`optimised(model, target)` returns (module, provenance, imported); results for zoo models
are cached per (model, target) for the session: each is built once.
"""

from __future__ import annotations

from functools import cache

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
