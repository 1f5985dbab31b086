"""The checker of the operational promises, judged on one history of the deployed fleet.

1. **No instance is replaced unless it is itself broken.** An instance marked Unhealthy (by its
   watchdog, its boot or EC2's status checks) was, at that moment, broken: its boot failed, its
   workers crash-looped or were wedged, it was cut off from the tables or from everything, its zone
   was lost (a stretch that ended less than :func:`lag_allowed` before counts: the judgement looks
   back that far by design).
2. **A broken instance is replaced within its stated time** (:func:`stated_seconds`, from the boot
   plan's own figures): replaced meaning marked Unhealthy, or gone for another reason (scale-in, a
   deploy). A stretch that ends sooner (the fault went away) asks nothing.
3. **Every alarm is OK at rest**: from the first deploy's completion (after :data:`REST_GRACE`)
   until the first fault, and from :data:`SETTLE_GRACE` after the last fault to the end: no alarm
   is in a state it pages in (ALARM; INSUFFICIENT_DATA entered by a transition, where it has
   InsufficientDataActions). A scaling alarm in ALARM is the group at work, judged by 5. **A single
   event pages nobody.**
4. **Each real failure pages within its stated time**, and the page reaches a confirmed
   subscription: the fleet processing nothing for five minutes (ten minutes), a table throttling
   or refusing for five minutes (ten), the lake's follow jobs failing (eight), records trimmed
   before they were processed (five), the group at its maximum and still falling behind (its
   backlog growing) for 15 minutes (20).
5. **Scaling converges both ways without flapping**: while the load holds, the group's desired
   count moves one way only; after a tenfold load falls back and the fleet has drained what the
   peak left, the group is back at its minimum within :func:`back_to_min_seconds`.
6. **Cost per hour stays within the cost table** (:mod:`simulation.fleet_ops.cost`).
7. **No data lost**: no record trimmed unprocessed. (Re-delivery and per-record loss are the real
   worker's, judged by simulation/checker.py on the slices of simulation/fleet_ops/slices.py.)
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

from deploy.watchdog import POLL_SECONDS
from simulation.fleet_ops.clock import WALL0
from simulation.fleet_ops.fleet import Fleet
from simulation.fleet_ops.instance import Broken, Machine

REST_GRACE = 300.0  # after a deploy completes: the workers' first metrics flush and period
SETTLE_GRACE = 1_200.0  # after a fault: lag caught up, periods of the alarms passed
SINGLE_EVENT_WINDOW = 900.0
CAUGHT_UP_LAG = 60.0  # seconds: the fleet has drained a peak's backlog


@dataclass
class OpsVerdict:
    healthy_replaced: list[str] = field(default_factory=list)
    broken_not_replaced: list[str] = field(default_factory=list)
    red_at_rest: list[str] = field(default_factory=list)
    single_event_pages: list[str] = field(default_factory=list)
    unpaged_failures: list[str] = field(default_factory=list)
    scaling_flaps: list[str] = field(default_factory=list)
    not_back_to_min: list[str] = field(default_factory=list)
    cost_over_table: list[str] = field(default_factory=list)
    lost_records: list[str] = field(default_factory=list)
    data: list[str] = field(default_factory=list)  # the real worker's promises (slices)
    crashes: list[str] = field(default_factory=list)
    # Figures for the bench's rows.
    replaced_over_stated: float = 0.0
    back_to_min: bool | None = None
    lost: float = 0.0
    child_pickup_over_interval: float | None = None  # slices: the slowest child, in taking intervals
    stall_moved_over_timeout: float | None = None  # slices: the hung shard's move, in stall timeouts

    @property
    def ok(self) -> bool:
        return not any(v for v in vars(self).values() if isinstance(v, list))

    def __str__(self) -> str:
        parts = [
            f"{name}: {values[:2]}{' …' if len(values) > 2 else ''}"
            for name, values in vars(self).items()
            if isinstance(values, list) and values
        ]
        return "; ".join(parts) or "ok"


@dataclass
class Outcome:
    """One history: its seed, its scenario as told, the checker's verdict, and the fleet itself when
    the caller keeps it (to describe what happened)."""

    seed: int
    scenario: str
    verdict: OpsVerdict
    fleet: Fleet | None = None


def _minutes(t: float) -> str:
    return f"{(t - WALL0) / 60:.1f} min"


def lag_allowed(fleet: Fleet) -> float:
    plan = fleet.plan
    return 2 * plan.heartbeat_max_age_seconds + 2 * POLL_SECONDS


def stated_seconds(fleet: Fleet, why: str) -> float:
    """How soon a broken instance must be replaced, by what broke it (the boot plan's figures)."""
    plan = fleet.plan
    if why.startswith("boot failed"):
        return 120.0  # the boot marks its instance Unhealthy itself (docs/deploy.md, Boot)
    if why.startswith("workers never healthy"):
        return plan.health_timeout_seconds + lag_allowed(fleet)
    if why == "workers crash-looping":
        return plan.crash_loop_window_seconds + 2 * POLL_SECONDS
    if why == "partitioned (host)":
        return 300.0  # EC2's status checks
    return lag_allowed(fleet)  # workers wedged, cut off from the tables


def _replaced_at(machine: Machine, start: float, until: float, look_back: float) -> float | None:
    """When a broken stretch ended in the instance's replacement: marked Unhealthy during it (or
    within the judgement's look-back after it), or leaving the group for any reason during it."""
    member = machine.member
    found = []
    if member.unhealthy_at is not None and start - 1 <= member.unhealthy_at <= until + look_back:
        found.append(member.unhealthy_at)
    if member.terminating_at is not None and start - 1 <= member.terminating_at <= until:
        found.append(member.terminating_at)
    return min(found) if found else None


def _broken_at(machine: Machine, t: float, slack: float) -> Broken | None:
    for stretch in machine.broken:
        end = math.inf if stretch.end is None else stretch.end
        if stretch.start <= t <= end + slack:
            return stretch
    return None


def _instances(fleet: Fleet, verdict: OpsVerdict) -> None:
    end = fleet.loop.now
    for machine in fleet.machines.values():
        member = machine.member
        if (
            member.unhealthy_at is not None
            and _broken_at(machine, member.unhealthy_at, lag_allowed(fleet)) is None
        ):
            said = "; ".join(machine.log[-2:])
            verdict.healthy_replaced.append(
                f"{member.instance_id} marked Unhealthy by {member.unhealthy_by} at {_minutes(member.unhealthy_at)} "
                f"while not broken ({said})"
            )
        for stretch in machine.broken:
            stated = stated_seconds(fleet, stretch.why)
            until = end if stretch.end is None else min(stretch.end, end)
            replaced = _replaced_at(machine, stretch.start, until, lag_allowed(fleet))
            done = replaced is not None
            if replaced is not None:
                taken = replaced - stretch.start
            elif until - stretch.start >= stated:
                taken = until - stretch.start  # broken that long, and not replaced meanwhile
            else:
                continue  # it came back before its stated time: nothing was owed
            verdict.replaced_over_stated = max(verdict.replaced_over_stated, taken / stated)
            if taken > stated:
                verdict.broken_not_replaced.append(
                    f"{member.instance_id} {stretch.why} from {_minutes(stretch.start)}: "
                    f"{'replaced after' if done else 'not replaced in'} {taken:.0f} s (stated {stated:.0f} s)"
                )


def _fault_windows(fleet: Fleet) -> list[tuple[float, float]]:
    s = fleet.scenario
    windows = [(WALL0 + a, WALL0 + b) for a, b, _ in s.faults]
    windows += [(WALL0 + at, WALL0 + at + 1_800) for at, step, _ in s.deploys if step is not None]
    return windows


def rest_windows(fleet: Fleet) -> list[tuple[float, float]]:
    created = fleet.stack.completed_at("create")
    end = fleet.loop.now
    if created is None:
        return []
    windows = _fault_windows(fleet)
    if not windows:
        return [(created + REST_GRACE, end)]
    first = min(a for a, _ in windows)
    last = max(b for _, b in windows)
    rest = [(created + REST_GRACE, first)]
    if last + SETTLE_GRACE < end:
        rest.append((last + SETTLE_GRACE, end))
    return [(a, b) for a, b in rest if b > a]


def _alarms(fleet: Fleet, verdict: OpsVerdict) -> None:
    end = fleet.loop.now
    if fleet.stack.completed_at("create") is None:
        verdict.red_at_rest.append("the first deploy never completed")
        return
    for spec in fleet.alarms.specs:
        if not spec.pages:
            continue  # a scaling alarm in ALARM is the group at work: judged by the scaling promise
        for a, b in fleet.alarms.alarm_spans(spec, end):
            for r0, r1 in rest_windows(fleet):
                if a < r1 and b > r0:
                    verdict.red_at_rest.append(
                        f"{spec.name} in {fleet.alarms.state_at(spec.name, a)} at rest from "
                        f"{_minutes(max(a, r0))} to {_minutes(min(b, r1))}"
                    )
                    break
    for start, _, what in fleet.scenario.faults:
        if what == "one throttled request":
            t0 = WALL0 + start
            verdict.single_event_pages += [
                f"{p.alarm} paged at {_minutes(p.at)} after one throttled request at {_minutes(t0)}"
                for p in fleet.pager.pages
                if t0 <= p.at <= t0 + SINGLE_EVENT_WINDOW
            ]


def real_failures(fleet: Fleet) -> list[tuple[float, float, str]]:
    """(start, stated seconds, what) of each failure a person must hear of."""
    found: list[tuple[float, float, str]] = []
    created = fleet.stack.completed_at("create") or math.inf
    run: float | None = None
    for sample in fleet.samples:
        idle = sample.at > created and sample.load > 0 and sample.processed <= 0
        if idle and run is None:
            run = sample.at - 60
        elif not idle and run is not None:
            if sample.at - run >= 300:
                found.append((run, 600.0, "the fleet processed nothing"))
            run = None
    if run is not None and fleet.loop.now - run >= 300:
        found.append((run, 600.0, "the fleet processed nothing"))
    for outage in fleet.leases_table.outages + fleet.workers_table.outages:
        failing = (
            outage.kind in ("throttled", "refusing")
            or outage.latency + 0.02 > fleet.leases_table.read_timeout
        )
        if failing and outage.end - outage.start >= 300:
            found.append(
                (
                    outage.start,
                    600.0,
                    f"the {outage.table} table {outage.kind} for {outage.end - outage.start:.0f} s",
                )
            )
    found += _lake_gaps(fleet)
    lost = [x for x in fleet.samples if x.lost > 0]
    if lost:
        found.append((lost[0].at - 60, 300.0, "records trimmed before they were processed"))
    maximum = int(fleet.group_props["MaxSize"])
    behind: float | None = None
    told = False
    for before, sample in itertools.pairwise(fleet.samples):
        # Behind: the backlog grows. (Not the lag: the age of the oldest record grows too while the
        # fleet drains a past peak's backlog at many times the present load.)
        short = sample.in_service >= maximum and sample.backlog > before.backlog and sample.lag > 60
        if not short:
            behind, told = None, False
        elif behind is None:
            behind = sample.at
        if behind is not None and not told and sample.at - behind >= 900:
            found.append((behind, 1_200.0, "the group at its maximum and still falling behind"))
            told = True
    return found


def _lake_gaps(fleet: Fleet) -> list[tuple[float, float, str]]:
    """Stretches of five minutes or more with no follow job reporting, once one has: the lake is
    going stale (its alarm: three one-minute periods, so a page within eight minutes)."""
    follow = fleet.follow
    if follow is None:
        return []
    covered = sorted((j.ready, j.end) for j in follow.jobs if not j.fails and j.ready < j.end)
    found = []
    reach = None
    for ready, end in covered:
        if reach is not None and ready - reach >= 300:
            found.append((reach, 480.0, f"no follow job reporting for {ready - reach:.0f} s"))
        reach = end if reach is None else max(reach, end)
    if reach is not None and fleet.loop.now - reach >= 300:
        found.append((reach, 480.0, "no follow job reporting to the end"))
    return found


def _pages(fleet: Fleet, verdict: OpsVerdict) -> None:
    end = fleet.loop.now
    for start, stated, what in real_failures(fleet):
        if start + stated > end:
            continue
        delivered = [p for p in fleet.pager.pages if start <= p.at <= start + stated and p.delivered]
        if not delivered:
            sent = [p for p in fleet.pager.pages if start <= p.at <= start + stated]
            why = f" (paged {sent[0].alarm}, which reached nobody: {sent[0].why})" if sent else ""
            verdict.unpaged_failures.append(
                f"{what} from {_minutes(start)}: no page within {stated:.0f} s{why}"
            )


def back_to_min_seconds(fleet: Fleet, desired: int) -> float:
    """Each step down waits the scale-in alarm's window and the policy's cooldown."""
    scale_in = next(s for s in fleet.alarms.specs if any("ScaleIn" in p for p in s.policies))
    props = fleet.environment.templates.resources[scale_in.policies[0]]["Properties"]
    per_step = max(float(props.get("Cooldown", 0)), scale_in.window)
    return scale_in.window + (desired - int(fleet.group_props["MinSize"])) * (per_step + 120) + 900


def flap_window(fleet: Fleet) -> float:
    """A move undone within this is a flap: the scale-in alarm's own window (it takes that long to
    remove an instance for a reason; one added back sooner was needed all along)."""
    return max(
        (s.window for s in fleet.alarms.specs if any("ScaleIn" in p for p in s.policies)), default=1_800
    )


def _scaling(fleet: Fleet, verdict: OpsVerdict) -> None:
    s = fleet.scenario
    changes = sorted({WALL0 + at for at, _ in s.profile})
    phases = list(zip([WALL0, *changes], [*changes, fleet.loop.now], strict=True))
    window = flap_window(fleet)
    for a, b in phases:
        series = [(x.at, x.desired) for x in fleet.samples if a <= x.at < b and x.desired > 0]
        moves = [(t1, d1 - d0) for (_, d0), (t1, d1) in itertools.pairwise(series) if d1 != d0]
        for (t0, m0), (t1, m1) in itertools.pairwise(moves):
            if (m0 > 0) != (m1 > 0) and t1 - t0 < window:
                verdict.scaling_flaps.append(
                    f"desired moved {m0:+d} at {_minutes(t0)} and {m1:+d} at {_minutes(t1)} while the load held"
                )
    if s.kind == "load" and s.profile:
        fall = WALL0 + s.profile[-1][0]
        # The way down starts once the fleet has drained what the peak left (scaling in while
        # behind would only be undone); the group's largest size by then is where it starts from.
        caught = next((x.at for x in fleet.samples if x.at > fall and x.lag <= CAUGHT_UP_LAG), None)
        start = fleet.loop.now if caught is None else caught
        peak = max((x.desired for x in fleet.samples if x.at <= start), default=0)
        deadline = start + back_to_min_seconds(fleet, peak)
        minimum = int(fleet.group_props["MinSize"])
        reached = [x.at for x in fleet.samples if x.at > fall and x.desired == minimum]
        verdict.back_to_min = caught is not None and bool(reached) and reached[0] <= deadline
        if not verdict.back_to_min:
            last = [x.desired for x in fleet.samples][-1]
            since = f", caught up at {_minutes(caught)}" if caught is not None else ", never caught up"
            got = f"reached {minimum} at {_minutes(reached[0])}" if reached else f"never back to {minimum}"
            verdict.not_back_to_min.append(
                f"load fell at {_minutes(fall)} from a fleet of {peak}{since}: {last} at "
                f"{_minutes(fleet.loop.now)}, {got} (due by {_minutes(deadline)})"
            )


def check(fleet: Fleet) -> OpsVerdict:
    verdict = OpsVerdict()
    _instances(fleet, verdict)
    _alarms(fleet, verdict)
    _pages(fleet, verdict)
    _scaling(fleet, verdict)
    verdict.cost_over_table = fleet.bill.over_table()
    verdict.lost = fleet.stream.lost
    if fleet.stream.lost > 0:
        verdict.lost_records.append(f"{fleet.stream.lost:.0f} records trimmed before they were processed")
    return verdict
