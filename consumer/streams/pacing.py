"""Pacing DescribeStream: the account's budget is about 10 calls per second, for everyone.

Every process of the fleet, every other consumer of the account's streams and every operator's
``aws dynamodbstreams describe-stream`` share that budget, and one listing of a busy table's stream
is hundreds of pages (100 shards each, and a day of closed shards stays listed). Pacing each
process on its own does not keep a fleet inside it (48 workers restarting at 2 calls/s each sent
~96/s). So the fleet shares ``worker.describe_stream_budget_per_second`` (default 5: half the
account's, the other half left to other consumers and operators) as a **timetable**
(:class:`SlotSchedule`): time is cut into slots of ``1 / budget`` seconds on the wall clock, and each
slot belongs to one worker. Of every ten slots, three belong to the sync leader (its listing:
``consumer.leases.decisions.sync_leader``) and seven go round the live workers in the order of their
ids (children lookups at a shard's end, the leader's included). Every worker reads the same
workers table, so they agree on the timetable without talking; a worker waits for a view that has
not changed for one taker interval before it uses a slot (``LeaseCoordinator.fleet_position``), so
a fleet starting together does not double-book slots while its members join. The fleet then sends
at most ``budget`` calls in any second, at start-up as in steady state, and one worker waits at most
``workers / (0.7 x budget)`` seconds for its slot.

A page refused for throttling (somebody else spent the account's budget) is waited for and asked
again in a later slot with jittered back-off (:func:`backoff_millis`), never restarting the listing
from its first page (which would spend the budget again on pages already read); botocore's own
retries are off for DescribeStream (``AwsClients.describe``), so every call goes through the
timetable. :class:`CallPacer` (a per-process token bucket) remains for one-off tools.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from ground.clock import Clock

# A tool's own pace (consumer leases, the demo's checks): well inside the account's ~10/s.
DESCRIBE_STREAM_CALLS_PER_SECOND: Final = 2.0
DESCRIBE_STREAM_BURST: Final = 3
# Of every SLOTS_PER_CYCLE slots, the first LISTING_SLOTS are the sync leader's.
SLOTS_PER_CYCLE: Final = 10
LISTING_SLOTS: Final = 3
# A throttled or failed page is asked again this many times before the listing gives up (and is
# retried as a whole at the next sync).
PAGE_ATTEMPTS: Final = 6
_FIRST_BACKOFF_MILLIS: Final = 250
_MAX_BACKOFF_MILLIS: Final = 8_000


class Pacer(Protocol):
    """What a DescribeStream caller waits on before each call (``listing``: a page of a whole
    listing, rather than a children lookup)."""

    def acquire(self, listing: bool = False) -> None: ...


class CallPacer:
    """At most ``rate`` calls per second on average, ``burst`` at once, for every thread of a process."""

    def __init__(self, rate: float, clock: Clock, burst: int = 1) -> None:
        if rate <= 0 or burst < 1:
            raise ValueError(f"a pacer needs a positive rate and burst (got {rate}, {burst})")
        self._interval = 1000.0 / rate
        self._burst = burst
        self._clock = clock
        self._lock = threading.Lock()
        self._tokens = float(burst)
        self._at = clock.monotonic_millis()

    def acquire(self, listing: bool = False) -> None:
        """Wait (on the clock) until a call may go out, and count it (one bucket for every call)."""
        del listing
        while True:
            with self._lock:
                now = self._clock.monotonic_millis()
                self._tokens = min(float(self._burst), self._tokens + (now - self._at) / self._interval)
                self._at = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return
                wait = (1 - self._tokens) * self._interval
            self._clock.sleep(wait)


def backoff_millis(attempt: int, rng: random.Random) -> float:
    """How long to wait before asking a refused page again: exponential with full jitter."""
    ceiling = min(_MAX_BACKOFF_MILLIS, _FIRST_BACKOFF_MILLIS * 2**attempt)
    return rng.uniform(ceiling / 2, ceiling)


@dataclass(frozen=True)
class FleetPosition:
    """Where a worker stands in the fleet's timetable: its rank among ``size`` live workers (ids in
    order), and whether it is the sync leader."""

    rank: int
    size: int
    leader: bool


class SlotSchedule:
    """The timetable (module docstring), pure: which slot belongs to whom."""

    def __init__(self, budget_per_second: float) -> None:
        if budget_per_second <= 0:
            raise ValueError(f"a DescribeStream budget must be positive (got {budget_per_second})")
        self.slot_millis = 1000.0 / budget_per_second

    def owner(self, slot: int, size: int) -> int | None:
        """The rank that owns ``slot`` among ``size`` workers, or None for a slot of the leader's."""
        cycle, index = divmod(slot, SLOTS_PER_CYCLE)
        if index < LISTING_SLOTS:
            return None
        shared = SLOTS_PER_CYCLE - LISTING_SLOTS
        return (cycle * shared + index - LISTING_SLOTS) % max(1, size)

    @staticmethod
    def lane(position: FleetPosition, listing: bool) -> str:
        """The leader lists in the leader's slots only, so that its listing (hundreds of pages) never
        holds up the children lookups of its own shards; everything else goes in the worker's own."""
        return "leader" if listing and position.leader else "own"

    def mine(self, slot: int, position: FleetPosition, listing: bool = False) -> bool:
        owner = self.owner(slot, position.size)
        if self.lane(position, listing) == "leader":
            return owner is None
        return owner == position.rank

    def next_slot(self, after: int, position: FleetPosition, listing: bool = False) -> int:
        """The first slot after ``after`` that ``position`` may use for a listing page or a lookup."""
        slot = after + 1
        while not self.mine(slot, position, listing):
            slot += 1
        return slot

    def start_millis(self, slot: int) -> float:
        return slot * self.slot_millis

    def slot_at(self, wall_millis: float) -> int:
        return int(wall_millis // self.slot_millis)


class FleetPacer:
    """Waits (on the clock) for this worker's next slot of the timetable, one call per slot."""

    def __init__(
        self,
        budget_per_second: float,
        clock: Clock,
        position: Callable[[], FleetPosition | None],
    ) -> None:
        self.schedule = SlotSchedule(budget_per_second)
        self._clock = clock
        self._position = position
        self._locks = {"leader": threading.Lock(), "own": threading.Lock()}
        self._last = {"leader": -1, "own": -1}  # the last slot each lane used

    def acquire(self, listing: bool = False) -> None:
        """Return at the start of a slot of mine, in the lane of the call (:meth:`SlotSchedule.lane`),
        that no call of this process has used yet. While the worker does not know where it stands
        (before its first scan, or its view of the fleet just changed), wait a slot and ask again."""
        schedule = self.schedule
        while True:
            position = self._position()
            if position is None:
                self._clock.sleep(schedule.slot_millis)
                continue
            lane = schedule.lane(position, listing)
            with self._locks[lane]:
                now = self._clock.wall_millis()
                current = schedule.slot_at(now)
                slot = schedule.next_slot(max(current - 1, self._last[lane]), position, listing)
                start = schedule.start_millis(slot)
                if start <= now and slot == current:
                    self._last[lane] = slot
                    return
            if start > now:
                self._clock.sleep(start - now)  # then look again: the fleet may have changed meanwhile
