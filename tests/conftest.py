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


@pytest.fixture(autouse=True)
def _fresh_process_memos():
    """Each test starts with the in-process memos of repeated compiles empty (the Relax
    imports, the graph pipeline's results, the host libraries, the lowered programs, the planner's choices and answers, the
    QDQ accuracy measurement, the quantiser's executables): a test that patches a
    stage (a failing relax.build, a changed cost) must reach that stage, not an answer
    another test left behind. tests/e2e/test_repeated_compiles.py tests the memos within one test."""
    from vpuc.compiler import pipeline
    from vpuc.compiler.frontend import importer
    from vpuc.compiler.host import build
    from vpuc.compiler.lower import memo as lowering
    from vpuc.compiler.lower.codegen import oracle, tile_mac
    from vpuc.compiler.quantize.calibration import observe
    from vpuc.compiler.quantize.qdq import reference

    memos = (importer._IMPORTED, build._BUILT, lowering._LOWERED, tile_mac._CHOSEN, oracle._ANSWERS)
    for memo in (*memos, pipeline._OPTIMIZED, reference._MEASURED, observe._BUILT):
        memo.clear()
    yield
