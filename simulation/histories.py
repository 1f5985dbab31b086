"""Seeded whole-worker histories: what a seed draws, and one history run and judged.

A seed draws the settings (a cap on leases per worker, read pacing, pool size, batch sizes), what the
workers process with (:data:`KINDS`: the function form on one lane or ten, tumbling windows, the
class form, the change-log sink; :data:`MORE_KINDS`, run by name: the function form parking a
failing key, and the function form over a Kinesis lineage whose merges give a child two parents),
how the processors fail (poison records that must end in the dead letter, flaky ones that must not,
slow calls) and the fault model of the leases table, the stream and
the sinks; :func:`history` then runs three workers (more join during the chaos) for a minute of chaos
and lets the fleet settle. The short form runs in ``make test`` (tests/simulation/test_fault_model.py),
the long form in ``make bench`` (bench/whole_worker.py), the revert table in scripts/revert_check.py.
"""

from __future__ import annotations

import random
from typing import Any

from ground.settings import Settings
from simulation.checker import Verdict, check
from simulation.faults import Faults
from simulation.sinks import DEAD_LETTERS, SinkFaults
from simulation.stream import StreamFaults
from simulation.world import Plan, World

KINDS = ("function", "lanes", "windows", "class", "changelog")
# Kinds outside the cycle above (so every seed keeps the kind it always had): run by seed, by name.
# ``parked``: the function form with processing.on_failure park_key, on one lane or ten.
# ``merged``: the function form, on one lane or ten, over a Kinesis lineage (merges: a child of two
# parents, which starts only once both are finished; simulation/stream.py with_merges).
MORE_KINDS = ("parked", "merged")
MODULE = "simulation.processors"
FAILOVER = 10_000


def plan_for(rng: random.Random, kind: str) -> Plan:
    """What a history processes with, and how its processors fail."""
    retries = rng.choice((2, 3, -1))
    dead_letter = retries >= 0 and rng.random() < 0.8
    processing: dict[str, Any] = {
        "retry": {
            "max_retry_attempts": retries,
            "base_backoff_millis": 50,
            "max_backoff_millis": 2_000,
            "bisect_on_error": True,  # a poison record ends in its dead letter alone
        },
        "batching": {"batch_size": rng.choice((1, 4, 100))},
    }
    if dead_letter:
        processing["dead_letter"] = {"type": "s3", "uri": DEAD_LETTERS}
    plan = Plan(
        processing,
        poison_share=0.03 if dead_letter else 0.0,
        flaky_share=0.05,
        flaky_max=min(3, retries) if retries > 0 else 3,
        slow_rate=rng.choice((0.0, 0.05, 0.2)),
        slow_millis=rng.choice((500, 3 * FAILOVER // 2)),
    )
    if kind == "function":
        processing["processor"] = f"{MODULE}:Recorder"
    elif kind == "lanes":
        processing["processor"] = f"{MODULE}:Recorder"
        processing["parallelization_factor"] = 10
    elif kind == "windows":
        processing["processor"] = f"{MODULE}:WindowRecorder"
        processing["tumbling_window_seconds"] = rng.choice((2, 5, 10))
    elif kind == "class":
        processing.clear()
        processing["processor"] = f"{MODULE}:ClassRecorder"
        plan.poison_share = plan.flaky_share = 0.0
        plan.fail_rate = 0.05
    elif kind == "parked":
        processing["processor"] = f"{MODULE}:Recorder"
        processing["on_failure"] = "park_key"
        processing["max_parked_records"] = rng.choice((5, 10_000))
        processing["parallelization_factor"] = rng.choice((1, 10))
    elif kind == "merged":
        processing["processor"] = f"{MODULE}:Recorder"
        processing["parallelization_factor"] = rng.choice((1, 10))
    elif kind == "changelog":
        processing["processor"] = f"{MODULE}:RecordingChangelog"
        processing["parallelization_factor"] = rng.choice((1, 10))
    else:
        raise ValueError(f"unknown kind {kind!r}")
    return plan


def sim_settings(worker: dict[str, Any], processing: dict[str, Any] | None = None) -> Settings:
    """The settings of a simulated fleet: ``worker.*`` and ``processing.*`` as given, the rest fixed."""
    return Settings.model_validate(
        {
            "application_name": "sim",
            "table": {"name": "orders", "partition_key": {"name": "pk"}, "stream_view_type": "NEW_IMAGE"},
            "worker": worker,
            "processing": processing or {"processor": f"{MODULE}:Recorder"},
        }
    )


def settings_for(rng: random.Random, plan: Plan, *, trims: bool) -> Settings:
    """Default timing (failover 10 s, skew 0.5 s), a short shard sync, and the rest drawn.
    TRIM_HORIZON: the checker requires every record of every shard, which a LATEST first start
    rightly skips for shards that closed before it.
    With trimming, ``skip_to_trim_horizon``: ``fail`` would (rightly) leave the shard stuck."""
    worker = {
        "initial_position": "TRIM_HORIZON",
        "failover_time_millis": FAILOVER,
        "max_clock_skew_millis": 500,
        "shard_sync_interval_millis": 5_000,
        "parent_shard_poll_interval_millis": 2_000,
        "max_leases_for_worker": rng.choice((2, 4, 10_000)),
        "max_records": rng.choice((3, 20, 1000)),
        "idle_time_between_reads_millis": rng.choice((200, 1_000)),
        "max_worker_threads": rng.choice((2, 8)),
        "task_backoff_time_millis": rng.choice((50, 500)),
        "on_trimmed": "skip_to_trim_horizon" if trims else "fail",
    }
    if plan.processing.get("on_failure") == "park_key":  # a parked key is retried on empty polls too
        worker["call_process_records_even_for_empty_record_list"] = True
    return sim_settings(worker, plan.processing)


def world_for(seed: int, kind: str | None = None) -> World:
    rng = random.Random(seed)
    kind = kind or rng.choice(KINDS)
    plan = plan_for(rng, kind)
    stream_faults = StreamFaults.real_world(rng, FAILOVER)
    settings = settings_for(rng, plan, trims=stream_faults.retention_millis is not None)
    return World(
        seed,
        settings,
        Faults.real_world(rng, FAILOVER),
        plan=plan,
        stream_faults=stream_faults,
        sink_faults=SinkFaults.real_world(rng, FAILOVER),
        merges=kind == "merged",
    )


def history(
    seed: int, *, kind: str | None = None, chaos_millis: int = 60_000, settle_millis: int = 300_000
) -> tuple[World, Verdict]:
    """One seeded history: three workers, a minute of chaos under the fault model, then calm; every
    shard must finish within ``settle_millis`` of the calm (the progress bound)."""
    world = world_for(seed, kind)
    finished = world.run(workers=3, chaos_millis=chaos_millis, settle_millis=settle_millis)
    return world, check(world, finished)
