"""Chaos mode's schedules: which disruption happens when, drawn from a seed so a run can be repeated.

A plan is pure (a list of :class:`ChaosAction`, each saying when, what, for how long and to how
many workers); the demo executes it against the running fleet and the emulator. Three schedules:

``mixed`` (the default) — every kind of disruption at least once, then extra ones at random, spaced
so the fleet is disturbed continuously but never all at once:

* ``kill``     SIGKILL a worker, start a replacement (leases must expire and be taken over);
* ``pause``    SIGSTOP a worker for longer than the failover time, then SIGCONT (it must fence
  itself: no checkpoint after its leases were taken);
* ``restart``  SIGTERM a worker (graceful: drains, checkpoints, releases) and start a new one;
* ``stream-faults`` / ``table-faults``  injected HTTP 500s and throttling on the stream and on
  DynamoDB (every table) for a few seconds;
* ``split``    a partition of the stream splits now.

``dense-pause`` — only SIGSTOP/SIGCONT, close together (a second or two apart, so pauses overlap):
some far longer than the failover time, some just longer, some *just shorter* (the worker wakes
between fencing itself and anybody being allowed to take its leases), often two workers at once
and sometimes the whole fleet.

``slow-table`` — the leases tables (leases and ``-workers``; the source table is left alone) are
slow with a long latency tail, answer some writes with HTTP 500 *after* applying them, serve
stale scans and throttle, each for long overlapping stretches (a third to a half of the load).

A slow processor (every Nth batch sleeps longer than the failover time) runs throughout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

ChaosKind = Literal["kill", "pause", "restart", "stream-faults", "table-faults", "split"]
KINDS: tuple[ChaosKind, ...] = ("kill", "pause", "restart", "stream-faults", "table-faults", "split")
Schedule = Literal["mixed", "dense-pause", "slow-table"]
SCHEDULES: tuple[Schedule, ...] = ("mixed", "dense-pause", "slow-table")
# Which DynamoDB tables a table-faults action hits: every table, or only the application's leases
# and workers tables (the demo turns this into the emulator's table_fault_tables).
FaultScope = Literal["all", "leases"]
FaultValue = float | int

STREAM_FAULTS: dict[str, FaultValue] = {"error_rate": 0.1, "reads_per_shard_per_second": 2.0}
TABLE_FAULTS: dict[str, FaultValue] = {"table_throttle_rate": 0.1, "table_error_rate": 0.05}
FAULT_SECONDS = 6.0
MIXED_PAUSE_FACTOR = 1.5

# dense-pause: pause lengths as multiples of the failover time, in three bands.
PAUSE_BANDS: dict[str, tuple[float, float]] = {
    "just-shorter": (0.7, 0.95),
    "just-longer": (1.05, 1.4),
    "long": (1.5, 3.0),
}


@dataclass(frozen=True)
class ChaosAction:
    """One disruption. ``seconds``: how long a pause or a fault stretch lasts; ``workers``: how many
    running workers a pause freezes (``whole_fleet``: every running one); ``faults``: the emulator
    settings a fault stretch turns on (put back to the baseline afterwards) and ``scope`` the
    tables they hit."""

    at_seconds: float
    kind: ChaosKind
    seconds: float = 0.0
    workers: int = 1
    whole_fleet: bool = False
    faults: tuple[tuple[str, FaultValue], ...] = ()
    scope: FaultScope = "all"

    @property
    def fault_changes(self) -> dict[str, FaultValue]:
        return dict(self.faults)


def _window(duration_seconds: float) -> tuple[float, float]:
    """Disruptions happen between 10 % and 85 % of the load's duration: the fleet starts in peace
    and has time to drain before the verdict."""
    return duration_seconds * 0.10, duration_seconds * 0.85


def chaos_plan(
    seed: int,
    duration_seconds: float,
    min_gap: float = 3.0,
    max_gap: float = 7.0,
    failover_millis: int = 3000,
) -> list[ChaosAction]:
    """The ``mixed`` schedule: disruptions inside the window; each kind at least once.

    The first draws are a shuffled copy of every kind, later ones are random; gaps are drawn in
    [min_gap, max_gap], shrunk when the window is too short to fit every kind. Pauses last 1.5 ×
    the failover time, fault stretches FAULT_SECONDS.
    """
    rng = random.Random(seed)
    start, end = _window(duration_seconds)
    first = list(KINDS)
    rng.shuffle(first)
    scale = min(1.0, (end - start) / (len(KINDS) * max_gap)) if end > start else 0.0
    actions: list[ChaosAction] = []
    at = start
    while first or (scale and at <= end):
        kind = first.pop(0) if first else rng.choice(KINDS)
        actions.append(_mixed_action(round(at, 3), kind, failover_millis))
        at += rng.uniform(min_gap, max_gap) * scale
    return actions


def _mixed_action(at: float, kind: ChaosKind, failover_millis: int) -> ChaosAction:
    if kind == "pause":
        return ChaosAction(at, kind, seconds=MIXED_PAUSE_FACTOR * failover_millis / 1000)
    if kind in ("stream-faults", "table-faults"):
        changes = STREAM_FAULTS if kind == "stream-faults" else TABLE_FAULTS
        return ChaosAction(at, kind, seconds=FAULT_SECONDS, faults=tuple(changes.items()))
    return ChaosAction(at, kind)


def dense_pause_plan(
    seed: int,
    duration_seconds: float,
    failover_millis: int,
    min_gap: float = 0.4,
    max_gap: float = 2.0,
) -> list[ChaosAction]:
    """The ``dense-pause`` schedule: pauses every ``min_gap``–``max_gap`` seconds through the window.

    The first four cover what must be seen in every run (a just-shorter pause, a just-longer pause
    of two workers, a long one, the whole fleet frozen just short of the failover time); the rest
    draw a band at random and freeze one worker (55 %), two (35 %) or the whole fleet (10 %).
    """
    rng = random.Random(seed)
    start, end = _window(duration_seconds)
    failover = failover_millis / 1000
    required: list[tuple[str, int, bool]] = [
        ("just-shorter", 1, False),
        ("just-longer", 2, False),
        ("long", 1, False),
        ("just-shorter", 1, True),
    ]
    rng.shuffle(required)
    scale = min(1.0, (end - start) / (len(required) * max_gap)) if end > start else 0.0
    actions: list[ChaosAction] = []
    at = start
    while required or (scale and at <= end):
        if required:
            band, workers, whole = required.pop(0)
        else:
            band = rng.choice(sorted(PAUSE_BANDS))
            roll = rng.random()
            workers, whole = (1, False) if roll < 0.55 else (2, False) if roll < 0.9 else (1, True)
        low, high = PAUSE_BANDS[band]
        seconds = round(rng.uniform(low, high) * failover, 3)
        actions.append(
            ChaosAction(round(at, 3), "pause", seconds=seconds, workers=workers, whole_fleet=whole)
        )
        at += rng.uniform(min_gap, max_gap) * scale
    return actions


def slow_table_profiles(failover_millis: int) -> dict[str, dict[str, FaultValue]]:
    """The four kinds of leases-table trouble, scaled to the failover time (disjoint settings, so
    stretches of different kinds overlap and end independently):

    * latency: median failover/100, a 5 % tail from failover/6 up to 5 × that (a few calls take
      most of a failover time);
    * ambiguous: 15 % of writes applied and then answered 500, the answer late by failover/10;
    * stale: eventually consistent scans up to failover/2 old;
    * throttle: 20 % throttled, 5 % plain 500s.
    """
    return {
        "latency": {
            "table_latency_millis": max(1, failover_millis // 100),
            "table_latency_tail_millis": max(1, failover_millis // 6),
            "table_latency_tail_rate": 0.05,
        },
        "ambiguous": {"table_ambiguous_rate": 0.15, "table_ambiguous_delay_millis": failover_millis // 10},
        "stale": {"table_stale_scan_millis": failover_millis // 2},
        "throttle": {"table_throttle_rate": 0.2, "table_error_rate": 0.05},
    }


def slow_table_plan(seed: int, duration_seconds: float, failover_millis: int) -> list[ChaosAction]:
    """The ``slow-table`` schedule: per kind of trouble, stretches of 30–50 % of the window with
    short quiet gaps (5–15 %), the first starting in the window's first third; kinds overlap."""
    rng = random.Random(seed)
    start, end = _window(duration_seconds)
    width = max(0.0, end - start)
    actions: list[ChaosAction] = []
    for changes in slow_table_profiles(failover_millis).values():
        at = start + rng.uniform(0.0, 0.3) * width
        while True:
            seconds = min(rng.uniform(0.3, 0.5) * width, end - at)
            actions.append(
                ChaosAction(
                    round(at, 3),
                    "table-faults",
                    seconds=round(max(seconds, 0.0), 3),
                    faults=tuple(changes.items()),
                    scope="leases",
                )
            )
            at += seconds + rng.uniform(0.05, 0.15) * width
            if at >= end or width == 0:
                break
    return sorted(actions, key=lambda a: a.at_seconds)


def schedule_plan(
    schedule: Schedule, seed: int, duration_seconds: float, failover_millis: int
) -> list[ChaosAction]:
    """The plan of a named schedule (``mixed`` is :func:`chaos_plan`)."""
    if schedule == "mixed":
        return chaos_plan(seed, duration_seconds, failover_millis=failover_millis)
    if schedule == "dense-pause":
        return dense_pause_plan(seed, duration_seconds, failover_millis)
    if schedule == "slow-table":
        return slow_table_plan(seed, duration_seconds, failover_millis)
    raise ValueError(f"unknown chaos schedule {schedule!r}; known: {', '.join(SCHEDULES)}")
