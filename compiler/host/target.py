"""The host target: the TVM target the host graph is built for, resolved from the target
TOML's [host] section and the machine the compiler runs on.

    [host] kind, mtriple, mcpu, mattr, num-cores   each left out -> this machine's:
        mtriple    LLVM's process triple
        mcpu       LLVM's host CPU name (e.g. znver3, skylake-avx512)
        num-cores  the cores this process may run on (its affinity mask and CPU quota, cores.py)

The resolved target goes to relax.build, to MetaSchedule (which needs num-cores) and into
the artifact's manifest (`host_target`), with the instruction-set extensions its code may
use: `vpuc run` refuses an artifact whose extensions the running CPU lacks
(runtime/host_check.py) instead of dying of an illegal instruction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tvm

from vpuc.compiler import compat
from vpuc.targets import Target, TargetError
from vpuc.targets.host_cores import available_cores

# LLVM feature names that are instruction-set extensions: code built with one of them may
# execute its instructions. (LLVM's other "features" are tuning flags such as
# fast-variable-perlane-shuffle, or system instructions compiled code never emits.)
ISA_FEATURES = frozenset(
    "sse sse2 sse3 ssse3 sse4.1 sse4.2 sse4a avx avx2 fma fma4 xop f16c bmi bmi2 lzcnt popcnt "
    "movbe aes pclmul vaes vpclmulqdq gfni sha adx cx16 cmov crc32 avxvnni avxvnniint8 avxifma "
    "avxneconvert avxvnniint16 neon fp-armv8 crypto dotprod fullfp16 fp16fml i8mm bf16 sve sve2 "
    "sme lse rcpc v zvfh zfh f d m a c".split()
)
ISA_FEATURE_PREFIXES = ("avx512", "amx-", "avx10", "sve2-", "sme-")


@dataclass(frozen=True)
class HostTarget:
    """A resolved host target: the TVM target and what its code needs of a CPU."""

    target: tvm.target.Target
    fields: dict[str, Any]  # kind, mtriple, mcpu, mattr, num-cores as built
    isa_features: tuple[str, ...]  # extensions the code may use (sorted)
    detected: tuple[str, ...]  # which fields came from this machine

    @property
    def num_cores(self) -> int:
        return int(self.fields["num-cores"])

    def key(self) -> str:
        """One line naming the target, for tuning databases and messages."""
        mattr = ",".join(self.fields.get("mattr", []))
        return (
            f"{self.fields['kind']} {self.fields['mtriple']} {self.fields['mcpu']}"
            + (f" {mattr}" if mattr else "")
            + f" num-cores={self.num_cores}"
        )

    def to_json(self) -> dict[str, Any]:
        """What the manifest records (`host_target`)."""
        return {
            "target": dict(self.fields),
            "isa_features": list(self.isa_features),
            "detected_from_build_machine": list(self.detected),
        }


def resolve_host_target(target: Target) -> HostTarget:
    """The [host] fields, with every one left out taken from the compiling machine."""
    fields = target.host.tvm_target_fields()
    detected = []
    machine = {"mtriple": compat.llvm_process_triple(), "mcpu": compat.llvm_host_cpu_name(),
               "num-cores": machine_cores()}  # fmt: skip
    for key, value in machine.items():
        if key not in fields:
            fields[key] = value
            detected.append(key)
    if not compat.llvm_is_valid_cpu(fields["mcpu"], fields["mtriple"]):
        raise TargetError(
            f"{target.source}: host.mcpu: '{fields['mcpu']}' is not a CPU LLVM knows for "
            f"{fields['mtriple']} (e.g. x86-64, x86-64-v3, znver3, skylake-avx512)"
        )
    tvm_target = tvm.target.Target(fields)
    features = compat.llvm_target_features(tvm_target)
    unknown = [a for a in fields.get("mattr", []) if a[0] == "+" and a[1:] not in features]
    if unknown:
        raise TargetError(f"{target.source}: host.mattr: LLVM does not know {', '.join(unknown)}")
    isa = sorted(f for f in features if f in ISA_FEATURES or f.startswith(ISA_FEATURE_PREFIXES))
    ordered = {key: fields[key] for key in ("kind", "mtriple", "mcpu", "mattr", "num-cores") if key in fields}
    return HostTarget(tvm_target, ordered, tuple(isa), tuple(detected))


def machine_cores() -> int:
    """Cores this process may run on: its affinity mask, capped by a cgroup CPU quota."""
    return available_cores()
