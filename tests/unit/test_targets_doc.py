"""docs/targets.md's example target loads as written, and a VPU target left without an op
list (the example with its `inherit` and [ops.*] tables removed) is refused, naming `ops`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vpuc.targets import TargetError, load_target

REPO = Path(__file__).resolve().parents[2]


def _example() -> str:
    return re.search(r"```toml\n(.+?)```", (REPO / "docs" / "targets.md").read_text(), flags=re.S)[1]


def test_the_example_loads(tmp_path):
    (tmp_path / "mine.toml").write_text(_example())
    target = load_target(tmp_path / "mine.toml")
    assert target.kind == "vpu" and target.ops["conv2d"]["kernel"] == [1, 5] and "relu" in target.ops


def test_a_vpu_target_without_an_op_list(tmp_path):
    text = _example().split("[ops.")[0]
    text = "\n".join(line for line in text.splitlines() if not line.startswith("inherit"))
    (tmp_path / "mine.toml").write_text(text)
    with pytest.raises(TargetError, match=r"mine.toml: ops: a vpu target needs an op list"):
        load_target(tmp_path / "mine.toml")
