"""What a seed draws for one history of the deployed fleet: the fault, its moment and length, the
load, and whether a deploy lands in the middle of it.

Every history starts with the environment's first deploy (the stack created, the follow schedule
with it, the topic's subscription confirmed within the hour, the pipeline's release uploaded some
minutes later) and a stretch at rest; then the fault; then calm until the end, so that each
history ends at rest too. The faults:

* ``tables``: the leases table, the workers table or both slow, throttled or refusing, for ten
  seconds to 30 minutes;
* ``partition``: one instance cut off from the tables, or its whole network gone;
* ``zone``: an Availability Zone lost (its instances' networks gone, launches go to the other);
* ``boot``: boots failing at one step (each step of the user data and the bootstrap) for a while,
  met by an instance EC2 lost (its replacement boots), or by a deploy whose every boot fails;
* ``workers``: one instance's workers crash-looping, or their taker loops wedged;
* ``load``: the load rising tenfold for hours and falling back (scale-out to the maximum, scale-in
  to the minimum), in three histories of ten with a deploy while the group is scaled out;
* ``follow``: the pipeline's follow jobs failing;
* ``replace``: the fleet stack deleted and created again;
* ``single``: one throttled request on the leases table at rest (nothing to page about);
* ``rest``: nothing at all, a deploy of new code in the middle.

With ``tables``, ``partition``, ``zone``, ``workers`` and ``follow``, a deploy of new code starts
during the fault in three histories of ten.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from simulation.fleet_ops.boot_outcomes import STEPS
from simulation.fleet_ops.tables import Outage

KINDS: tuple[tuple[str, float], ...] = (
    ("rest", 0.08),
    ("single", 0.07),
    ("tables", 0.30),
    ("partition", 0.08),
    ("zone", 0.05),
    ("boot", 0.12),
    ("workers", 0.10),
    ("load", 0.10),
    ("follow", 0.05),
    ("replace", 0.05),
)
REST = 1_800.0  # the calm stretch after the first deploy, before any fault
SETTLE = 2_400.0  # calm after the last fault, before the history ends


@dataclass(frozen=True)
class InstanceFault:
    kind: str  # "crash", "wedge", "tables" (partition), "host" (partition), "lost" (EC2 lost it)
    start: float  # seconds after the history began
    end: float
    pick: float  # which serving instance of the current group (a share of their count)


@dataclass
class Scenario:
    seed: int
    kind: str
    duration: float
    load_share: float  # the base load as a share of what the minimum fleet processes
    peak_share: float | None = None  # "load": the peak as a share of what the maximum fleet processes
    first_rollover: float | None = None  # seconds after the start; None: drawn by the stream
    profile: list[tuple[float, float]] = field(default_factory=list)  # (seconds, load factor)
    outages: list[Outage] = field(default_factory=list)  # times in seconds after the start
    instance_faults: list[InstanceFault] = field(default_factory=list)
    zone_loss: tuple[str, float, float] | None = None
    boot_faults: list[tuple[float, float, str, str]] = field(default_factory=list)  # start, end, step, cause
    deploys: list[tuple[float, str | None, str]] = field(default_factory=list)  # at, failing step, cause
    follow_failing: list[tuple[float, float]] = field(default_factory=list)
    release_after: float = 600.0
    replace_at: float | None = None
    faults: list[tuple[float, float, str]] = field(default_factory=list)  # (start, end, what) of every fault
    deploy_in_fault: bool = False

    def describe(self) -> str:
        parts = [f"{what} {start / 60:.1f}-{end / 60:.1f} min" for start, end, what in self.faults]
        if self.deploys:
            parts += [
                f"deploy at {at / 60:.1f} min" + (f" failing at {step}" if step else "")
                for at, step, _ in self.deploys
            ]
        return f"{self.kind}: " + ("; ".join(parts) or "at rest")


def _length(rng: random.Random, low: float = 10.0, high: float = 1_800.0) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def draw(seed: int, kind: str | None = None) -> Scenario:
    rng = random.Random(f"operations-{seed}")
    if kind is None:
        kind = rng.choices([k for k, _ in KINDS], [w for _, w in KINDS])[0]
    start = REST + rng.uniform(0, 900)
    s = Scenario(seed, kind, 0.0, load_share=rng.uniform(0.15, 0.6), release_after=rng.uniform(300, 3_000))
    end = start
    if kind == "tables":
        table = rng.choice(("leases", "workers", "both"))
        how = rng.choice(("slow", "throttled", "refusing"))
        end = start + _length(rng)
        rate = rng.uniform(0.3, 1.0)
        latency = rng.choice((rng.uniform(0.2, 1.5), rng.uniform(2.5, 15.0)))
        for name in ("leases", "workers") if table == "both" else (table,):
            s.outages.append(Outage(name, how, start, end, rate, latency))
        s.faults.append((start, end, f"{table} table(s) {how}"))
    elif kind == "single":
        end = start + 1.0
        s.outages.append(Outage("leases", "one-throttle", start, end))
        s.faults.append((start, end, "one throttled request"))
    elif kind == "partition":
        how = rng.choice(("tables", "host"))
        end = start + (_length(rng, 60.0, 1_800.0) if rng.random() < 0.7 else 4 * 3_600.0)
        s.instance_faults.append(InstanceFault(how, start, end, rng.random()))
        s.faults.append((start, end, f"one instance partitioned ({how})"))
    elif kind == "zone":
        end = start + rng.uniform(600, 3_600)
        s.zone_loss = (rng.choice(("a", "b")), start, end)
        s.faults.append((start, end, "zone lost"))
    elif kind == "boot":
        step = rng.choice(STEPS)
        cause = rng.choice(("lost", "deploy"))
        end = start + rng.uniform(900, 3_000)
        if cause == "deploy":
            s.deploys.append((start, step, rng.choice(("crash", "denied"))))
        else:
            s.boot_faults.append((start, end, step, rng.choice(("crash", "denied"))))
            s.instance_faults.append(InstanceFault("lost", start + 1.0, start + 2.0, rng.random()))
        s.faults.append((start, end, f"boots failing at {step} ({cause})"))
    elif kind == "workers":
        how = rng.choice(("crash", "wedge"))
        end = start + _length(rng, 120.0, 1_800.0)
        s.instance_faults.append(InstanceFault(how, start, end, rng.random()))
        s.faults.append((start, end, f"one instance's workers {how}"))
    elif kind == "load":
        # The scale-out alarm reads leases >= 2N, which the stream reaches at a rollover while the
        # fleet is behind: the load rises half an hour or so before one.
        s.peak_share = rng.uniform(0.75, 0.95)
        s.first_rollover = start + rng.uniform(1_200, 2_400)
        end = start + rng.uniform(4_000, 6_000)
        s.profile = [(start, 10.0), (end, 1.0)]
        s.faults.append((start, end, "load x10"))
        if rng.random() < 0.3:  # a deploy while the group is scaled out
            s.deploys.append((start + rng.uniform(0.6, 0.9) * (end - start), None, ""))
            s.deploy_in_fault = True
    elif kind == "follow":  # after the first good job (the hourly schedule, the release uploaded)
        s.release_after = rng.uniform(300, 1_500)
        start += 3_600.0
        end = start + rng.uniform(1_200, 5_400)
        s.follow_failing.append((start, end))
        # The lake stays stale until a job started after the window has run once.
        s.faults.append((start, end + 3_900.0, "follow jobs failing"))
        end += 3_900.0
    elif kind == "replace":
        s.replace_at = start
        end = start + 1_500.0
        s.faults.append((start, end, "fleet stack replaced"))
    elif kind == "rest":
        s.deploys.append((start, None, ""))
        end = start + 1_200.0
    if kind in ("tables", "partition", "zone", "workers", "follow") and rng.random() < 0.3:
        s.deploys.append((rng.uniform(start, min(end, start + 1_800)), None, ""))
        s.deploy_in_fault = True
    settle = SETTLE + (5.5 * 3_600.0 if kind == "load" else 0.0)
    s.duration = (min(end, start + 3_600.0) if kind == "partition" else end) + settle
    return s


def _table_fault(
    s: Scenario, tables: tuple[str, ...], how: str, *, minutes: float, rate: float = 1.0, latency: float = 0.0
) -> None:
    start = REST + 300.0
    end = start + minutes * 60
    s.outages += [Outage(t, how, start, end, rate, latency) for t in tables]
    s.faults.append((start, end, f"{' and '.join(tables)} table(s) {how}"))
    s.duration = end + SETTLE


def directed(name: str) -> Scenario:
    """A named history that puts one fault where it must be found (the short form's fixed part,
    and the revert table's rows): the same scenario whatever the seed's draw would be."""
    s = Scenario(seed=sum(map(ord, name)), kind=name, duration=0.0, load_share=0.4, release_after=600.0)
    start = REST + 300.0
    if name == "fresh-deploy-at-rest":
        s.deploys.append((start, None, ""))
        s.duration = start + 1_200 + SETTLE
    elif name == "leases-table-refusing":
        _table_fault(s, ("leases",), "refusing", minutes=8)
    elif name == "leases-table-slow-past-timeout":
        _table_fault(s, ("leases",), "slow", minutes=10, latency=5.0)
    elif name == "leases-table-throttled":
        _table_fault(s, ("leases",), "throttled", minutes=8, rate=0.8)
    elif name == "both-tables-throttled":
        _table_fault(s, ("leases", "workers"), "throttled", minutes=8, rate=0.6)
    elif name == "workers-table-refusing":
        _table_fault(s, ("workers",), "refusing", minutes=6)
    elif name == "one-throttled-request":
        s.outages.append(Outage("leases", "one-throttle", start, start + 1.0))
        s.faults.append((start, start + 1.0, "one throttled request"))
        s.duration = start + SETTLE
    elif name.startswith("boot-fails-at-"):
        step = name.removeprefix("boot-fails-at-")
        s.boot_faults.append((start, start + 2_400, step, "crash"))
        s.instance_faults.append(InstanceFault("lost", start + 1.0, start + 2.0, 0.0))
        s.faults.append((start, start + 2_400, f"boots failing at {step} (lost)"))
        s.duration = start + 2_400 + SETTLE
    elif name == "instance-cut-off-from-tables":
        s.instance_faults.append(InstanceFault("tables", start, start + 1_500, 0.5))
        s.faults.append((start, start + 1_500, "one instance partitioned (tables)"))
        s.duration = start + 1_500 + SETTLE
    elif name in ("load-walk", "deploy-while-scaled-out"):
        s.peak_share, s.first_rollover = 0.9, start + 1_500.0
        s.profile = [(start, 10.0), (start + 5_000, 1.0)]
        s.faults.append((start, start + 5_000, "load x10"))
        if name == "deploy-while-scaled-out":
            s.deploys.append((start + 4_200, None, ""))
        s.kind = "load"
        s.duration = start + 5_000 + SETTLE + 5.5 * 3_600
    elif name == "fleet-stack-replaced":
        s.replace_at = start
        s.faults.append((start, start + 1_500, "fleet stack replaced"))
        s.duration = start + 1_500 + SETTLE
    else:
        raise ValueError(f"no directed history {name!r}")
    return s


DIRECTED = (
    "fresh-deploy-at-rest",
    "leases-table-refusing",
    "leases-table-slow-past-timeout",
    "leases-table-throttled",
    "both-tables-throttled",
    "workers-table-refusing",
    "one-throttled-request",
    "boot-fails-at-packages",
    "boot-fails-at-venv",
    "boot-fails-at-units",
    "instance-cut-off-from-tables",
    "load-walk",
    "deploy-while-scaled-out",
    "fleet-stack-replaced",
)
