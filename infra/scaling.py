"""The fleet's scaling rules as plain data (no CDK import), so a test can evaluate them offline.

Both alarms watch the same figure: the Average ReturnedItemCount of the leases table's Scan, which is
the number of leases L (heartbeat rows live in the workers table, so the leases table holds leases
only). Scale-out adds one instance while L >= multiplier x N (the seed's 2N); scale-in removes one
while L <= scale_in_multiplier x N for scale_in_evaluation_periods periods. N is the table's expected
partition count, not the fleet's size, so adding or removing an instance never moves L across either
threshold by itself: for one L at most one rule fires, whatever the fleet's size, and a scale-out is
never followed by a scale-in for the same L. :mod:`infra.monitoring` builds the alarms from
:func:`scaling_thresholds`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ground.settings import Settings


@dataclass(frozen=True)
class ScalingThresholds:
    """``scale_out_at``: L >= this adds one instance; ``scale_in_at``: L <= this removes one."""

    scale_out_at: float
    scale_in_at: float
    min_instances: int
    max_instances: int


def expected_partitions(settings: Settings) -> int:
    """N, the table's expected partition count (settings.table.expected_partitions)."""
    return settings.table.expected_partitions()[0]


def scaling_thresholds(settings: Settings) -> ScalingThresholds:
    n = expected_partitions(settings)
    scaling = settings.scaling
    return ScalingThresholds(
        scale_out_at=scaling.returned_item_count_multiplier * n,
        scale_in_at=scaling.scale_in_multiplier * n,
        min_instances=settings.fleet.min_instances,
        max_instances=settings.fleet.max_instances,
    )


def observed_item_count(leases: int, instances: int, processes_per_instance: int) -> float:
    """What the alarms read for L leases held by ``instances`` x ``processes_per_instance`` workers.

    The leases table holds one row per lease and nothing else (no heartbeat or marker rows), so
    the fleet's size does not enter the figure.
    """
    del instances, processes_per_instance
    return float(leases)


def scaling_step(thresholds: ScalingThresholds, item_count: float, instances: int) -> int:
    """+1, -1 or 0: what the two alarms do to a group of ``instances`` that reads ``item_count``.

    The group stays within its bounds (an alarm's action at the bound changes nothing).
    """
    if item_count >= thresholds.scale_out_at and instances < thresholds.max_instances:
        return 1
    if item_count <= thresholds.scale_in_at and instances > thresholds.min_instances:
        return -1
    return 0
