"""Partition tests run the frontend and the graph preparation the compiler runs before
partitioning, then call the partitioner directly."""

import sys
from pathlib import Path

import pytest
from tvm import relax

from vpuc.compiler.frontend import import_model

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def prepare():
    def run(model):
        imported = import_model(model)
        mod = relax.transform.FoldConstant()(imported.mod)
        provenance = {var: [node] for var, node in imported.var_to_node.items()}
        return mod, imported, provenance

    return run
