"""Every op kind on every shipped target's op list reaches the VPU: the partitioner has a
pattern that produces it and the code generator has a lowering for it. A kind with either
missing would be a promise in the op list that no model can keep."""

from __future__ import annotations

import pytest

from vpuc.compiler.lower.reader.layers import LOWERINGS, LUT_KINDS
from vpuc.compiler.partition.patterns import ACTIVATED_CORES, MAC_CORES, PLAIN_CORES
from vpuc.targets import builtin_target_names, load_target

VPU_TARGETS = [name for name in builtin_target_names() if load_target(name).has_vpu]


@pytest.mark.parametrize("name", VPU_TARGETS)
def test_every_listed_kind_has_a_pattern_and_a_lowering(name):
    target = load_target(name)
    patterns = set(MAC_CORES) | set(ACTIVATED_CORES) | set(PLAIN_CORES)
    lowered = set(LOWERINGS) | set(LUT_KINDS)
    for kind in target.ops:
        assert kind in patterns, f"{name}: '{kind}' is on the op list but no partition pattern produces it"
        assert kind in lowered, f"{name}: '{kind}' is on the op list but the code generator cannot lower it"


def test_the_lookup_table_kinds_need_a_lookup_table():
    for name in VPU_TARGETS:
        target = load_target(name)
        if any(kind in target.ops for kind in LUT_KINDS):
            assert target.hardware.lut_entries >= 256, name
