"""The quantiser's in-process build: the host build's fused kernels with their default
schedules, for the modules calibration and the accuracy report run (observe.py).

    Relax module  ->  LegalizeOps + FuseOps + FuseTIR (compiler/host/tasks.py), each kernel
                      scheduled as the host library's are without a tuning record
                      (compiler/host/defaults.py); observe.py then builds it with
                      compat.build_host (LLVM at QUICK_BUILD_OPT_LEVEL, no kernel asserts)

relax.build alone legalises op by op: one kernel per op, its loops as the op was written,
one scalar at a time. resnet_mini's switchable module ran 9-18 ms per sample that way and
1.4-1.8 ms fused and scheduled, for about the same build time (docs/compile_time.md).

The results are the same bits (tests/quantize/test_calibration_kernels.py): fusion keeps
every element's float operations and their order (an exposed tensor is still written out),
and the default schedule tiles, vectorises and unrolls spatial loops only, so each output
element's reduction adds in the order the op was written. The quantiser's target, `llvm`
without -mcpu, has no fused multiply-add for LLVM to contract a multiply and an add into.
"""

from __future__ import annotations

import tvm

from vpuc.compiler import compat
from vpuc.compiler.host.defaults import ScheduleOptions, scheduled_or_as_written
from vpuc.compiler.host.tasks import kernels, lower_to_kernels

FLOAT32_BITS = 32
# Serial kernels: the default schedule's parallel loops (from defaults.PARALLEL_MIN_MACS)
# would only pay on an idle machine, and the quantiser's runs are a few samples each.
CORES = 1


def scheduled_kernels(mod: tvm.IRModule, llvm_target: str) -> tvm.IRModule:
    """`mod` lowered to fused TIR kernels, each with the default schedule (where it takes one)."""
    target = tvm.target.Target(llvm_target)
    lanes = max(1, compat.llvm_vector_width(target) // FLOAT32_BITS)
    options = ScheduleOptions(vector_lanes=lanes, num_cores=CORES)
    lowered = lower_to_kernels(mod, target)
    for name, kernel in kernels(lowered).items():
        lowered[name] = scheduled_or_as_written(kernel, options)
    return lowered
