"""README.md opens with the two setup commands, and CI runs exactly the second one."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (REPO / "README.md").read_text()
    return re.findall(r"```sh\n(.+?)\n```", text, flags=re.S)


def test_readme_opens_with_two_single_line_commands():
    commands = _readme_commands()[:2]
    assert len(commands) == 2 and all("\n" not in c for c in commands)
    main_job, tests = commands
    assert "python3 -m venv .venv" in main_job and "vpuc compile" in main_job and "vpuc run" in main_job
    assert "pytest" in tests


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert _readme_commands()[1] in ci.splitlines()
