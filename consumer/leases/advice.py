"""What to change when the fleet cannot hold every ready shard: the same figures as ``consumer plan``.

The worker's capacity warning and ``consumer plan`` give one piece of advice, from one formula
(:func:`suggested_max_leases_for_worker`): a worker should be allowed ``ceil(N / M) + ceil(N / M)``
leases, room for the 2N shards of a rollover spread over M worker processes. The warning names the
settings that exist (``worker.max_leases_for_worker``, ``fleet.max_instances``), with the values the
plan computes for this environment, so the two never disagree.
"""

from __future__ import annotations

import math

from ground.settings import UNBOUNDED, Settings


def suggested_max_leases_for_worker(partitions: int, workers: int) -> int:
    """``ceil(N / M) + ceil(N / M)``: a worker's open shards and as many children during a rollover."""
    return 2 * math.ceil(partitions / max(1, workers))


def capacity_advice(settings: Settings) -> str:
    """The sentence the shortfall warning ends with, for this environment's settings."""
    n, _ = settings.table.expected_partitions()
    workers = settings.total_worker_processes
    suggested = suggested_max_leases_for_worker(n, workers)
    fleet = settings.fleet
    more_workers = (
        f"or run more workers: the group scales out up to fleet.max_instances = {fleet.max_instances} "
        f"instances of fleet.worker_processes_per_instance = {fleet.worker_processes_per_instance}"
    )
    cap = settings.worker.max_leases_for_worker
    if cap == UNBOUNDED or cap < suggested:
        return (
            f"Raise worker.max_leases_for_worker to {suggested} (`consumer plan --env {settings.env}`: "
            f"ceil(N / M) + ceil(N / M) for N = {n} partitions and M = {workers} worker processes), "
            f"{more_workers}."
        )
    return (
        f"worker.max_leases_for_worker is already `consumer plan --env {settings.env}`'s {suggested} for "
        f"N = {n} partitions: the stream has more shards than planned. Set table.partitions to its open "
        f"shards (the OpenShards metric) and run the plan again, {more_workers}."
    )
