"""Shared fixtures: the zoo written once per session, and a runner for the `vpuc` CLI in a
fresh process (what a user types)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from vpuc.examples import zoo

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory) -> Path:
    outdir = tmp_path_factory.mktemp("zoo")
    zoo.write_zoo(outdir)
    return outdir


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


def _run_vpuc(*args, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `vpuc ARGS` in a fresh Python process; never raises on a non-zero exit."""
    return subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=300,
    )


@pytest.fixture(scope="session")
def vpuc():
    """The CLI as a user runs it: `vpuc("run", path, "--json")` -> CompletedProcess."""
    return _run_vpuc
