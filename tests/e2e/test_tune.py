"""`vpuc tune` and the tuning database: tuned artifacts compute what untuned ones do; a
database for another target is ignored with a warning; a corrupt one is refused with one
line. The tuning here is tiny (one random candidate per kernel, every zoo model's kernels
in one MetaSchedule run): enough to put records in a database and apply them, not to make
anything fast (bench/cpu_vs_ort.py measures that)."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from vpuc.compiler import compile_model
from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.host.database import META, RECORDS, WORKLOADS
from vpuc.compiler.host.target import resolve_host_target
from vpuc.compiler.host.tasks import extract_tasks, lower_to_kernels
from vpuc.compiler.tune.tuner import tune_tasks
from vpuc.examples import zoo
from vpuc.runtime.executor import Executable

RTOL = 1e-4


@pytest.fixture(scope="module")
def zoo_db(tmp_path_factory):
    """A tiny MetaSchedule run per zoo model, into one database (one candidate per kernel the
    model spends time in: rounds go by a task's share of its model's time); every validated
    candidate is stored, faster than the default schedule or not."""
    db = tmp_path_factory.mktemp("tuning") / "cpu"
    for name in zoo.MODELS:
        prepared = prepare_model(zoo.build(name), "cpu", CompileOptions())
        host = resolve_host_target(prepared.target)
        tasks = extract_tasks(lower_to_kernels(prepared.mod, host.target))
        result = tune_tasks(name, tasks, host, db, trials=len(tasks), progress=False, min_speedup=0.0)
        assert result.stored > 0, [t.to_json() for t in result.tasks]
    return db


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_tuned_artifact_matches_untuned(zoo_db, name):
    model = zoo.build(name)
    inputs = zoo.sample_inputs(model, seed=1)
    untuned = compile_model(model, target="cpu")
    tuned = compile_model(model, target="cpu", tuning_db=zoo_db)
    host = tuned.report["host_build"]
    assert host["tuning_database"] == str(zoo_db)
    assert untuned.report["host_build"]["tuned_tasks"] == 0
    assert host["tuned_tasks"] > 0, host
    expected = Executable(untuned).run(inputs)
    got = Executable(tuned).run(inputs)
    for key, value in expected.items():
        scale = max(float(np.max(np.abs(value))), 1.0)
        np.testing.assert_allclose(got[key], value, rtol=RTOL, atol=RTOL * scale)


def test_compile_reports_tuned_tasks(vpuc, zoo_db, zoo_dir, tmp_path):
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "-o", tmp_path / "t.vpub", "--db", zoo_db)
    assert result.returncode == 0, result.stderr
    assert "kernels tuned" in result.stdout and str(zoo_db) in result.stdout


def test_database_of_another_target_is_ignored_with_a_warning(vpuc, zoo_db, zoo_dir, tmp_path):
    other = tmp_path / "other"
    shutil.copytree(zoo_db, other)
    meta = json.loads((other / META).read_text())
    meta["host_target"]["mcpu"] = "cortex-a72"
    meta["host_target"]["mtriple"] = "aarch64-linux-gnu"
    (other / META).write_text(json.dumps(meta))
    out = tmp_path / "t.vpub"
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "-o", out, "--db", other, "--json")
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "cortex-a72" in warnings[0] and "ignored" in warnings[0], result.stderr
    report = json.loads(result.stdout)
    assert report["host_build"]["tuned_tasks"] == 0 and report["host_build"]["tuning_database"] is None


@pytest.mark.parametrize(
    "member,content,fragment",
    [
        (RECORDS, '[0, [["not a trace"]\n', RECORDS),
        (WORKLOADS, "garbage\n", WORKLOADS),
        (META, "{", META),
        (META, '{"format": "vpuc-tuning", "format_version": 99, "host_target": {}}', "version 99"),
    ],
)
def test_corrupt_database_is_refused_with_one_line(
    vpuc, zoo_db, zoo_dir, tmp_path, member, content, fragment
):
    broken = tmp_path / "broken"
    shutil.copytree(zoo_db, broken)
    (broken / member).write_text(content)
    out = tmp_path / "t.vpub"
    result = vpuc("compile", zoo_dir / "tinyconvnet.onnx", "-o", out, "--db", broken)
    assert result.returncode == 2, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in result.stderr, result.stderr
    assert not out.exists()


def test_missing_database_is_refused(vpuc, zoo_dir, tmp_path):
    result = vpuc(
        "compile", zoo_dir / "tinyconvnet.onnx", "-o", tmp_path / "t.vpub", "--db", tmp_path / "none"
    )
    assert result.returncode == 2 and "no tuning database" in result.stderr


def test_tune_cli_writes_a_database_compile_finds_by_default(vpuc, tmp_path):
    """`vpuc tune` with its default location, then `vpuc compile` in the same project
    directory applies it without --db."""
    model = tmp_path / "tinyconvnet.onnx"
    zoo.write_zoo(tmp_path, ["tinyconvnet"])
    tuned = vpuc("tune", model, "--trials", "9", "--json", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    outcome = json.loads(tuned.stdout)
    assert outcome["database"] == "vpuc-tuning/cpu" and outcome["tasks"]
    assert (tmp_path / "vpuc-tuning" / "cpu" / META).is_file()
    compiled = vpuc("compile", model, "-o", "t.vpub", "--json", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    host = json.loads(compiled.stdout)["host_build"]
    assert host["tuning_database"] == "vpuc-tuning/cpu"
    assert host["tuned_tasks"] == outcome["stored"]
