"""Fixtures for the pass tests; the helpers live in pass_testing.py beside this file."""

import sys
from pathlib import Path

import pytest

from vpuc.compiler.passes import Audit

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def audit_of():
    return lambda mod: Audit.of(mod).to_json()
