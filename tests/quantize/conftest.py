"""Quantiser tests run the frontend and the graph passes the compiler runs before
quantisation, then call the quantiser directly.

`optimised(model, target)` returns (module, provenance, imported): the graph-pass pipeline
with its ONNX provenance when compiler/pipeline.py is there, else the frontend's module
after FoldConstant (batch_norm unfolded) with the importer's names. Results are cached per
(model, target) for the session: the zoo models are built once.
"""

from __future__ import annotations

import sys
from functools import cache
from pathlib import Path

import pytest
from tvm import relax

from vpuc.compiler.frontend import import_model
from vpuc.examples import zoo
from vpuc.targets import load_target

sys.path.insert(0, str(Path(__file__).parent))


def optimised(model, target_name: str = "vpu"):
    imported = import_model(model)
    try:
        from vpuc.compiler.pipeline import optimize_imported
    except ImportError:  # before the graph passes land
        mod = relax.transform.FoldConstant()(imported.mod)
        return mod, {var: [node] for var, node in imported.var_to_node.items()}, imported
    result = optimize_imported(imported, load_target(target_name))
    return result.mod, result.provenance, imported


@cache
def optimised_zoo(name: str, target_name: str = "vpu"):
    return optimised(zoo.build(name), target_name)


@pytest.fixture(scope="session")
def zoo_optimised():
    return optimised_zoo
