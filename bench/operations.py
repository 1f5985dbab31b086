"""The deployed fleet under one fault model, long form: thousands of seeded histories of prod as its
synthesized templates deploy it, judged by the checker of operational promises.

Method: simulation/fleet_ops (its tests in tests/simulation; the short form, 42 histories, in
``make test``). A history deploys the prod environment from its synthesized templates (``cdk synth``
once per code version, cached under var/operations/), lets it rest, meets one fault, and calms down.
What is the product's own code: the alarms' expressions, thresholds, periods and missing-data rules,
the scaling policies' adjustments and cooldowns, the group's minimum, maximum, creation policy and
lifecycle hook (all read from the templates); every instance's watchdog (``deploy.watchdog.Watchdog``
built as its ``main`` builds it, with ``deploy.health.HealthJudge``, ``WorkersTableProbe`` and
``deploy.peers.PeerLook``), stepped every 5 s against fake Auto Scaling, DynamoDB and EC2 clients that
fail with botocore's errors; what a boot
failing at each step does (the user data under bash with stub commands, ``deploy.bootstrap.boot`` and
``main`` under a temporary root, run once per process); heartbeat rows written by the worker's own
serializer. What is modelled: the Auto Scaling group (launch, InService at EC2 running, health
replacement, EC2 status checks, the termination hook, simple scaling with cooldowns, two zones),
CloudFormation's create, replacing update and rollback; each worker process (its taker rounds, heartbeat
puts, fencing, heartbeat file and metrics follow the rules of consumer/leases and consumer/telemetry;
tests/simulation holds the model to the real worker under the same outages); leases moving between
workers and the records they process at ``fleet.records_per_second_per_process``; the tables'
capacity, burst and outages (slow, throttled, refusing); the stream's rollovers; boot step durations;
CloudWatch (simulation/cloudwatch.py: statistics, metric math, Metrics Insights, missing data); the
follow jobs; the topic's subscription; prices (the cost table's own). One history in five is instead a
slice of the data path run by the real worker (simulation/world.py) at failover 3 s, as issue 46's
own benches: shard rollovers (a child taken within one taking interval of the later of its parent's
end and its lease's creation), a processor or a stream read that hangs on one shard in whichever
worker runs it (each move of its lease within 1.2 x the 20 s stall timeout; a page within the stall
timeout and the template's StalledShards alarm window), judged also by simulation/checker.py's
promises (no loss, no re-delivery by one owner, order, progress). Stated replacement times, from the
boot plan: a failed boot 120 s; workers never healthy health_timeout + 2 x (heartbeat_max_age + 5 s);
a crash loop crash_loop_window + 10 s; wedged workers or an instance cut off from the tables
2 x (heartbeat_max_age + 5 s); a host without network 300 s (EC2's status checks). Seeds 1 000 000
and up; ``BENCH_SCALE`` scales the count (default 2 000).

Rows: histories with any violation; instances marked Unhealthy while not broken; the slowest
replacement of a broken instance over its stated time; alarms in ALARM at rest (each alarm and
stretch); of the histories whose load rose tenfold and fell back, the share whose group was back at
its minimum in time; scaling moves undone within the scale-in alarm's window while the load held;
records lost (trimmed unprocessed, or lost by the real worker).
"""

from __future__ import annotations

import collections
import multiprocessing
import os
import time
from dataclasses import dataclass

from bench.common import Ratio

HISTORIES = 2_000
FIRST_SEED = 1_000_000
LIMITS = (
    "the fleet model is ours: boot step durations, EMR Serverless start-up, the follow jobs' freshness, "
    "EC2 status-check delays and DynamoDB's behaviour under outages are chosen, not measured; a "
    "worker process is a model held to the real worker's heartbeat file by tests/simulation; the "
    "data path's promises are the real worker's, in one history in five. A violation is a promise "
    "broken by the code as it is: the rows say which."
)


@dataclass(frozen=True)
class Summary:
    seed: int
    scenario: str
    verdict: str
    ok: bool
    healthy_replaced: int
    replaced_over_stated: float
    red_at_rest: int
    back_to_min: bool | None
    flaps: int
    lost: float
    seconds: float
    kinds: tuple[str, ...]


def _one(seed: int) -> Summary:
    import logging

    from simulation.fleet_ops.histories import history

    logging.disable(logging.CRITICAL)
    started = time.process_time()
    outcome = history(seed)
    v = outcome.verdict
    kinds = tuple(name for name, value in vars(v).items() if isinstance(value, list) and value)
    return Summary(
        seed,
        outcome.scenario,
        str(v),
        v.ok,
        len(v.healthy_replaced),
        v.replaced_over_stated,
        len(v.red_at_rest),
        v.back_to_min,
        len(v.scaling_flaps),
        v.lost,
        time.process_time() - started,
        kinds,
    )


def run() -> list[Ratio]:
    from simulation.fleet_ops.environment import environment

    print(__doc__)
    environment()  # synthesize (or read the cache) and run the boot scripts once, before the fork
    scale = float(os.environ.get("BENCH_SCALE", "1"))
    count = max(1, int(HISTORIES * scale))
    seeds = range(FIRST_SEED, FIRST_SEED + count)
    started = time.monotonic()
    done: list[Summary] = []
    with multiprocessing.get_context("fork").Pool(processes=max(1, min(2, os.cpu_count() or 1))) as pool:
        for index, summary in enumerate(pool.imap_unordered(_one, seeds, chunksize=4), 1):
            done.append(summary)
            if not summary.ok:
                print(
                    f"VIOLATION seed {summary.seed} ({summary.scenario}): {summary.verdict[:500]}", flush=True
                )
            if index % 200 == 0:
                bad = sum(1 for s in done if not s.ok)
                print(f"{index} of {count} histories: {bad} with a violation", flush=True)
    elapsed = time.monotonic() - started
    times = sorted(s.seconds for s in done)
    violating = [s for s in done if not s.ok]
    by_promise = collections.Counter(kind for s in violating for kind in s.kinds)
    by_scenario = collections.Counter(s.scenario.split(":")[0] for s in violating)
    print(
        f"{count} histories in {elapsed:.0f} s (CPU per history: {times[0]:.2f} s min, "
        f"{times[len(times) // 2]:.2f} s median, {times[-1]:.2f} s max): {len(violating)} with a violation"
    )
    print(f"violations by promise: {dict(by_promise)}; by scenario: {dict(by_scenario)}")
    walks = [s.back_to_min for s in done if s.back_to_min is not None]
    back = sum(1 for b in walks if b) / len(walks) if walks else 1.0
    worst = max((s.replaced_over_stated for s in done), default=0.0)
    healthy = sum(s.healthy_replaced for s in done)
    red = sum(s.red_at_rest for s in done)
    flaps = sum(s.flaps for s in done)
    lost = sum(s.lost for s in done)
    seeds_of = ", ".join(str(s.seed) for s in violating[:12]) + (" …" if len(violating) > 12 else "")
    base = f"{count} seeded histories of the deployed-fleet model (bench/operations.py)"
    return [
        Ratio(
            "operations_histories_violating",
            (float(len(violating)),),
            "=0",
            not violating,
            f"{base}: {len(violating)} with a violation" + (f" (seeds {seeds_of})" if violating else ""),
        ),
        Ratio(
            "operations_healthy_instances_replaced",
            (float(healthy),),
            "=0",
            healthy == 0,
            f"{base}: instances marked Unhealthy while not broken",
        ),
        Ratio(
            "operations_broken_instance_replaced_over_stated",
            (worst,),
            "<=1",
            worst <= 1,
            f"{base}: slowest replacement of a broken instance over its stated time",
        ),
        Ratio(
            "operations_alarms_red_at_rest",
            (float(red),),
            "=0",
            red == 0,
            f"{base}: paging alarms in ALARM at rest (each alarm and stretch)",
        ),
        Ratio(
            "operations_scale_in_back_to_min",
            (back,),
            "=1",
            back == 1,
            f"{base}: of {len(walks)} tenfold load walks, the share back at the group's minimum in time",
        ),
        Ratio(
            "operations_scaling_flaps",
            (float(flaps),),
            "=0",
            flaps == 0,
            f"{base}: scaling moves undone within the scale-in alarm's window while the load held",
        ),
        Ratio(
            "operations_lost_records",
            (lost,),
            "=0",
            lost == 0,
            f"{base}: records trimmed unprocessed, or lost by the real worker's slices",
        ),
    ]
