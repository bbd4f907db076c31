"""`vpuc tune` never makes a model slower than untuned (issue 26): a record is stored only
when the whole model runs faster with it (compiler/tune/model_check.py), and at the end the
model with every record is timed against the untuned one, the records dropped unless it is
faster. The bad record here is deliberate: a convolution left as written (scalar loops, no
tiling), several times slower than its default schedule, in the model and alone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tvm import s_tir

from vpuc.compiler import compat, compile_model
from vpuc.compiler.driver import CompileOptions, prepare_model
from vpuc.compiler.host import database as tuning_db
from vpuc.compiler.host.target import resolve_host_target
from vpuc.compiler.host.tasks import extract_tasks, lower_to_kernels
from vpuc.compiler.tune.keeper import Keeper
from vpuc.compiler.tune.model_check import ModelGate, ModelTimer
from vpuc.compiler.tune.tuner import tune_tasks


def _conv_model() -> onnx.ModelProto:
    """conv 3x3 (16 -> 32 channels) -> relu on 1x16x24x24: the conv is the model's time."""
    weight = np.random.default_rng(0).standard_normal((32, 16, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 24, 24])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 24, 24])], [numpy_helper.from_array(weight, "w")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture(scope="module")
def conv():
    model = _conv_model()
    prepared = prepare_model(model, "cpu", CompileOptions())
    host = resolve_host_target(prepared.target)
    lowered = lower_to_kernels(prepared.mod, host.target)
    tasks = extract_tasks(lowered)
    (task,) = [t for t in tasks if "conv2d" in t.name]
    return model, host, lowered, tasks, task


def _as_written(task, host, db, run_secs: float):
    """A record of the task that leaves the kernel as TVM legalised it: its trace only
    looks a block up (MetaSchedule ignores a record with an empty trace)."""
    ms = compat.metaschedule()
    sch = s_tir.Schedule(task.mod)
    sch.get_sblock(sch.get(sch.get_child_blocks(sch.get_sblock("root"))[0]).name_hint)
    workload = db.commit_workload(task.mod)
    args_info = ms.arg_info.ArgInfo.from_prim_func(task.mod["main"])
    return ms.database.TuningRecord(sch.trace, workload, [run_secs], host.target, args_info)


def test_the_bad_record_slows_the_model(conv):
    """The premise of the tests below, measured: the model is slower with the bad record."""
    _, host, lowered, tasks, task = conv
    timer = ModelTimer(lowered, tasks, host)
    bad, untuned = timer.compare(timer.build({task.name: task.mod["main"]}), timer.build({}))
    assert bad > 1.5 * untuned, (bad, untuned)


def test_a_record_from_an_earlier_run_that_slows_the_model_is_dropped(conv, tmp_path):
    model, host, lowered, tasks, task = conv
    db = tuning_db.open_for_tuning(tmp_path / "db", host)
    db.records.commit_tuning_record(_as_written(task, host, db.records, 1e-9))
    db.tasks[str(compat.structural_hash(task.mod))] = {"kernel": task.name, "model": "conv"}
    tuning_db.save(db)
    assert (
        compile_model(model, target="cpu", tuning_db=tmp_path / "db").report["host_build"]["tuned_tasks"] == 1
    )

    result = tune_tasks("conv", tasks, host, tmp_path / "db", trials=1, progress=False, model=lowered)
    assert result.resumed == 1
    outcome = next(t for t in result.tasks if t.name == task.name)
    assert outcome.stored is False and outcome.reason.startswith("dropped"), outcome
    assert (
        compile_model(model, target="cpu", tuning_db=tmp_path / "db").report["host_build"]["tuned_tasks"] == 0
    )


def test_a_candidate_that_slows_the_model_is_not_stored(conv, tmp_path):
    """The bad kernel as the search's best (a MetaSchedule figure far below the default's),
    passed by a kernel check set to accept anything (from 1e-6x: alone it measured 0.004-0.006x
    the default's speed under a busy loop and two test workers, 12-18 ms against 67 us, with the
    default serial or parallel): the model check refuses it."""
    _, host, lowered, tasks, task = conv
    ms = compat.metaschedule()
    work_db = ms.database.MemoryDatabase(module_equality="structural")
    db = tuning_db.open_for_tuning(tmp_path / "db", host)
    gate = ModelGate(ModelTimer(lowered, tasks, host))
    keeper = Keeper(task, work_db, db, host, "conv", min_speedup=1e-6, gate=gate)
    keeper.time_default(ms)
    work_db.commit_tuning_record(_as_written(task, host, work_db, 1e-9))
    keeper.update()
    assert keeper.outcome.stored is False, keeper.outcome
    assert "the model" in keeper.outcome.reason, keeper.outcome
    assert db.lookup(task.mod, host.target) is None
    assert not gate.kept
