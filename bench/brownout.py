"""A DynamoDB brownout: the leases and workers tables refuse every call for several failover times.

Method: ``consumer run`` processes on the emulator, grouped into "instances" of a few each. Every
instance runs the real health path: each worker writes its heartbeat file (``--heartbeat-file``,
as the units on an instance do) and the instance's :class:`deploy.watchdog.Watchdog` (the real
judge, and its real look at the workers table through :class:`deploy.watchdog.WorkersTableProbe`)
polls them every half second. Only Auto Scaling is a stand-in: a group whose instances are all
InService, which records every ``SetInstanceHealth``. Worker ids carry their instance as host
(``worker-3@inst-1:...``), as they carry the host name on an instance. The watchdog's age limit
(``max(120 s, 6 x failover)`` on an instance) is set to 4 x the failover time so that the outage
(6 x) outlasts it: the judge of 674a950 marked every instance of the fleet Unhealthy in this
scenario. (Shorter than that, a healthy worker on this shared 2-core machine may go unscheduled
long enough to look stalled.) The workers keep the product's shard sync interval (a minute): shards
that roll over during an outage get no lease until a listing or a children lookup succeeds, and a
shorter interval here would hide a wait a deployed fleet has.

A writer keeps writing round-robin over one key per partition. Once the fleet is balanced, the
leases and workers tables answer every call with throttling, then with HTTP 500, for
``outage_failovers`` x failover in all (the source table and the stream are left alone). Then:

- instances the watchdogs marked Unhealthy (goal 0), and the watchdogs' own words for what they saw
  and did not blame (the failing rounds must have been seen: otherwise the scenario proved nothing);
- resume: from the end of the outage until every key has a record delivered to a processor again
  (the slowest key), over the taker interval (goal <= 1);
- records lost: acknowledged writes never delivered (goal 0); duplicates are counted and shown.
  Each one is then found in the stream and judged against the leases table as the workers left it
  (they are killed first, so that nothing moves while it is read): *behind a checkpoint* (its
  shard's lease checkpointed at or past it, or finished, or the shard's lease gone while a
  descendant's has started) is a record skipped, lost for good (goal 0); *ahead of every
  checkpoint* is a record the fleet has not reached yet, still in the stream for its 24 hours (a
  stall: the fleet's liveness, not its promise that no checkpoint passes an unprocessed record).

Then, for each table in ``alone`` and once every key delivers again, that table alone fails the
same way (throttling, then HTTP 500) while the other answers; instances marked Unhealthy during it
(goal 0), and the watchdogs' words for what they saw and did not blame (which must be there).
*The leases table alone*: the heartbeat loops go on writing their rows while every lease-taking
round fails. A watchdog that counted other instances' workers as fine by their heartbeat rows alone
blamed its own instance here, every instance of the fleet (the outage lasts 3 x the age limit; the
old rule fired at about twice the limit after the first failing round). *The workers table alone*:
heartbeats fail while the leases table answers; the workers fence themselves (a lease is held only
while its owner's heartbeat row is fresh) and the watchdog cannot read the table either, so the
failure is the tables', not an instance's; once it answers, the fleet takes its leases back.

With ``control``, one worker is then frozen (SIGSTOP) for 2.5 x the age limit while the others are
fine: its instance must be marked Unhealthy (the watchdog still blames the instance's own failure,
once it has lasted an age limit past the limit with the others fine).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from bench.common import Ratio, at_most
from bench.fleet_load import keys_covering
from bench.fleet_records import TABLE
from bench.fleet_support import Stack, bench_stack, drain_lost, lost_writes_ratio
from bench.instances import StandInGroup, booted, start_instances, watch

LIMITS = (
    "both tables: a worker whose leases-table read failed tries again a taker interval later (its log: "
    "'next try in 2000 ms'), and its leases were dropped during the outage (no heartbeat within "
    "failover), so the slowest key waits for that retry, the take, the shard's start and its first "
    "read; retrying sooner would add calls to a table that is refusing them. The workers table alone: "
    "the leases of the shards that rolled over meanwhile come from the sync leader's listing (or the "
    "children lookups), tried again a taker interval after the one that failed, then each child "
    "waits for its parents (polled every parent_shard_poll_interval_millis)."
)


@dataclass
class Alone:
    """One table failing alone ("leases" or "workers"): instances marked Unhealthy meanwhile, and the
    watchdogs' messages for what they saw and did not blame."""

    table: str
    seconds: float
    resume_seconds: float
    marked: list[str]
    window: tuple[float, float]  # wall clock, from the failure's start to the fleet settled after it
    excused: list[str] = field(default_factory=list)


@dataclass
class Outcome:
    marked_in_outage: list[str]
    marked_in_control: list[str]
    excused: list[str]
    alone: dict[str, Alone]
    resume_seconds: float
    taker_seconds: float
    outage_seconds: float
    lost: list[tuple[str, int]]
    behind_checkpoint: list[tuple[str, int]]
    listing_workers_at_end: int
    workers: int
    duplicates: int
    deliveries: int
    problems: list[str]


def resumed_after(stack: Stack, keys: list[str], since: float, timeout: float) -> float:
    """Seconds from ``since`` until every key had a record delivered after it (the slowest key)."""
    first: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(first) < len(keys):
        for d in stack.deliveries.poll():
            if d.key in keys and d.arrived > since and d.key not in first:
                first[d.key] = d.arrived
        time.sleep(0.05)
    if len(first) < len(keys):
        raise RuntimeError(
            f"{len(keys) - len(first)} keys got no record within {timeout:.0f} s of the outage's end"
        )
    return max(first.values()) - since


def fail_tables(stack: Stack, tables: str, seconds: float) -> None:
    """The tables named (comma-separated) throttle every call for half of ``seconds``, then answer
    HTTP 500 for the other half; the source table and the stream are left alone."""
    control_api = stack.emulator.control
    control_api.set_faults(table_fault_tables=tables, table_throttle_rate=1.0, table_error_rate=0.0)
    time.sleep(seconds / 2)
    control_api.set_faults(table_throttle_rate=0.0, table_error_rate=1.0)
    time.sleep(seconds / 2)
    control_api.set_faults(table_throttle_rate=0.0, table_error_rate=0.0)


def stream_positions(stack: Stack, shards: list[dict[str, Any]]) -> dict[tuple[str, int], tuple[str, int]]:
    """(key, write number) -> (shard, sequence number) of every record in the table's stream, read
    from the start of every shard of ``shards`` (the emulator's true shard table, parents included)."""
    streams = stack.emulator.client("dynamodbstreams")
    found: dict[tuple[str, int], tuple[str, int]] = {}
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=shard["streamArn"], ShardId=shard["shardId"], ShardIteratorType="TRIM_HORIZON"
        ).get("ShardIterator")
        while iterator:
            page = streams.get_records(ShardIterator=iterator, Limit=1000)
            for record in page["Records"]:
                image = record["dynamodb"].get("NewImage") or {}
                if "pk" in image and "w" in image:
                    position = (shard["shardId"], int(record["dynamodb"]["SequenceNumber"]))
                    found[(image["pk"]["S"], int(image["w"]["N"]))] = position
            iterator = page.get("NextShardIterator") if page["Records"] or not shard["open"] else None
    return found


def behind_a_checkpoint(stack: Stack, lost: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """The undelivered writes that the leases table has passed (module docstring): skipped records."""
    if not lost:
        return []
    shards = stack.emulator.control.shards(TABLE)
    positions = stream_positions(stack, shards)
    leases = stack.snapshot().leases
    children: dict[str, list[str]] = {}
    for shard in shards:
        if shard["parentShardId"]:
            children.setdefault(shard["parentShardId"], []).append(shard["shardId"])

    def descendant_started(shard_id: str) -> bool:
        for child in children.get(shard_id, []):
            lease = leases.get(child)
            if lease is not None and lease.checkpoint.sequence != "TRIM_HORIZON":
                return True
            if descendant_started(child):
                return True
        return False

    skipped = []
    for write in lost:
        if write not in positions:
            raise RuntimeError(f"acknowledged write {write} is not in the stream")
        shard_id, sequence = positions[write]
        lease = leases.get(shard_id)
        if lease is None:
            passed = descendant_started(shard_id)
        else:
            checkpoint = lease.checkpoint.sequence
            passed = checkpoint == "SHARD_END" or (checkpoint.isdigit() and int(checkpoint) >= sequence)
        if passed:
            skipped.append(write)
    return skipped


def listing_workers(stack: Stack, since: float) -> int:
    """Workers whose logs show a whole shard sync (the sync leader's round: a leases-table scan and a
    DescribeStream listing) at or after ``since``: one that created or removed leases, warned of a
    parent not closed yet, or failed. A sync that found nothing to do logs nothing, so this counts
    at most the listers, never more."""
    listed = 0
    for name in stack.fleet.workers:
        times = stack.log_times(name, "shard sync") + stack.log_times(name, "[PARENT_NOT_CLOSED]")
        lines = [(at, m) for at, m in times if m.startswith(("shard sync", "[PARENT_NOT_CLOSED]"))]
        listed += any(at >= since for at, _ in lines)
    return listed


def brownout(
    *,
    name: str,
    instances: int,
    processes: int,
    partitions: int,
    failover_millis: int,
    outage_failovers: float,
    writes_per_second: float,
    control: bool,
    rollover_seconds: int = 86_400,
    alone: tuple[tuple[str, float], ...] = (),
) -> Outcome:
    """``alone``: (table, failovers) outages of one table ("leases" or "workers") after the first."""
    worker = {
        "failover_time_millis": failover_millis,
        "max_clock_skew_millis": 100,
        "idle_time_between_reads_millis": 200,
        "parent_shard_poll_interval_millis": 500,
        "task_backoff_time_millis": 100,
    }
    max_age = max(2, 4 * failover_millis // 1000)
    with bench_stack(
        name, partitions=partitions, worker=worker, emulator={"rollover_seconds": rollover_seconds}
    ) as stack:
        began = time.time()
        fleet = start_instances(stack, instances, processes, max_age)
        booted(stack, fleet, began)
        stack.wait_balanced(120)
        group = StandInGroup([i.name for i in fleet])
        stopping = threading.Event()
        watcher = watch(stack, fleet, group, stopping)
        writer = stack.writer(writes_per_second, threads=2).start()
        keys = keys_covering(stack.partitions, stack.seed)
        outage = outage_failovers * failover_millis / 1000
        settings = stack.settings
        names = {"leases": settings.leases_table_name, "workers": settings.workers_table_name}
        phases: dict[str, Alone] = {}
        try:
            time.sleep(2 * failover_millis / 1000)
            fail_tables(stack, f"{names['leases']},{names['workers']}", outage)
            lifted = time.time()
            resume = resumed_after(stack, keys, lifted, 30 * failover_millis / 1000)
            time.sleep(2 * failover_millis / 1000)
            marked_in_outage = [i for i, _ in group.marked]
            for table, failovers in alone:
                seconds = failovers * failover_millis / 1000
                began_alone, marked_before = time.time(), len(group.marked)
                fail_tables(stack, names[table], seconds)
                back = resumed_after(stack, keys, time.time(), 30 * failover_millis / 1000)
                time.sleep(2 * failover_millis / 1000)
                marked = [i for i, _ in group.marked][marked_before:]
                phases[table] = Alone(table, seconds, back, marked, (began_alone, time.time()))
            if control:
                victim = fleet[0].workers[0]
                stack.fleet.pause(victim)
                time.sleep(2.5 * max_age + 2)
                stack.fleet.resume(victim)
                time.sleep(failover_millis / 1000)
        finally:
            writer.stop()
            stopping.set()
            watcher.join(timeout=10)
        lost = drain_lost(stack, writer, timeout_seconds=60)
        listing_at_end = listing_workers(stack, time.time() - 30)
        for process in stack.fleet.alive():
            stack.fleet.kill(process.name)
        behind = behind_a_checkpoint(stack, lost)
        deliveries = stack.deliveries.all
        seen: set[tuple[str, str]] = set()
        duplicates = 0
        for d in deliveries:
            duplicates += (d.shard, d.seq) in seen
            seen.add((d.shard, d.seq))
        heard = [
            (t, m) for i in fleet if i.watchdog for t, m in i.watchdog.heard if m.startswith("not blamed")
        ]
        for phase in phases.values():
            phase.excused = [m for t, m in heard if phase.window[0] <= t <= phase.window[1]]
        outside = [
            m for t, m in heard if not any(a <= t <= b for a, b in (p.window for p in phases.values()))
        ]
        before = len(marked_in_outage) + sum(len(p.marked) for p in phases.values())
        return Outcome(
            marked_in_outage=marked_in_outage,
            marked_in_control=[i for i, _ in group.marked][before:],
            excused=outside,
            alone=phases,
            resume_seconds=resume,
            taker_seconds=stack.taker_millis / 1000,
            outage_seconds=outage,
            lost=lost,
            behind_checkpoint=behind,
            listing_workers_at_end=listing_at_end,
            workers=len(stack.fleet.workers),
            duplicates=duplicates,
            deliveries=len(deliveries),
            problems=stack.problems(),
        )


def run() -> list[Ratio]:
    print(__doc__)
    outcome = brownout(
        name="brownout",
        instances=3,
        processes=2,
        partitions=24,
        failover_millis=6_000,
        outage_failovers=6,
        writes_per_second=48,
        control=True,
        rollover_seconds=20,
        alone=(("leases", 12), ("workers", 12)),
    )
    leases, workers = outcome.alone["leases"], outcome.alone["workers"]
    print(
        f"outage {outcome.outage_seconds:.0f} s on the leases and workers tables; instances marked Unhealthy "
        f"during it: {outcome.marked_in_outage or 'none'}; watchdogs saw and did not blame: "
        f"{len(outcome.excused)} time(s), e.g. {outcome.excused[:1]}"
    )
    print(
        f"every key delivering again {outcome.resume_seconds:.2f} s after the outage "
        f"({outcome.resume_seconds / outcome.taker_seconds:.2f} x the taker interval of {outcome.taker_seconds:g} s); "
        f"{outcome.deliveries} deliveries, {outcome.duplicates} delivered twice, {len(outcome.lost)} lost; "
        f"control (a worker frozen while the others are fine): marked {outcome.marked_in_control}"
    )
    for phase, other in ((leases, "workers"), (workers, "leases")):
        print(
            f"then the {phase.table} table alone refusing for {phase.seconds:.0f} s (the {other} table "
            f"answering): instances marked Unhealthy during it: {phase.marked or 'none'}; watchdogs saw and "
            f"did not blame: {len(phase.excused)} time(s), e.g. {phase.excused[:1]}; every key delivering "
            f"again {phase.resume_seconds:.2f} s after it"
        )
    print(
        f"of the {len(outcome.lost)} writes not delivered by the end of the drain: {len(outcome.behind_checkpoint)} "
        f"behind their shard's checkpoint (skipped), {len(outcome.lost) - len(outcome.behind_checkpoint)} ahead "
        f"of every checkpoint (not reached yet); workers that ran a whole shard sync, the sync leader's "
        f"round, in the drain's last 30 s: {outcome.listing_workers_at_end} of {outcome.workers}"
    )
    if outcome.problems:
        print(f"ERROR lines in worker logs ({len(outcome.problems)}): {outcome.problems[:5]}")
    method = (
        "6 consumer run processes on the emulator as 3 instances with the real watchdog; leases and workers "
        f"tables refusing 100 % for {outcome.outage_seconds:.0f} s (6 x failover 6 s), rollovers every 20 s, "
        "shard sync every 60 s (the default)"
    )
    proved = outcome.excused and leases.excused and workers.excused
    if not proved or outcome.marked_in_control[:1] != ["inst-0"]:
        raise RuntimeError(
            f"the scenario proved nothing: excused {outcome.excused[:1]}, {leases.excused[:1]} and "
            f"{workers.excused[:1]}, control marked {outcome.marked_in_control}"
        )

    def alone_method(phase: Alone, other: str) -> str:
        return (
            f"the same fleet, then the {phase.table} table alone throttling and answering HTTP 500 for "
            f"{phase.seconds:.0f} s (12 x failover; 3 x the watchdog's age limit) while the {other} table answers"
        )

    return [
        at_most("brownout_instances_marked_unhealthy", (float(len(outcome.marked_in_outage)),), 0, method),
        at_most(
            "brownout_leases_table_only_instances_marked_unhealthy",
            (float(len(leases.marked)),),
            0,
            alone_method(leases, "workers"),
        ),
        at_most(
            "brownout_workers_table_only_instances_marked_unhealthy",
            (float(len(workers.marked)),),
            0,
            alone_method(workers, "leases"),
        ),
        at_most(
            "brownout_workers_table_only_resume_over_taker_interval",
            (workers.resume_seconds / outcome.taker_seconds,),
            1,
            alone_method(workers, "leases")
            + "; its end -> every key delivering again, over the taker interval (docs/deploy.md: back within "
            "a taker interval of the table answering)",
        ),
        lost_writes_ratio("brownout_lost_records", outcome.lost),
        at_most(
            "brownout_lost_records_behind_a_checkpoint",
            (float(len(outcome.behind_checkpoint)),),
            0,
            "of the acknowledged writes not delivered by the end of the 60 s drain, those behind their "
            "shard's checkpoint in the leases table as the killed workers left it (skipped; the others "
            f"wait ahead of every checkpoint: {len(outcome.lost) - len(outcome.behind_checkpoint)}); workers "
            f"listing the stream as sync leader in the drain's last 30 s: {outcome.listing_workers_at_end} of {outcome.workers}",
        ),
        at_most(
            "brownout_resume_over_taker_interval",
            (outcome.resume_seconds / outcome.taker_seconds,),
            1,
            method + "; outage's end -> every key delivering again, over the taker interval",
        ),
    ]
