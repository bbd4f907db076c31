"""-O0..-O3 and --disable-pass (as onnxruntime's graph optimisation levels and tvmc's -O):
which passes each runs, that every level answers as onnxruntime does, and the errors."""

from __future__ import annotations

import json

import pytest

from vpuc.compiler import CompileError
from vpuc.compiler.pipeline import PASS_NAMES, PIPELINE, PassSelection, check_dump_after


def test_levels_add_groups_of_passes():
    ran = {level: [s.name for s in PassSelection(level).steps()] for level in range(4)}
    assert ran[0] == []
    assert ran[1] == ["fold_constants", "cse", "dce"]
    assert "bn_fold" in ran[2] and "attention" in ran[2] and "layout" not in ran[2]
    assert ran[3] == list(PASS_NAMES)
    for lower, higher in zip(range(3), range(1, 4), strict=True):
        assert set(ran[lower]) < set(ran[higher])
    # each level keeps the pipeline's order
    assert all(names == [n for n in PASS_NAMES if n in names] for names in ran.values())


def test_disable_and_bisect_limit():
    selection = PassSelection(3, ("layout", "cse"), None)
    assert [s.name for s in selection.steps()] == [n for n in PASS_NAMES if n not in ("layout", "cse")]
    assert [s.name for s in PassSelection(limit=2).steps()] == list(PASS_NAMES[:2])
    assert PassSelection(1, limit=5).steps() == PassSelection(1).steps()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"opt_level": 4}, "-O4: unknown level"),
        ({"disabled": ("fuse_everything",)}, "--disable-pass: unknown pass 'fuse_everything'"),
        ({"limit": -1}, "--opt-bisect-limit: must be at least 0"),
    ],
)
def test_bad_selections(kwargs, message):
    with pytest.raises(CompileError, match=message):
        PassSelection(**kwargs)


def test_dump_after_a_pass_that_does_not_run():
    with pytest.raises(CompileError, match="runs from -O3 on, not at -O1"):
        check_dump_after("layout", PassSelection(1))
    with pytest.raises(CompileError, match="is disabled"):
        check_dump_after("gelu", PassSelection(3, ("gelu",)))
    check_dump_after("cse", PassSelection(1))


def test_every_step_has_a_level():
    assert all(step.level in (1, 2, 3) for step in PIPELINE)


@pytest.mark.parametrize(
    "flags", [["-O0"], ["-O1"], ["-O2"], ["-O3"], ["--disable-pass", "layout", "--disable-pass", "bn_fold"]]
)
def test_each_level_matches_onnxruntime(vpuc, zoo_dir, tmp_path, flags):
    model = zoo_dir / "resnet_mini.onnx"
    out = tmp_path / "m.vpub"
    compiled = vpuc("compile", model, *flags, "-o", out, "--json")
    assert compiled.returncode == 0, compiled.stderr
    report = json.loads(compiled.stdout)
    expected_level = int(flags[0][2]) if flags[0].startswith("-O") else 3
    assert report["passes"]["opt_level"] == expected_level
    assert report["passes"]["ran"] == [
        s.name for s in PassSelection(expected_level, tuple(flags[1::2])).steps()
    ]
    if expected_level == 0:
        assert report["fusion"]["fused"] == []
    ran = vpuc("run", out, "--check", model, "--json")
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["check"]["passed"]


def test_optimize_takes_the_same_flags(vpuc, zoo_dir):
    result = vpuc("optimize", zoo_dir / "tinyconvnet.onnx", "-O1", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["passes"]["ran"] == ["fold_constants", "cse", "dce"]
    bad = vpuc("optimize", zoo_dir / "tinyconvnet.onnx", "--disable-pass", "nope")
    assert bad.returncode == 2 and "--disable-pass: unknown pass 'nope'" in bad.stderr
