"""CI runs the zoo's regression suite (tests/regress/zoo): every figure of every model and
target must match its golden within the suite's tolerances. When this fails, the table
below the assertion says which figure moved, from what to what; if the change is intended,
record it with `vpuc regress tests/regress/zoo --jobs 2 --update-golden` and commit the
goldens with the change (docs/regress.md)."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ZOO_SUITE = Path(__file__).resolve().parent / "zoo"


def test_the_zoo_matches_its_goldens(tmp_path):
    junit = tmp_path / "zoo.xml"
    command = [sys.executable, "-m", "vpuc.compiler.cli", "regress", str(ZOO_SUITE), "--jobs", "2"]
    # ~1 min on an idle 2-core machine; the jobs' own timeouts (regress.toml) bound it
    done = subprocess.run([*command, "--junit", str(junit)], capture_output=True, text=True, timeout=3600)
    assert done.returncode == 0, (
        f"vpuc regress {ZOO_SUITE} exited {done.returncode}\n{done.stdout}\n{done.stderr}"
    )
    suite = ET.parse(junit).getroot().find("testsuite")
    names = {(c.get("classname"), c.get("name")) for c in suite.findall("testcase")}
    assert ("regress.tinyconvnet", "vpu") in names and ("regress.opzoonet", "vpu-plus") in names
    assert len(names) == 8 and suite.get("failures") == "0" and suite.get("errors") == "0"
