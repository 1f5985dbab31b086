"""Seeded histories of the deployed fleet: a seed draws a scenario, the fleet runs it, the checker
judges it. The short form runs in ``make test`` (tests/simulation/test_operations.py), the long
form in ``make bench`` (bench/operations.py). ``python -m simulation.fleet_ops.histories SEED
[KIND]`` replays one history and prints what happened and what the checker found.
"""

from __future__ import annotations

import logging
import sys
import traceback

from simulation.fleet_ops.clock import WALL0
from simulation.fleet_ops.environment import environment
from simulation.fleet_ops.fleet import Fleet
from simulation.fleet_ops.promises import OpsVerdict, Outcome, check
from simulation.fleet_ops.scenarios import DIRECTED, Scenario, directed, draw
from simulation.fleet_ops.slices import SLICE_KINDS, run_slice


def history(seed: int, kind: str | None = None, *, keep: bool = False) -> Outcome:
    """One seeded history: the deployed fleet's (or, for the data path's kinds, the real worker's
    slice), judged. (The workers' warnings are many; callers silence logging.)"""
    scenario: Scenario | None = None
    try:
        if kind in SLICE_KINDS or (kind is None and seed % 5 == 0):
            return run_slice(seed, kind)
        scenario = directed(kind) if kind in DIRECTED else draw(seed, kind)
        fleet = Fleet(environment(), scenario).run()
        return Outcome(seed, scenario.describe(), check(fleet), fleet if keep else None)
    except Exception:
        verdict = OpsVerdict(crashes=[traceback.format_exc(limit=6)])
        return Outcome(seed, scenario.describe() if scenario else str(kind), verdict)


def describe(outcome: Outcome) -> str:
    lines = [f"seed {outcome.seed}: {outcome.scenario}", f"  verdict: {outcome.verdict}"]
    fleet = outcome.fleet
    if fleet is None:
        return "\n".join(lines)
    for operation in fleet.stack.operations:
        lines.append(
            f"  stack {operation.kind} at {(operation.started - WALL0) / 60:.1f} min: {operation.outcome}"
        )
    for t in fleet.alarms.transitions:
        if t.at > WALL0 + 90:
            lines.append(f"  alarm {t.alarm} -> {t.state} at {(t.at - WALL0) / 60:.1f} min")
    for page in fleet.pager.pages:
        lines.append(
            f"  page {page.alarm} at {(page.at - WALL0) / 60:.1f} min: {'delivered' if page.delivered else page.why}"
        )
    for machine in fleet.machines.values():
        m = machine.member
        lines.append(
            f"  {m.instance_id} ({m.group}, zone {m.zone}) {m.lifecycle} {m.health}"
            + (
                f", Unhealthy by {m.unhealthy_by} at {(m.unhealthy_at - WALL0) / 60:.1f} min"
                if m.unhealthy_at
                else ""
            )
            + (f", terminated ({m.why_terminated})" if m.terminated_at else "")
            + "".join(f"; broken {b.why} from {(b.start - WALL0) / 60:.1f} min" for b in machine.broken)
        )
        lines += [f"      watchdog: {line}" for line in machine.log[-4:]]
    return "\n".join(lines)


if __name__ == "__main__":
    logging.disable(logging.CRITICAL)
    chosen = sys.argv[2] if len(sys.argv) > 2 else None
    print(describe(history(int(sys.argv[1]), chosen, keep=True)))
