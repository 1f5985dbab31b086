"""Shard discovery at scale: DescribeStream calls per second and child-lease latency, 10 000 shards.

Method: the product's own :class:`~consumer.lifecycle.shard_sync.ShardSyncer`, one per worker (100),
on one in-memory leases table and a fake clock, over a simulated stream of 10 000 open shards whose
rollovers (one child, or two on a split, one in ten) are spread uniformly over a 4-hour shard life,
with a day of closed shards still listed (about 60 000; they are what makes a listing 700 pages).
Each rollover is checkpointed SHARD_END and reported by its owner (a worker drawn at random) after a
short read delay; DescribeStream shows the new children after a random lag of 0-3 s (it is
eventually consistent). Every ``shard_sync_interval`` each worker runs the periodic round
(``sync_if_leader``): only the sync leader lists. Every DescribeStream call is charged at the time
it would go out: a listing's pages at the pacer's rate (consumer.streams.pacing), a children lookup
at once. Simulated: ``WINDOW`` of steady state after the start-up listings.

Figures: the fleet's DescribeStream calls per second over the window (mean and the busiest 10 s),
against the goal of at most 5 (half the account's ~10/s); the share of children leased within
2 x shard_sync_interval of their parent's SHARD_END, and the slowest. The previous design (every
worker lists every interval and at each of its shards' ends) is given by its formula beside it
(docs/streams.md). Leases-table reads, taker CPU and record costs are other benchmarks' business.
"""

from __future__ import annotations

import heapq
import logging
import math
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from bench.common import Ratio, at_most
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Lease, Snapshot
from consumer.lifecycle.shard_sync import ShardSyncer
from consumer.streams.pacing import DESCRIBE_STREAM_CALLS_PER_SECOND
from consumer.streams.source import Shard
from ground.clock import FakeClock
from ground.settings import WorkerSettings

OPEN_SHARDS = 10_000
WORKERS = 100
LIFE_MILLIS = 4 * 3_600_000
RETENTION_MILLIS = 24 * 3_600_000
WINDOW_MILLIS = 20 * 60_000
SPLIT_SHARE = 0.1
READ_DELAY_MILLIS = (200, 2_000)  # from the parent's last record to its owner's SHARD_END report
LISTING_LAG_MILLIS = 3_000  # DescribeStream shows a new child up to this late
LIMITS = (
    "Discovery only: the leases table is the in-memory twin and the owners of ended shards are drawn "
    "at random (the taker is not simulated). Closed shards older than the retention are not trimmed "
    "during the 20-minute window."
)


@dataclass
class SimStream:
    """The stream's shards with their birth and close times; a listing as DescribeStream shows it."""

    rng: random.Random
    shards: dict[str, Shard] = field(default_factory=dict)
    born: dict[str, int] = field(default_factory=dict)
    closes: dict[str, int] = field(default_factory=dict)
    _next: int = 0

    def new_shard(self, parent: str | None, born: int) -> str:
        self._next += 1
        shard_id = f"shardId-{born:020d}-{self._next:08x}"
        self.shards[shard_id] = Shard(shard_id, parent, "1")
        self.born[shard_id] = born
        return shard_id

    def close(self, shard_id: str, at: int) -> None:
        self.shards[shard_id] = Shard(shard_id, self.shards[shard_id].parent_shard_id, "1", str(at))
        self.closes[shard_id] = at

    def listing(self, now: int) -> list[Shard]:
        return [s for sid, s in self.shards.items() if self.born[sid] + LISTING_LAG_MILLIS // 2 <= now]


class SimTable:
    """What shard sync needs of the leases table, for one worker (the leader is the smallest live id)."""

    def __init__(
        self,
        store: InMemoryLeaseStore,
        me: str,
        leader: list[str],
        clock: FakeClock,
        created_at: dict[str, int],
    ) -> None:
        self._store, self._me, self._leader = store, me, leader
        self._clock, self._created_at = clock, created_at

    def scan(self) -> Snapshot:
        return self._store.scan()

    def claim_first_start(self) -> bool:
        return False

    def lineage_generation(self) -> int:
        return self._store.lineage_generation()

    def create_leases(self, leases: Sequence[Lease], generation: int | None = None) -> int:
        created = 0
        for lease in leases:
            if self._store.create_if_absent(lease, generation):
                self._created_at[lease.shard_id] = self._clock.monotonic_millis()
                created += 1
        return created

    def delete_finished(self, lease: Lease) -> None:
        self._store.delete_finished(lease)

    def read_lease(self, shard_id: str) -> Lease | None:
        return self._store.get(shard_id)

    def is_sync_leader(self) -> bool:
        return self._me == self._leader[0]


@dataclass
class Outcome:
    calls_per_second: float
    busiest_10s_per_second: float
    children: int
    within_bound: float
    slowest_millis: int
    listing_pages: int


def simulate(seed: int) -> Outcome:
    rng = random.Random(seed)
    clock = FakeClock(start_millis=RETENTION_MILLIS)
    settings = WorkerSettings(initial_position="TRIM_HORIZON")
    interval = settings.shard_sync_interval_millis
    stream = SimStream(rng)
    store = InMemoryLeaseStore()
    calls: list[int] = []  # the time of every DescribeStream call
    start = clock.monotonic_millis()

    # A day of history: closed shards still listed, and the open shards with started leases.
    open_shards: list[str] = []
    for _ in range(OPEN_SHARDS):
        age = rng.randint(0, LIFE_MILLIS)
        born = start - age
        parent = None
        t = born - LIFE_MILLIS
        while t > start - RETENTION_MILLIS:
            closed = stream.new_shard(parent, t)
            stream.close(closed, t + LIFE_MILLIS)
            parent = closed
            t -= LIFE_MILLIS
        shard_id = stream.new_shard(parent, born)
        stream.closes[shard_id] = born + LIFE_MILLIS
        open_shards.append(shard_id)
        store.create_if_absent(
            Lease(shard_id, None, 0, ExtendedSequenceNumber("10"), parent_shard_ids=frozenset())
        )

    listing_ends: list[int] = [0]

    def list_shards() -> Iterable[Shard]:
        # Paced: the pages go out at the pacer's rate, and the round ends when the last one has.
        listed = stream.listing(clock.monotonic_millis())
        pages = math.ceil(len(listed) / 100)
        now = clock.monotonic_millis()
        calls.extend(int(now + i * 1000 / DESCRIBE_STREAM_CALLS_PER_SECOND) for i in range(pages))
        listing_ends[0] = int(now + pages * 1000 / DESCRIBE_STREAM_CALLS_PER_SECOND)
        return listed

    def list_children(parent: str) -> Iterable[Shard]:
        now = clock.monotonic_millis()
        calls.append(now)
        return [
            s for sid, s in stream.shards.items() if s.parent_shard_id == parent and stream.born[sid] <= now
        ]

    names = [f"w{i:03d}" for i in range(WORKERS)]
    leader = [min(names)]
    created_at: dict[str, int] = {}
    syncers = {
        name: ShardSyncer(
            list_shards=list_shards,
            list_children=list_children,
            coordinator=SimTable(store, name, leader, clock, created_at),
            settings=settings,
            clock=clock,
        )
        for name in names
    }

    # Events: (time, order, kind, shard or worker).
    events: list[tuple[int, int, str, str]] = []
    order = iter(range(10**9))
    end = start + WINDOW_MILLIS
    for shard_id in open_shards:
        if stream.closes[shard_id] < end:
            heapq.heappush(events, (stream.closes[shard_id], next(order), "close", shard_id))
    for i, name in enumerate(names):
        heapq.heappush(events, (start + (i * interval) // WORKERS, next(order), "round", name))
    ended_at: dict[str, int] = {}
    owner_of: dict[str, str] = {}
    while events and events[0][0] < end:
        at, _, kind, what = heapq.heappop(events)
        clock.advance(max(0, at - clock.monotonic_millis()))
        if kind == "close":
            stream.close(what, at)
            for _ in range(2 if rng.random() < SPLIT_SHARE else 1):
                child = stream.new_shard(what, at + rng.randint(0, LISTING_LAG_MILLIS))
                stream.closes[child] = at + LIFE_MILLIS
            owner_of[what] = rng.choice(names)
            heapq.heappush(events, (at + rng.randint(*READ_DELAY_MILLIS), next(order), "ended", what))
        elif kind == "ended":
            lease = store.get(what)
            if lease is not None:
                store.checkpoint(store.take(lease, owner_of[what]), ExtendedSequenceNumber("SHARD_END"))
            ended_at[what] = at
            syncers[owner_of[what]].shard_ended(what)
            heapq.heappush(events, (at, next(order), "children", owner_of[what]))
        elif kind == "children":
            syncers[what].sync_children_due()
            due = syncers[what].next_children_due()
            if due is not None:  # a retry or a confirming look is due later: come back then
                heapq.heappush(events, (max(due, at + 1), next(order), "children", what))
        else:  # a worker's periodic round; a listing holds the round until its last page went out
            listing_ends[0] = at
            syncers[what].sync_if_leader()
            heapq.heappush(events, (max(at + interval, listing_ends[0]), next(order), "round", what))

    created = {lease.shard_id: lease for lease in store.scan().leases.values()}
    latencies: list[int] = []
    for parent, ended in ended_at.items():
        for sid, shard in stream.shards.items():
            if shard.parent_shard_id == parent:
                if sid in created:
                    latencies.append(created_at.get(sid, end) - ended)
                else:
                    latencies.append(end - ended)
    slow = sorted(t for t in latencies if t > 5_000)
    if slow:
        print(f"children leased after more than 5 s: {len(slow)}, e.g. {slow[:5]} ms")
    in_window = [t for t in calls if start <= t < end]
    per_10s = Counter(t // 10_000 for t in in_window)
    bound = 2 * interval
    return Outcome(
        calls_per_second=len(in_window) / (WINDOW_MILLIS / 1000),
        busiest_10s_per_second=max(per_10s.values(), default=0) / 10,
        children=len(latencies),
        within_bound=sum(1 for t in latencies if t <= bound) / max(1, len(latencies)),
        slowest_millis=max(latencies, default=0),
        listing_pages=math.ceil(len(stream.listing(end)) / 100),
    )


def run() -> list[Ratio]:
    logging.disable(logging.WARNING)  # the benchmark's own process: thousands of expected warnings
    outcome = simulate(1)
    old = WORKERS * outcome.listing_pages / 60 + (OPEN_SHARDS / (LIFE_MILLIS / 1000)) * outcome.listing_pages
    print(
        f"{OPEN_SHARDS} open shards, {WORKERS} workers, listing {outcome.listing_pages} pages: "
        f"{outcome.calls_per_second:.2f} DescribeStream calls/s (busiest 10 s: "
        f"{outcome.busiest_10s_per_second:.1f}/s); previous design by its formula: {old:.0f}/s. "
        f"{outcome.children} children: {outcome.within_bound:.1%} leased within 2 x shard_sync_interval, "
        f"slowest {outcome.slowest_millis} ms"
    )
    return [
        at_most(
            "discovery_describe_stream_calls_per_second",
            (outcome.calls_per_second,),
            5,
            "fleet DescribeStream calls/s, 10 000 open shards, 100 workers, 20 simulated minutes",
        ),
        at_most(
            "discovery_children_late_share",
            (1 - outcome.within_bound,),
            0,
            "share of children not leased within 2 x shard_sync_interval of the parent's SHARD_END",
        ),
    ]
