"""Where a suite's jobs run: local worker processes (`--jobs N`; serial is N = 1) or Ray
tasks (`--ray [ADDRESS]`: a local Ray instance without an address, an existing cluster
otherwise). Both run the same function, jobs.run_job, on the same payloads, and hand each
result to `on_result` as it arrives; the caller sorts them, so the report does not depend
on the order jobs finish in.

A job's own failures (compile error, crash, timeout) come back as its result. A Ray task
whose worker dies comes back as a failed result too (Ray's exception, first line), never as
a hung run: tasks are not retried, and their payload carries everything they need.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed

from vpuc.compiler.errors import first_line
from vpuc.compiler.regress.jobs import inline, interrupt_all, run_job
from vpuc.compiler.regress.suite import SuiteError

RAY_MISSING = "--ray needs Ray, an optional extra of vpuc: pip install 'vpuc[ray]'"
Result = dict
OnResult = Callable[[Result], None]


def _failed(payload: dict, reason: str) -> Result:
    return {"model": payload["model"], "target": payload["target"], "status": "failed", "reason": reason,
            "figures": None, "elapsed_s": 0.0}  # fmt: skip


def run_local(payloads: list[dict], workers: int, on_result: OnResult) -> dict:
    """Each job in a worker process of its own, at most `workers` at a time (threads only
    wait for them). Returns what ran them, for the report."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(run_job, p): p for p in payloads}
        try:
            for future in as_completed(futures):
                try:
                    result = future.result()
                except Exception as exc:  # a bug in the runner: that job's failure, the run goes on
                    bug = f"internal error in vpuc regress ({type(exc).__name__}: {first_line(exc)})"
                    result = _failed(futures[future], bug)
                on_result(result)
        except BaseException:  # Ctrl-C: no worker outlives the run
            pool.shutdown(wait=False, cancel_futures=True)
            interrupt_all()
            raise
    return {"kind": "local" if workers > 1 else "serial", "workers": workers}


def run_ray(
    payloads: list[dict],
    address: str | None,
    workers: int | None,
    on_result: OnResult,
    task: Callable[[dict], Result] = run_job,
) -> dict:
    """Each job as a Ray task (one CPU each, never retried). `address` None starts a local
    instance with `workers` CPUs (default: this machine's); otherwise joins that cluster,
    whose nodes need vpuc installed (the payloads carry the files' contents). At most
    twice the cluster's CPUs are in flight, so a large suite's files are read as it goes."""
    try:
        import ray
    except ImportError:
        raise SuiteError(RAY_MISSING) from None
    start = time.perf_counter()
    options = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    try:
        if address:
            ray.init(address=address, **options)
        else:  # a new local instance, on the loopback interface only
            cpus = workers or os.cpu_count() or 1
            ray.init(address="local", num_cpus=cpus, _node_ip_address="127.0.0.1", **options)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"--ray {address}" if address else "--ray"
        raise SuiteError(f"{where}: cannot start or join Ray: {first_line(exc)}") from None
    startup_s = time.perf_counter() - start
    try:
        remote = ray.remote(num_cpus=1, max_retries=0)(task)
        resources = ray.cluster_resources()
        window = max(2, 2 * int(resources.get("CPU", 1)))
        waiting, pending = list(payloads), {}
        try:
            while waiting or pending:
                while waiting and len(pending) < window:
                    payload = waiting.pop(0)
                    pending[remote.remote(inline(payload))] = payload
                done, _ = ray.wait(list(pending), num_returns=1)
                for ref in done:
                    payload = pending.pop(ref)
                    try:
                        result = ray.get(ref)
                    except ray.exceptions.RayError as exc:
                        result = _failed(payload, f"the Ray task failed: {first_line(exc)}")
                    on_result(result)
        except BaseException:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
    finally:
        ray.shutdown()
    return {
        "kind": "ray",
        "address": address or "local",
        "cpus": int(resources.get("CPU", 0)),
        "startup_s": round(startup_s, 3),
    }
