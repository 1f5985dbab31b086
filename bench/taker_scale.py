"""The taker at 10 000 leases and 100 workers: leases-table units against the Java KCL's, taker CPU,
and how soon a child shard's lease is taken.

Method, in two parts measured in one run:

1. **Fleet on simulated time.** 100 real LeaseCoordinators (heartbeat and taker timers at the
   default settings: failover 10 s, rounds every failover/6 (half the taking interval), full scans at most 2 x failover apart
   unless a reason comes up) share one in-memory leases table through a store that charges every
   request with DynamoDB's capacity rules (bench.capacity.MeteredStore). They start together
   on 10 000 unowned leases and run until every lease is held and the fleet is balanced; then for
   ``MEASURE_SECONDS`` of simulated time shards roll over at the rate a 10 000-partition table
   produces (every shard closes about every 4 hours: 0.69 per second): the owner checkpoints
   SHARD_END and the child's lease is created unowned, as the owner's shard-end discovery creates it.
   Units per second are compared with :func:`bench.lease_cost_model.kcl_units_per_second` (every
   lease renewed every failover/3 - epsilon, a full scan per worker every 2 x (failover + epsilon),
   as the KCL runs its timers): a formula, the rows' basis says so; price = RCU + 5 x WCU.
   Child-lease latency: creation until some worker holds the child, in simulated seconds.
2. **Taker CPU on real pages.** The same 10 000 leases as DynamoDB Scan pages (1 MB each, the
   service's JSON) and 100 heartbeat rows are served to a real boto3 client (signing, parsing, no
   socket), read by the product's DynamoDBLeaseStore: CPU per full scan and per workers-table scan.
   A worker's taker CPU share = full scans per second x CPU per full scan + workers-table reads per
   second x their CPU + the decision CPU measured in part 1 (plan, reconcile, adopt per round).

Both parts run in a new interpreter (``python -m bench.taker_scale --measure``), so the CPU they time
does not depend on what the runner's process ran before.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
from typing import Any

import orjson

from bench.capacity import MeteredStore, lease_size
from bench.common import Ratio, at_most, in_fresh_process, machine
from bench.lease_cost_model import WRITE_UNIT_PRICE_IN_READ_UNITS, kcl_units_per_second
from consumer.api.leases import ExtendedSequenceNumber, Heartbeat, Lease, heartbeat_to_item, lease_to_item
from consumer.api.worker import InMemoryLeaseStore, LeaseCoordinator
from ground.clock import FakeClock
from ground.settings import WorkerSettings

SHARDS = 10_000
WORKERS = 100
MEASURE_SECONDS = 600
ROLLOVERS_PER_SECOND = SHARDS / (4 * 3600)
TICK = 100
PAGE_BYTES = 1_000_000
CHECKPOINT = "49590338271490256608559692538361571095921575989136588898"

LIMITS = (
    "taker_scale: the fleet runs on an in-memory table whose scans are instant and consistent; the "
    "units are DynamoDB's rules applied to the requests made (MeteredStore), not a bill. Leases "
    "finished by rollovers are not cleaned up during the 10 simulated minutes (shard sync's cleanup "
    "is not part of this run), so the table grows by ~400 items."
)


def _shard(index: int) -> str:
    return f"shardId-00000001700000000000-{index:08x}"


def _lease(index: int, parent: str | None = None) -> Lease:
    parents = frozenset({parent}) if parent else frozenset()
    return Lease(_shard(index), None, 0, ExtendedSequenceNumber(CHECKPOINT), parent_shard_ids=parents)


def fleet(settings: WorkerSettings, seed: int = 7) -> dict[str, Any]:
    """Part 1: see the module docstring. Returns the figures."""
    rng = random.Random(seed)
    clock = FakeClock()
    store = MeteredStore(InMemoryLeaseStore())
    for i in range(SHARDS):
        store.inner.create_if_absent(_lease(i, _shard(10**7 + i)))  # parents long gone (cleaned up)
    coordinators = [
        LeaseCoordinator(
            store,
            f"ip-10-0-{w // 250}-{w % 250}.ec2.internal:{4000 + w}:{w:08x}",
            settings,
            clock,
            rng=random.Random(w),
        )
        for w in range(WORKERS)
    ]
    due = {id(c): [0, rng.randrange(settings.taker_interval_millis)] for c in coordinators}
    cpu = {id(c): 0.0 for c in coordinators}

    def tick() -> None:
        now = clock.monotonic_millis()
        for c in coordinators:
            beat, take = due[id(c)]
            if now >= beat:
                c.heartbeat_once()
                due[id(c)][0] = now + settings.renewal_interval_millis
            if now >= take:
                started = time.process_time()
                c.take_round()
                cpu[id(c)] += time.process_time() - started
                due[id(c)][1] = now + c.taker_wait_millis()  # as the taker loop waits
            for lease in c.held():
                if c.handoff_requested(lease.shard_id):
                    c.release(lease.shard_id)
        clock.advance(TICK)

    started_at = clock.monotonic_millis()
    while True:
        tick()
        counts = [sum(1 for lease in c.held() if not lease.finished) for c in coordinators]
        if sum(counts) == SHARDS and max(counts) - min(counts) <= 1:
            break
        if clock.monotonic_millis() - started_at > 20 * settings.failover_time_millis:
            raise RuntimeError(
                f"not balanced after 20 failover periods: {sorted(counts)[:3]}..{sorted(counts)[-3:]}"
            )
    first_start_seconds = (clock.monotonic_millis() - started_at) / 1000
    # A few rounds more, so that every worker's last plan is a settled one.
    for _ in range(int(2 * settings.full_scan_interval_millis / TICK)):
        tick()
    store.meter.read_units = store.meter.write_units = 0.0
    scans0, light0 = store.meter.scans, store.meter.worker_scans
    cpu0 = dict(cpu)
    next_child = SHARDS
    pending: dict[str, int] = {}
    latencies: list[float] = []
    rollovers = 0.0
    end = clock.monotonic_millis() + MEASURE_SECONDS * 1000
    while clock.monotonic_millis() < end:
        rollovers += ROLLOVERS_PER_SECOND * TICK / 1000
        while rollovers >= 1:
            rollovers -= 1
            owner = rng.choice(coordinators)
            held = [lease for lease in owner.held() if not lease.finished]
            if not held:
                continue
            parent = rng.choice(held)
            owner.checkpoint(parent.shard_id, "SHARD_END")
            child = _lease(next_child, parent.shard_id)
            next_child += 1
            store.create_if_absent(child)
            pending[child.shard_id] = clock.monotonic_millis()
        tick()
        now = clock.monotonic_millis()
        for shard_id in [s for s in pending if (lease := store.inner.get(s)) is not None and lease.owner]:
            latencies.append((now - pending.pop(shard_id)) / 1000)
    seconds = MEASURE_SECONDS
    sample = store.inner.get(_shard(0))
    assert sample is not None
    kcl = kcl_units_per_second(
        SHARDS,
        WORKERS,
        lease_size(sample),
        settings.failover_time_millis,
        epsilon_millis=settings.epsilon_millis,
    )
    decision_cpu = statistics.mean(cpu[k] - cpu0[k] for k in cpu) / seconds
    return {
        "reads": store.meter.read_units / seconds,
        "writes": store.meter.write_units / seconds,
        "kcl_reads": kcl.reads_per_second,
        "kcl_writes": kcl.writes_per_second,
        "full_scans_per_worker_s": (store.meter.scans - scans0) / seconds / WORKERS,
        "light_scans_per_worker_s": (store.meter.worker_scans - light0) / seconds / WORKERS,
        "decision_cpu_share": decision_cpu,
        "children": len(latencies),
        "children_untaken": len(pending),
        "child_latency_max": max(latencies) if latencies else float("nan"),
        "child_latency_median": statistics.median(latencies) if latencies else float("nan"),
        "first_start_seconds": first_start_seconds,
    }


class _Pages:
    """Scan pages of both tables, served to a real boto3 DynamoDB client from before-send."""

    def __init__(self, lease_items: list[dict[str, Any]], worker_items: list[dict[str, Any]]) -> None:
        self.pages: dict[str, list[bytes]] = {
            "leases": self._paged(lease_items),
            "leases-workers": self._paged(worker_items),
        }

    @staticmethod
    def _paged(items: list[dict[str, Any]]) -> list[bytes]:
        pages: list[list[dict[str, Any]]] = [[]]
        size = 0
        for item in items:
            item_size = len(orjson.dumps(item))
            if size + item_size > PAGE_BYTES and pages[-1]:
                pages.append([])
                size = 0
            pages[-1].append(item)
            size += item_size
        bodies = []
        for index, page in enumerate(pages):
            body: dict[str, Any] = {"Items": page, "Count": len(page), "ScannedCount": len(page)}
            body["ConsumedCapacity"] = {"TableName": "t", "CapacityUnits": 128.0}
            if index + 1 < len(pages):
                body["LastEvaluatedKey"] = {"k": {"S": str(index + 1)}}
            bodies.append(orjson.dumps(body))
        return bodies

    def send(self, request: Any, **_: Any) -> Any:
        from botocore.awsrequest import AWSResponse

        from bench.canned import _Raw

        payload = orjson.loads(request.body)
        start = int(payload.get("ExclusiveStartKey", {}).get("k", {}).get("S", "0"))
        body = self.pages[payload["TableName"]][start]
        headers = {"Content-Type": "application/x-amz-json-1.0", "x-amzn-RequestId": "bench"}
        return AWSResponse(request.url, 200, headers, _Raw(body))


def page_costs(repeats: int = 5) -> dict[str, float]:
    """Part 2: CPU of one full scan and one workers-table scan through the product's store."""
    import boto3

    from consumer.api.aws import stream_client_config
    from consumer.api.leases import DynamoDBLeaseStore

    leases = [
        lease_to_item(
            Lease(
                _shard(i),
                f"worker-{i % WORKERS:03d}",
                3,
                ExtendedSequenceNumber(CHECKPOINT),
                parent_shard_ids=frozenset({_shard(10**7 + i)}),
            )
        )
        for i in range(SHARDS)
    ]
    beats = [
        heartbeat_to_item(Heartbeat(f"worker-{w:03d}", 1000 + w, 1_764_000_000_000, 100))
        for w in range(WORKERS)
    ]
    pages = _Pages(leases, beats)
    session = boto3.session.Session(
        aws_access_key_id="bench", aws_secret_access_key="bench", region_name="eu-west-1"
    )
    client = session.client("dynamodb", config=stream_client_config())
    client.meta.events.register("before-send.dynamodb", pages.send, unique_id="bench-pages")
    store = DynamoDBLeaseStore(client, "leases", workers_table_name="leases-workers")
    full: list[float] = []
    light: list[float] = []
    for _ in range(repeats):
        started = time.process_time()
        snapshot = store.scan()
        full.append(time.process_time() - started)
        assert len(snapshot.leases) == SHARDS and len(snapshot.heartbeats) == WORKERS
        started = time.process_time()
        store.scan_workers()
        light.append(time.process_time() - started)
    return {
        "full_scan_cpu": statistics.median(full),
        "worker_scan_cpu": statistics.median(light),
        "pages": len(pages.pages["leases"]),
    }


def measure() -> dict[str, Any]:
    """Both parts, in this process (``python -m bench.taker_scale --measure`` prints them as JSON)."""
    return {"costs": page_costs(), "figures": fleet(WorkerSettings())}


def run() -> list[Ratio]:
    print(__doc__)
    print(f"machine: {machine()}")
    settings = WorkerSettings()
    # In a new interpreter: CPU timed in the runner's process depends on what ran there before (a
    # full scan took 843 ms after lease_cost in the same process, 542 ms alone).
    measured = in_fresh_process("bench.taker_scale", "--measure", timeout=3600)
    costs, figures = measured["costs"], measured["figures"]
    print(
        f"real pages: {costs['pages']:.0f} Scan pages of {SHARDS} leases: {1000 * costs['full_scan_cpu']:.0f} ms "
        f"CPU per full scan; workers table ({WORKERS} rows): {1000 * costs['worker_scan_cpu']:.1f} ms",
        flush=True,
    )
    price = figures["reads"] + WRITE_UNIT_PRICE_IN_READ_UNITS * figures["writes"]
    kcl_price = figures["kcl_reads"] + WRITE_UNIT_PRICE_IN_READ_UNITS * figures["kcl_writes"]
    taker_cpu = (
        figures["full_scans_per_worker_s"] * costs["full_scan_cpu"]
        + figures["light_scans_per_worker_s"] * costs["worker_scan_cpu"]
        + figures["decision_cpu_share"]
    )
    print(
        f"fleet: first start balanced after {figures['first_start_seconds']:.0f} simulated s; then "
        f"{MEASURE_SECONDS} s with {ROLLOVERS_PER_SECOND:.2f} rollovers/s: reads {figures['reads']:.0f} RCU/s "
        f"(KCL {figures['kcl_reads']:.0f}), writes {figures['writes']:.1f} WCU/s (KCL {figures['kcl_writes']:.0f}); "
        f"per worker {figures['full_scans_per_worker_s']:.3f} full scans/s and "
        f"{figures['light_scans_per_worker_s']:.3f} workers-table reads/s; decision CPU "
        f"{100 * figures['decision_cpu_share']:.2f} % of a core; taker CPU {100 * taker_cpu:.2f} % of a core; "
        f"{figures['children']} children taken, median {figures['child_latency_median']:.1f} s, "
        f"max {figures['child_latency_max']:.1f} s ({figures['children_untaken']} untaken at the end)",
        flush=True,
    )
    method = (
        f"{SHARDS} leases, {WORKERS} workers, default settings, {MEASURE_SECONDS} simulated s at "
        f"{ROLLOVERS_PER_SECOND:.2f} rollovers/s, MeteredStore units vs bench/lease_cost_model.py's KCL formula"
    )
    sync_interval = settings.shard_sync_interval_millis / 1000
    model = (
        "the KCL's units are a formula of its documented timers (bench/lease_cost_model.py), not a KCL run"
    )
    return [
        at_most(
            "taker_scale_read_units_over_kcl",
            (figures["reads"] / figures["kcl_reads"],),
            2.0,
            method,
            model=model,
        ),
        at_most(
            "taker_scale_price_over_kcl",
            (price / kcl_price,),
            0.2,
            method + f"; price = RCU + 5 x WCU: {price:.0f} vs {kcl_price:.0f}",
            model=model,
        ),
        at_most(
            "taker_scale_cpu_share_per_worker",
            (taker_cpu,),
            0.05,
            f"{figures['full_scans_per_worker_s']:.3f} full scans/s x {1000 * costs['full_scan_cpu']:.0f} ms "
            f"(real Scan pages through boto3 and the store) + {figures['light_scans_per_worker_s']:.3f} "
            f"workers-table reads/s x {1000 * costs['worker_scan_cpu']:.1f} ms + decisions "
            f"{100 * figures['decision_cpu_share']:.2f} %",
        ),
        at_most(
            "taker_scale_child_lease_latency_over_sync_interval",
            (figures["child_latency_max"] / sync_interval,),
            2.0,
            f"slowest of {figures['children']} child leases from creation to taken, over "
            f"shard_sync_interval ({sync_interval:g} s); median {figures['child_latency_median']:.1f} s",
        ),
    ]


if __name__ == "__main__":
    if sys.argv[1:] == ["--measure"]:
        print(json.dumps(measure()))
    else:
        for ratio in run():
            print(ratio.line())
