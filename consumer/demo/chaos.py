"""Chaos mode's schedule: which disruption happens when, drawn from a seed so a run can be repeated.

The plan is pure (a list of :class:`ChaosAction`); the demo executes it against the running fleet
and the emulator. Every kind of disruption appears at least once in a run, then extra ones are
drawn at random, spaced so the fleet is disturbed continuously but never all at once:

* ``kill``     SIGKILL a worker, start a replacement (leases must expire and be taken over);
* ``pause``    SIGSTOP a worker for longer than the failover time, then SIGCONT (it must fence
  itself: no checkpoint after its leases were taken);
* ``restart``  SIGTERM a worker (graceful: drains, checkpoints, releases) and start a new one;
* ``stream-faults`` / ``table-faults``  injected HTTP 500s and throttling on the stream and on
  DynamoDB (the leases table) for a few seconds;
* ``split``    a partition of the stream splits now.

A slow processor (every Nth batch sleeps longer than the failover time) runs throughout.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Literal

ChaosKind = Literal["kill", "pause", "restart", "stream-faults", "table-faults", "split"]
KINDS: tuple[ChaosKind, ...] = ("kill", "pause", "restart", "stream-faults", "table-faults", "split")

STREAM_FAULTS = {"error_rate": 0.1, "reads_per_shard_per_second": 2.0}
TABLE_FAULTS = {"table_throttle_rate": 0.1, "table_error_rate": 0.05}
FAULT_SECONDS = 6.0


@dataclass(frozen=True)
class ChaosAction:
    at_seconds: float
    kind: ChaosKind


def chaos_plan(
    seed: int, duration_seconds: float, min_gap: float = 3.0, max_gap: float = 7.0
) -> list[ChaosAction]:
    """Disruptions between 10 % and 85 % of the load's duration; each kind at least once.

    The first draws are a shuffled copy of every kind, later ones are random; gaps are drawn in
    [min_gap, max_gap], shrunk when the window is too short to fit every kind.
    """
    rng = random.Random(seed)
    start, end = duration_seconds * 0.10, duration_seconds * 0.85
    first = list(KINDS)
    rng.shuffle(first)
    scale = min(1.0, (end - start) / (len(KINDS) * max_gap)) if end > start else 0.0
    actions: list[ChaosAction] = []
    at = start
    while first or (scale and at <= end):
        kind = first.pop(0) if first else rng.choice(KINDS)
        actions.append(ChaosAction(round(at, 3), kind))
        at += rng.uniform(min_gap, max_gap) * scale
    return actions
