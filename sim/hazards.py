"""The race check: SRAM accesses by two units that the tokens leave unordered.

Runs after the schedule (timing.py) and before execution. The functional model executes
instructions in program order; the timed machine overlaps its units. The two agree only
when every pair of instructions on different units that touch the same SRAM bytes (at
least one writing) runs in program order in the schedule too. An instruction that starts
before an earlier conflicting one on another unit has ended is a race: the figures would
describe a machine whose results differ from the simulated ones, so it is an error that
names both instructions and asks for a token between them. An instruction's accesses begin
when it starts, or with issue_order = "before_wait" its issue_cycles later (its issue
touches no memory and may overlap its wait: Timeline.issue_overlap), and a MAC instruction's
with mac_load_order = "before_wait" after its first weight load too (the weights it streams
in during the wait: Timeline.accesses_from).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from vpuc.sim.errors import SimError
from vpuc.sim.machine import Plan
from vpuc.sim.memory import Region
from vpuc.sim.timing import QUEUED_UNITS, Timeline
from vpuc.targets.isa.asm import format_instruction
from vpuc.targets.isa.formats import Instruction, Unit


def check_races(instructions: Sequence[Instruction], plans: Sequence[Plan], timeline: Timeline) -> None:
    """SimError at the later instruction of the first unordered conflicting pair."""
    done_pcs: dict[Unit, list[int]] = {u: [] for u in QUEUED_UNITS}
    done_ends: dict[Unit, list[int]] = {u: [] for u in QUEUED_UNITS}
    for pc, plan in enumerate(plans):
        if plan.unit not in done_pcs:
            continue
        accesses = timeline.accesses_from(pc, plan.unit)  # an overlapped issue touches nothing
        for other in QUEUED_UNITS:
            if other == plan.unit:
                continue
            ends = done_ends[other]  # non-decreasing: running maxima of the unit's ends
            for j in range(bisect_right(ends, accesses), len(ends)):
                earlier = done_pcs[other][j]
                if timeline.end[earlier] <= accesses:
                    continue
                conflict = _conflict(plans[earlier], plan)
                if conflict:
                    _race(instructions, plans, timeline, earlier, pc, *conflict)
        done_pcs[plan.unit].append(pc)
        ends = done_ends[plan.unit]  # the DMA unit's transfers may end out of order
        ends.append(max(timeline.end[pc], ends[-1]) if ends else timeline.end[pc])


def _conflict(earlier: Plan, later: Plan) -> tuple[str, str, Region] | None:
    """(what the earlier one does, what the later one does, region) for the first overlap."""
    for written in earlier.writes:
        for kind, regions in (("reads", later.reads), ("writes", later.writes)):
            for region in regions:
                if written.overlaps(region):
                    return "writes", kind, region
    for read in earlier.reads:
        for region in later.writes:
            if read.overlaps(region):
                return "reads", "writes", region
    return None


def _race(
    instructions, plans, timeline: Timeline, earlier: int, later: int, did: str, does: str, region: Region
) -> None:
    accesses = timeline.accesses_from(later, plans[later].unit)
    raise SimError(
        later,
        format_instruction(instructions[later]),
        f"race: {does} SRAM {region} from cycle {accesses}, but pc {earlier} "
        f"'{format_instruction(instructions[earlier])}' {did} it until cycle "
        f"{timeline.end[earlier]}; order them with a token (signal at pc {earlier}, wait here)",
    )
