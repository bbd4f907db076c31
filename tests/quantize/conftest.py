"""Fixtures for the quantiser tests; helpers live in quantize_testing.py beside this file."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from quantize_testing import optimised_zoo  # noqa: E402


@pytest.fixture(scope="session")
def zoo_optimised():
    return optimised_zoo
