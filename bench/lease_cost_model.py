"""Leases-table cost at steady state, this design's against the Java KCL's, as formulas.

DynamoDB's capacity rules (``scan_units``, ``write_units``, item sizes) and the store that charges a
running fleet with them (``MeteredStore``) are in :mod:`bench.capacity`; bench/lease_cost.py
measures what the real coordinators consume and compares it with :func:`kcl_units_per_second`.

:func:`kcl_units_per_second` is the Java KCL's steady state for the same settings, from its
documented timers:

- writes/s = L / (failover/3)            every held lease renewed every failover/3 (minus ε)
- reads/s  = M × scan(L) / (2 × failover) every worker's taker scans the table every 2 × (failover + ε)

with L leases of ``lease_bytes`` each and M workers. Checkpoint writes are the same for both designs
and are left out of both sides of the comparison. :func:`design_units_per_second` is this design's:

- writes/s = M × ⌈heartbeat bytes / 1 KB⌉ / renewal_interval      one heartbeat row per worker
- reads/s  = M × scan(M heartbeat rows) / (taker_interval / 2)      a round every half taking interval
           + M × scan(L + M heartbeat rows) / full_scan_interval    a full scan every 2 × failover

plus the full scans a change asks for (a worker joins, dies or stops; a child lease at a rollover;
a worker short of its share), which bench/taker_scale.py measures on a running fleet. So writes fall
from one per lease to one per worker (≈ M/L of KCL's) and reads are about KCL's: liveness, which must
be looked at every failover/3 for failover within 1.5 × failover, is read from the small workers
table, not from the leases. :func:`compare` gives both and the provisioned-price ratio (a write unit
costs 5 read units).
"""

from __future__ import annotations

from dataclasses import dataclass

from bench.capacity import item_bytes, lease_size, scan_units, write_units
from consumer.api.leases import ExtendedSequenceNumber, Heartbeat, Lease, heartbeat_to_item
from ground.settings import WorkerSettings

# Provisioned capacity: a write unit costs 5 x a read unit (us-east-1 list prices, also eu-west-1).
WRITE_UNIT_PRICE_IN_READ_UNITS = 5.0


@dataclass(frozen=True)
class Units:
    reads_per_second: float
    writes_per_second: float


def kcl_units_per_second(
    leases: int, workers: int, lease_bytes: int, failover_millis: int, *, epsilon_millis: int = 0
) -> Units:
    """KCL's renewer every failover/3 − ε, its taker's full scan every 2 × (failover + ε)."""
    renewal = (failover_millis / 3 - epsilon_millis) / 1000
    taker = 2 * (failover_millis + epsilon_millis) / 1000
    writes = leases * write_units(lease_bytes) / renewal
    reads = workers * scan_units(leases * lease_bytes) / taker
    return Units(reads, writes)


def design_units_per_second(
    leases: int, workers: int, lease_bytes: int, heartbeat_bytes: int, settings: WorkerSettings
) -> Units:
    """This design's settled state: a heartbeat per worker per renewal; a scan of the workers table
    per worker per taker round (every half taking interval); a full scan of both tables per worker per full-scan interval (the
    scans a change asks for — a worker joining or dying, a child lease at a rollover — come on top,
    and bench/taker_scale.py measures them)."""
    writes = workers * write_units(heartbeat_bytes) / (settings.renewal_interval_millis / 1000)
    workers_scan = scan_units(workers * heartbeat_bytes)
    full = scan_units(leases * lease_bytes) + workers_scan
    reads = workers * (
        workers_scan / (settings.taker_interval_millis / 2000)
        + full / (settings.full_scan_interval_millis / 1000)
    )
    return Units(reads, writes)


@dataclass(frozen=True)
class Comparison:
    ours: Units
    kcl: Units

    @property
    def read_ratio(self) -> float:
        return self.ours.reads_per_second / self.kcl.reads_per_second

    @property
    def write_ratio(self) -> float:
        return self.ours.writes_per_second / self.kcl.writes_per_second

    @property
    def cost_ratio(self) -> float:
        """Provisioned price of ours over KCL's (RCU + 5 x WCU)."""

        def price(units: Units) -> float:
            return units.reads_per_second + WRITE_UNIT_PRICE_IN_READ_UNITS * units.writes_per_second

        return price(self.ours) / price(self.kcl)


def compare(
    leases: int,
    workers: int,
    settings: WorkerSettings,
    *,
    lease_bytes: int | None = None,
    heartbeat_bytes: int | None = None,
) -> Comparison:
    """Both designs' steady-state units for S leases and M workers; item sizes default to typical
    DynamoDB Streams leases (shard id, a 56-digit checkpoint) and heartbeat rows."""
    if lease_bytes is None:
        lease_bytes = lease_size(
            Lease(
                "shardId-00000001700000000000-0123abcd",
                "ip-10-0-1-7.ec2.internal:4001:0000000a",
                1,
                ExtendedSequenceNumber("4" * 56),
                parent_shard_ids=frozenset({"shardId-00000001690000000000-0123abcd"}),
            )
        )
    if heartbeat_bytes is None:
        heartbeat_bytes = item_bytes(
            heartbeat_to_item(Heartbeat("ip-10-0-1-7.ec2.internal:4001:0000000a", 10**6, 10**12 * 1700, 64))
        )
    return Comparison(
        design_units_per_second(leases, workers, lease_bytes, heartbeat_bytes, settings),
        kcl_units_per_second(
            leases,
            workers,
            lease_bytes,
            settings.failover_time_millis,
            epsilon_millis=settings.epsilon_millis,
        ),
    )
