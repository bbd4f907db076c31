"""`vpuc tune --time-budget` holds (issue 26 item 2): seconds, stopped between measurement
rounds (never by terminating TVM's tasks), within 10 % plus the process's start and the
stages before the search, and the database it writes is whole.

Under load (the 2-core machine at load 7.5) the search once took 31.8 s of a 20 s budget:
its rounds were 8 candidates whatever the time left. Rounds are now sized to the time left
at the measured seconds per candidate, so the budget holds at any load, except that one call
always runs: the worker pools' start and the first call (`first_call_s`, measured by the
tuner) are the least a budget takes, and the bound is 10 % over the larger of the two."""

from __future__ import annotations

import json
import subprocess
import sys
import time

BUDGET_S = 20


def test_a_short_budget_holds_within_ten_percent(zoo_dir, tmp_path):
    db = tmp_path / "db"
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "vpuc.compiler.cli", "tune", str(zoo_dir / "tinyconvnet.onnx"),
         "--target", "cpu", "--time-budget", str(BUDGET_S), "--db", str(db), "--json"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    wall = time.perf_counter() - start
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    search = report["elapsed_s"]  # tune_tasks's clock: the search and the checks after it
    least = report["first_call_s"]  # the pools' start and one call: never skipped
    assert 0 < least <= search
    bound = max(BUDGET_S, least) * 1.1
    assert search <= bound, f"search took {search:.1f} s for a {BUDGET_S} s budget (first call {least} s)"
    assert report["trials"] >= 1
    # the whole process: the budget, 10 %, plus start-up, preparation and the final checks
    assert wall <= bound + 40, f"tune took {wall:.1f} s"
    records = (db / "database_tuning_record.json").read_text().splitlines()
    assert len(records) == report["stored"]  # what it says it stored is in the file, whole
    assert json.loads((db / "vpuc-tuning.json").read_text())
