"""The leases table and the workers table as the fleet meets them: capacity, throttling, outages.

A call is what one of the product's table clients makes: up to :data:`ATTEMPTS` attempts
(``consumer/runtime/clients.py``: standard retries, 3 attempts), each bounded by the read timeout
(a fifth of the failover time). What a call meets:

* **outages** of the history's fault model, on one table: *slow* (every attempt takes ``latency``
  more; past the read timeout it times out), *throttled* (each attempt refused with probability
  ``rate``; a throttle event per refused attempt, as DynamoDB counts them) or *refusing* (HTTP
  500s on every attempt), from ``start`` to ``end``; or *one-throttle*: a single write refused once
  (its retry succeeds), one throttle event and nothing else;
* **capacity**: a provisioned table serves its units per second plus a burst bucket of up to five
  minutes of unused capacity (DynamoDB's documented burst; capacity unused while nobody asks
  anything fills it too); what the fleet asks beyond it in a minute is throttled, as a share of
  that minute's calls. An on-demand table is not throttled here.
* **auto scaling** (the templates' Application Auto Scaling target tracking, :class:`AutoScaling`):
  as DynamoDB's documentation states it, the provisioned units rise when the consumed units stay
  above the target utilization for two consecutive minutes, and fall when they stay 20 points or
  more below it for fifteen; the new figure (consumed / target, within the bounds) serves from
  the next minute on (the table's update is quick, not instant).

Each minute the table publishes what DynamoDB would: ``ReadThrottleEvents`` / ``WriteThrottleEvents``
(Sum, only when there were some) and ``ReturnedItemCount`` of its Scans (Operation=Scan).
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from simulation.fleet_ops.templates import Templates

ATTEMPTS = 3
BURST_SECONDS = 300
DYNAMODB = "AWS/DynamoDB"


@dataclass(frozen=True)
class Outage:
    table: str  # "leases" or "workers"
    kind: str  # "slow", "throttled" or "refusing"
    start: float
    end: float
    rate: float = 1.0  # throttled: share of attempts refused
    latency: float = 0.0  # slow: seconds added to every attempt

    def covers(self, t: float) -> bool:
        return self.start <= t < self.end


@dataclass(frozen=True)
class AutoScaling:
    """One capacity's scalable target and its target tracking policy, from the templates."""

    minimum: float
    maximum: float
    target_percent: float
    up_after: int = 2  # minutes above the target
    down_after: int = 15  # minutes 20 points or more below it
    down_margin: float = 20.0


@dataclass(frozen=True)
class Answer:
    ok: bool
    seconds: float  # how long the call took, retries included
    error: str | None = None


@dataclass
class Table:
    role: str  # "leases" or "workers"
    name: str
    read_units: float | None  # None: on demand
    write_units: float | None
    read_timeout: float
    outages: list[Outage] = field(default_factory=list)
    # Per minute (index since the history began): share of reads / writes refused for capacity, where any.
    capacity_share: dict[int, float] = field(default_factory=dict)
    write_share: dict[int, float] = field(default_factory=dict)
    _burst: list[float] = field(default_factory=lambda: [0.0, 0.0])
    scaling: list[AutoScaling | None] = field(default_factory=lambda: [None, None])  # reads, writes
    _utilization: list[list[float]] = field(default_factory=lambda: [[], []])  # per minute, percent
    _consumed: list[float] = field(default_factory=lambda: [0.0, 0.0])  # units/s, the last minute
    throttles: dict[int, list[int]] = field(default_factory=lambda: defaultdict(lambda: [0, 0]))
    scanned_items: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    scans: dict[int, int] = field(default_factory=lambda: defaultdict(int))

    def outage_at(self, t: float) -> Outage | None:
        for outage in self.outages:
            if outage.covers(t) and outage.kind != "one-throttle":
                return outage
        return None

    def calm(self, t0: float, t1: float, minute_of: float, writes: bool = False) -> bool:
        """No outage and no capacity throttling (of reads, and of ``writes``) anywhere in [t0, t1]."""
        if self.outages and any(
            o.start < t1 and o.end > t0 and o.kind != "one-throttle" for o in self.outages
        ):
            return False
        first, last = int((t0 - minute_of) // 60), int((t1 - minute_of) // 60)
        for shares in (self.capacity_share, self.write_share) if writes else (self.capacity_share,):
            if shares and any(m in shares for m in range(first, last + 1)):
                return False
        return True

    def call(self, t: float, minute: int, write: bool, rng: random.Random) -> Answer:
        """One call at ``t`` (attempts and their back-off included)."""
        outage = self.outage_at(t)
        share = (self.write_share if write else self.capacity_share).get(minute, 0.0)
        spent = 0.0
        for attempt in range(ATTEMPTS):
            backoff = 0.0 if attempt == 0 else rng.uniform(0, 0.05 * 2**attempt)
            spent += backoff
            if outage is not None and outage.kind == "refusing":
                spent += 0.02
                continue
            if outage is not None and outage.kind == "slow":
                took = 0.02 + outage.latency
                if took > self.read_timeout:
                    spent += self.read_timeout
                    continue
                return Answer(True, spent + took)
            rate = share if outage is None else max(share, outage.rate)
            if rate and rng.random() < rate:
                self.throttles[minute][1 if write else 0] += 1
                spent += 0.01
                continue
            return Answer(True, spent + 0.02)
        if outage is not None and outage.kind == "refusing":
            return Answer(False, spent, "LeaseStoreUnavailableError: InternalServerError (HTTP 500)")
        if outage is not None and outage.kind == "slow":
            return Answer(False, spent, "LeaseStoreUnavailableError: Read timeout on endpoint URL")
        return Answer(False, spent, "LeaseStoreThrottledError: ProvisionedThroughputExceededException")

    def write_lands(self, t: float, minute: int, rng: random.Random) -> bool:
        """Whether one conditional write at ``t`` (a lease taken; attempts included) succeeds: never
        while the table refuses or answers past the read timeout; while it throttles, unless every
        attempt is refused."""
        outage = self.outage_at(t)
        if outage is not None and (
            outage.kind == "refusing" or (outage.kind == "slow" and outage.latency + 0.02 > self.read_timeout)
        ):
            return False
        rate = self.write_share.get(minute, 0.0)
        if outage is not None and outage.kind == "throttled":
            rate = max(rate, outage.rate)
        return not rate or rng.random() >= rate**ATTEMPTS

    def charge(self, minute: int, start: float, writes: float, rng: random.Random) -> None:
        """The minute's checkpoint writes (traffic the worker model does not make call by call):
        the attempts an outage or the capacity refuses count as throttle events."""
        refused = self.write_share.get(minute, 0.0)
        for outage in self.outages:
            if outage.kind == "one-throttle" and start <= outage.start < start + 60:
                self.throttles[minute][1] += 1  # one request refused: a checkpoint retried at once
            if outage.kind == "throttled":
                covered = max(0.0, min(start + 60, outage.end) - max(start, outage.start)) / 60
                refused = max(refused, outage.rate * covered)
        if refused and writes:
            self.throttles[minute][1] += int(writes * refused + rng.random())

    def scanned(self, minute: int, items: float) -> None:
        self.scans[minute] += 1
        self.scanned_items[minute] += items

    def plan_minute(self, minute: int, reads: float, writes: float) -> None:
        """The fleet will ask ``reads`` / ``writes`` units this minute: the share it will not get."""
        shares: list[float] = []
        for index, (asked, units) in enumerate(((reads, self.read_units), (writes, self.write_units))):
            if units is None:
                shares.append(0.0)
                continue
            available = units * 60 + self._burst[index]
            served = min(max(0.0, asked), available)
            self._burst[index] = min(units * BURST_SECONDS, available - served)
            shares.append(0.0 if asked <= available else (asked - available) / asked)
            self._consumed[index] = served / 60
            self._scale(index, units, served / 60)
        if shares[0] > 0:
            self.capacity_share[minute] = shares[0]
        if shares[1] > 0:
            self.write_share[minute] = shares[1]

    def _scale(self, index: int, units: float, consumed: float) -> None:
        """Target tracking of one capacity (the module docstring's rules), for the next minute."""
        scaling = self.scaling[index]
        if scaling is None:
            return
        history = self._utilization[index]
        history.append(100 * consumed / units)
        del history[: -scaling.down_after]
        wanted = min(
            scaling.maximum, max(scaling.minimum, math.ceil(100 * consumed / scaling.target_percent))
        )
        above = len(history) >= scaling.up_after and all(
            u > scaling.target_percent for u in history[-scaling.up_after :]
        )
        below = len(history) >= scaling.down_after and all(
            u <= scaling.target_percent - scaling.down_margin for u in history
        )
        if (above and wanted > units) or (below and wanted < units):
            if index == 0:
                self.read_units = wanted
            else:
                self.write_units = wanted
            history.clear()

    def minute_metrics(self, minute: int) -> list[tuple[str, dict[str, str], float]]:
        """(metric, dimensions, value) DynamoDB publishes for this table for ``minute``."""
        found: list[tuple[str, dict[str, str], float]] = []
        read, write = self.throttles.pop(minute, [0, 0])
        if read:
            found.append(("ReadThrottleEvents", {"TableName": self.name}, float(read)))
        if write:
            found.append(("WriteThrottleEvents", {"TableName": self.name}, float(write)))
        scans = self.scans.pop(minute, 0)
        items = self.scanned_items.pop(minute, 0.0)
        if scans:
            found.append(("ReturnedItemCount", {"Operation": "Scan", "TableName": self.name}, items))
        return found


def scan_read_units(items: float, item_bytes: int = 300) -> float:
    """An eventually consistent Scan: half a unit per 4 KB read."""
    return max(0.5, math.ceil(items * item_bytes / 4096) * 0.5)


DIMENSIONS = ("dynamodb:table:ReadCapacityUnits", "dynamodb:table:WriteCapacityUnits")


def table_scaling(templates: Templates, name: str) -> list[AutoScaling | None]:
    """The templates' target tracking of table ``name``'s read and write capacity (None: none)."""
    logical = {
        k
        for k, r in templates.of_type("AWS::DynamoDB::Table").items()
        if r["Properties"].get("TableName") == name
    }
    found: list[AutoScaling | None] = [None, None]
    policies = templates.of_type("AWS::ApplicationAutoScaling::ScalingPolicy").values()
    for target_id, target in templates.of_type("AWS::ApplicationAutoScaling::ScalableTarget").items():
        props = target["Properties"]
        parts = props["ResourceId"]["Fn::Join"][1] if isinstance(props["ResourceId"], dict) else []
        refs = {p["Ref"] for p in parts if isinstance(p, dict) and "Ref" in p}
        if not refs & logical or props["ScalableDimension"] not in DIMENSIONS:
            continue
        (policy,) = [
            p["Properties"] for p in policies if p["Properties"]["ScalingTargetId"] == {"Ref": target_id}
        ]
        config = policy["TargetTrackingScalingPolicyConfiguration"]
        found[DIMENSIONS.index(props["ScalableDimension"])] = AutoScaling(
            float(props["MinCapacity"]), float(props["MaxCapacity"]), float(config["TargetValue"])
        )
    return found
