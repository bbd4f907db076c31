"""Where a sweep's points run: in this process (serial), in N local processes (--jobs N),
or as Ray work (--ray [ADDRESS]). All three call evaluate.evaluate on the same fronts and
points, so they give the same records; each record goes to `on_record` as it arrives.

The front halves are shipped once per worker, never once per point: a local process gets
them pickled as its initialiser's argument; on Ray they are put in the object store once
and each worker is an actor that fetches them when it starts. Each worker runs TVM and
BLAS single-threaded (as compiler/regress does), so N workers use N cores.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import pickle
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed

from vpuc.compiler.errors import first_line
from vpuc.compiler.sweep.space import SweepError

THREAD_VARIABLES = ("TVM_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
RAY_MISSING = "--ray needs Ray, an optional extra of vpuc: pip install 'vpuc[ray]'"
Task = tuple  # (task index, model index, Target)
OnRecord = Callable[[int, dict], None]

_FRONTS: list | None = None  # this worker process's front halves
_DERIVED: dict = {}  # front halves a float model's points needed besides (per worker)


def _evaluate(fronts: list, task: Task) -> tuple[int, dict]:
    from vpuc.compiler.sweep.evaluate import evaluate

    index, model, target = task
    try:
        return index, evaluate(fronts[model], target, _DERIVED)
    except Exception as exc:  # a bug in vpuc at one point: that point fails, the sweep goes on
        reason = f"internal error ({type(exc).__name__}: {first_line(exc)})"
        return index, {"status": "failed", "reason": reason, "figures": None, "timings": {}}


def run_serial(fronts: list, tasks: list[Task], on_record: OnRecord) -> dict:
    for task in tasks:
        on_record(*_evaluate(fronts, task))
    return {"kind": "serial", "workers": 1}


def _init_worker(blob: bytes) -> None:
    global _FRONTS
    _FRONTS = pickle.loads(blob)


def _local_task(task: Task) -> tuple[int, dict]:
    return _evaluate(_FRONTS, task)


def run_local(fronts: list, tasks: list[Task], workers: int, on_record: OnRecord) -> dict:
    """`workers` processes (started fresh: no TVM state forked), each given the fronts once."""
    os.environ.update(dict.fromkeys(THREAD_VARIABLES, "1"))
    context = multiprocessing.get_context("spawn")
    blob = pickle.dumps(fronts)
    with ProcessPoolExecutor(workers, mp_context=context, initializer=_init_worker, initargs=(blob,)) as pool:
        futures = [pool.submit(_local_task, task) for task in tasks]
        try:
            for future in as_completed(futures):
                on_record(*future.result())
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return {"kind": "local", "workers": workers}


class _RayWorker:
    """One Ray worker: the fronts fetched from the object store once, then points."""

    def __init__(self, fronts_ref) -> None:
        os.environ.update(dict.fromkeys(THREAD_VARIABLES, "1"))
        self.fronts = pickle.loads(fronts_ref) if isinstance(fronts_ref, bytes) else fronts_ref

    def run(self, task: Task) -> tuple[int, dict]:
        return _evaluate(self.fronts, task)


def run_ray(
    fronts: list, tasks: list[Task], address: str | None, workers: int | None, on_record: OnRecord
) -> dict:
    """One actor per worker (`workers`, default: the cluster's CPUs); `address` None starts
    a local instance on the loopback interface, else joins that cluster (whose nodes need
    vpuc installed)."""
    try:
        import ray
        from ray.util import ActorPool
    except ImportError:
        raise SweepError(RAY_MISSING) from None
    start = time.perf_counter()
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    env = {"env_vars": dict.fromkeys(THREAD_VARIABLES, "1")}
    try:
        if address:
            ray.init(address=address, runtime_env=env, **options)
        else:
            cpus = workers or os.cpu_count() or 1
            ray.init(address="local", num_cpus=cpus, _node_ip_address="127.0.0.1", runtime_env=env, **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"--ray {address}" if address else "--ray"
        raise SweepError(f"{where}: cannot start or join Ray: {first_line(exc)}") from None
    try:
        count = workers or int(ray.cluster_resources().get("CPU", 1))
        fronts_ref = ray.put(pickle.dumps(fronts))  # once, whatever the number of points
        actor = ray.remote(num_cpus=1, max_restarts=0)(_RayWorker)
        pool = ActorPool([actor.remote(fronts_ref) for _ in range(count)])
        startup_s = time.perf_counter() - start
        for index, record in pool.map_unordered(lambda a, t: a.run.remote(t), tasks):
            on_record(index, record)
    finally:
        ray.shutdown()
    return {"kind": "ray", "address": address or "local", "workers": count, "startup_s": round(startup_s, 3)}
