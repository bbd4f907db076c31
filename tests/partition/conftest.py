"""Partition tests run the compiler's own stages (frontend, graph passes, partition) via
driver.prepare_model; partition_models.py beside this file builds the test models."""

import sys
from pathlib import Path

import pytest

from vpuc.compiler.driver import CompileOptions, prepare_model

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def partition():
    """partition(model, target="vpu", **options) -> the partition report."""

    def run(model, target="vpu", **options):
        options.setdefault("quantize", False)  # the float model partitions as its QDQ form will
        return prepare_model(model, target, CompileOptions(**options)).partition.report

    return run
