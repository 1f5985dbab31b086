"""One ``consumer run`` process of an instance, as its instance's watchdog, its peers and CloudWatch
see it: its heartbeat file, its heartbeat row, the metrics it flushes. A model of the worker, not
the worker (simulation/world.py runs the real one, for the data's promises): what it follows of the
real code, rule by rule:

* **taker rounds** (``consumer/leases/machine/taking.py``, ``reading.py``): a round every half taking
  interval after a round whose reads succeeded, a whole interval after a failed one. A round reads
  the workers table; a full scan (due every ``lease_full_scan_interval`` since the last one that
  succeeded, and at the first round) reads the leases table too, so while the leases table fails,
  every round from the first due full scan on fails (``full_at`` only moves on success). The
  heartbeat file is written as a round begins and as it ends (``HeartbeatFile.record``).
* **liveness** (``consumer/leases/machine/beating.py``): a heartbeat row put every renewal interval, a
  third of it after a failed put; the row holds the start of the last put that succeeded, the lease
  count and (when the product's Heartbeat carries it) the time of the last good round. A worker
  whose last good put started more than ``fence_after`` ago is fenced: it processes nothing.
* **metrics** (``consumer/telemetry``, flushed every ``metrics.flush_interval_seconds``):
  ``NumWorkers``, ``TotalLeases``, ``ReadyLeasesUnassigned`` and ``LeasesNotTaken`` only from a
  full round that succeeded (``taking._report``); ``CurrentLeases`` from a good heartbeat;
  ``LeaseTableScans`` per complete scan; ``LeaseTableErrors`` per table call that failed for another
  reason than a throttle (``TableRequests.errors``); the records it processed and their lag;
  ``OpenShards`` from the sync leader.

In a stretch with no fault anywhere near the worker its rounds and puts are advanced arithmetically
(every one succeeds on the same rhythm); otherwise one by one, each call asking the table model.
tests/simulation/test_ops_worker_model.py holds the model to the real worker's heartbeat file under
the same table outages.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from consumer.leases.items import heartbeat_to_item
from consumer.leases.model import Heartbeat
from ground.settings import Settings
from simulation.fleet_ops.heartbeat_files import HeartbeatState
from simulation.fleet_ops.tables import Answer, Table

INFINITY = math.inf
UNREACHABLE = "LeaseStoreUnavailableError: Could not connect to the endpoint URL"
_HEARTBEAT_FIELDS = {f.name for f in fields(Heartbeat)}


@dataclass(frozen=True)
class Timing:
    """The worker's intervals in seconds, from its settings (ground/settings/worker.py)."""

    renewal: float
    taker: float
    full_scan: float
    fence_after: float
    horizon: float
    flush: float
    cap: int

    @classmethod
    def of(cls, settings: Settings) -> Timing:
        w = settings.worker
        return cls(
            w.renewal_interval_millis / 1000,
            w.taker_interval_millis / 1000,
            w.full_scan_interval_millis / 1000,
            w.fence_after_millis / 1000,
            w.expiry_horizon_millis / 1000,
            float(settings.metrics.flush_interval_seconds),
            w.max_leases_for_worker,
        )


class Surroundings(Protocol):
    """What a worker's calls meet: the tables, and whether its host reaches them."""

    leases_table: Table
    workers_table: Table

    def minute(self, t: float) -> int: ...

    def reaches_tables(self, host: str, t: float) -> bool: ...

    def calm(self, host: str, t0: float, t1: float) -> bool: ...

    def lease_count(self) -> float: ...


@dataclass
class Period:
    """What the recorder aggregated since its last flush."""

    good_full_rounds: int = 0
    good_beats: int = 0
    scans: int = 0
    records: float = 0.0
    lag_millis: float | None = None
    lost: int = 0
    trimmed: float = 0.0
    errors: int = 0  # table calls that failed for another reason than a throttle


@dataclass(eq=False)
class WorkerProcess:
    host: str
    unit: str
    worker_id: str
    started_at: float
    timing: Timing
    file: HeartbeatState
    rng: random.Random
    alive: bool = True
    wedged: bool = False  # its taker loop stopped (a deadlock): no rounds, no file; the row goes on
    stopping: bool = False
    leases: int = 0
    next_round: float = 0.0
    failures: int = 0
    last_full: float | None = None
    round_ok_at: float | None = None
    next_beat: float = 0.0
    beat_ok_start: float | None = None
    counter: int = 0
    row: dict[str, Any] | None = None
    period: Period = field(default_factory=Period)
    live_seen: int = 0  # live workers at its last full round (its NumWorkers)
    lost_pending: int = 0  # leases others took while it was cut off: LostLeases at its next full scan
    on_scan: Callable[[float], None] | None = None

    @classmethod
    def start(
        cls, host: str, unit: str, at: float, *, timing: Timing, file: HeartbeatState, rng: random.Random
    ) -> WorkerProcess:
        worker_id = f"{host}-{unit}@{host}:{rng.randint(2_000, 60_000)}:{rng.getrandbits(32):08x}"
        ready = at + rng.uniform(2.0, 5.0)  # interpreter, settings, clients, DescribeTable
        return cls(host, unit, worker_id, at, timing, file, rng, next_round=ready, next_beat=ready)

    # ------------------------------------------------------------------------------- judgement

    def fenced(self, now: float) -> bool:
        return self.beat_ok_start is None or now - self.beat_ok_start > self.timing.fence_after

    def processing(self, now: float) -> bool:
        return self.alive and not self.stopping and not self.fenced(now)

    def row_fresh(self, now: float) -> bool:
        return self.row is not None and now - self.row["at"] <= self.timing.horizon

    # --------------------------------------------------------------------------------- advance

    def advance(self, t: float, env: Surroundings) -> None:
        """Run this worker's rounds and heartbeats up to ``t``."""
        if not self.alive:
            return
        while True:
            round_at = INFINITY if self.wedged else self.next_round
            if min(round_at, self.next_beat) > t:
                return
            start = min(round_at, self.next_beat)
            if self.failures == 0 and not self.fenced(start) and env.calm(self.host, start, t):
                self._glide(t, env)
                return
            if round_at <= self.next_beat:
                self._round(round_at, env)
            else:
                self._beat(self.next_beat, env)

    def _call(self, table: Table, t: float, env: Surroundings, write: bool) -> Answer:
        if not env.reaches_tables(self.host, t):
            answer = Answer(False, 3 * 1.0 + 0.3, UNREACHABLE)
        else:
            answer = table.call(t, env.minute(t), write, self.rng)
        if not answer.ok and (answer.error or "").startswith("LeaseStoreUnavailableError"):
            self.period.errors += 1  # the store counts it as LeaseTableErrors
        return answer

    def _round(self, at: float, env: Surroundings) -> None:
        self.file.record(at, None)
        full = self.last_full is None or at - self.last_full >= self.timing.full_scan
        answer = self._call(env.workers_table, at, env, write=False)
        if answer.ok and full:
            scan = self._call(env.leases_table, at + answer.seconds, env, write=False)
            answer = Answer(scan.ok, answer.seconds + scan.seconds, scan.error)
        end = at + answer.seconds
        if answer.ok:
            self.failures = 0
            self.file.record(end, True)
            self.round_ok_at = end
            if full:
                self._full_scan(end, env)
            self.next_round = end + self.timing.taker / 2
        else:
            self.failures += 1
            self.file.record(end, False, answer.error)
            self.next_round = end + self.timing.taker

    def _full_scan(self, at: float, env: Surroundings) -> None:
        self.last_full = at
        self.period.good_full_rounds += 1
        self.period.scans += 1
        if self.lost_pending:
            self.period.lost += self.lost_pending
            self.lost_pending = 0
        env.leases_table.scanned(env.minute(at), env.lease_count())
        if self.on_scan is not None:
            self.on_scan(at)

    def _beat(self, at: float, env: Surroundings) -> None:
        answer = self._call(env.workers_table, at, env, write=True)
        if answer.ok:
            self.beat_ok_start = at
            self.counter += 1
            self.period.good_beats += 1
            self._write_row(at)
            self.next_beat = at + answer.seconds + self.timing.renewal
        else:
            self.next_beat = at + answer.seconds + self.timing.renewal / 3

    def _write_row(self, at: float) -> None:
        self.row = {
            "at": at,
            "counter": self.counter,
            "leases": self.leases,
            "stopping": self.stopping,
            "round_ok_at": self.round_ok_at,
        }

    def _glide(self, t: float, env: Surroundings) -> None:
        """Every round and put in (now, t] succeeds on its usual rhythm: advance them at once."""
        timing = self.timing
        if not self.wedged and self.next_round <= t:
            step = timing.taker / 2
            last = self.next_round + ((t - self.next_round) // step) * step
            if self.last_full is None:
                self._full_scan(self.next_round, env)
            assert self.last_full is not None
            due = self.last_full + timing.full_scan
            while due <= last:
                first = self.next_round + math.ceil((due - self.next_round) / step - 1e-9) * step
                if first > last:
                    break
                self._full_scan(first, env)
                due = first + timing.full_scan
            self.file.record(last, True)
            self.round_ok_at = last
            self.next_round = last + step
        if self.next_beat > t:
            return
        beats = int((t - self.next_beat) // timing.renewal) + 1
        last_beat = self.next_beat + (beats - 1) * timing.renewal
        self.beat_ok_start = last_beat
        self.counter += beats
        self.period.good_beats += beats
        self._write_row(last_beat)
        self.next_beat = last_beat + timing.renewal

    # --------------------------------------------------------------------------------- outside

    def item(
        self, heartbeat_item: Callable[[Heartbeat], dict[str, Any]] = heartbeat_to_item
    ) -> dict[str, Any]:
        """The row as the workers table holds it, written by the product's own serializer."""
        assert self.row is not None
        values: dict[str, Any] = {
            "worker_id": self.worker_id,
            "counter": self.row["counter"],
            "at_wall_millis": int(self.row["at"] * 1000),
            "lease_count": self.row["leases"],
            "stopping": self.row["stopping"],
        }
        if "round_ok_at_wall_millis" in _HEARTBEAT_FIELDS and self.row["round_ok_at"] is not None:
            values["round_ok_at_wall_millis"] = int(self.row["round_ok_at"] * 1000)
        return heartbeat_item(Heartbeat(**values))

    def flush(
        self, leader: bool, open_shards: int, ready_unassigned: int, not_taken: int = 0
    ) -> list[tuple[str, str, float]]:
        """(operation, metric, value) of the period just ended, as the recorder publishes them."""
        p, self.period = self.period, Period()
        out: list[tuple[str, str, float]] = []
        if p.good_full_rounds:
            out += [
                ("TakeLeases", "NumWorkers", float(self.live_seen)),
                ("TakeLeases", "ReadyLeasesUnassigned", float(ready_unassigned)),
                ("TakeLeases", "LeasesNotTaken", float(not_taken if self.leases < self.timing.cap else 0)),
            ]
        if p.good_beats:
            out.append(("RenewAllLeases", "CurrentLeases", float(self.leases)))
        if p.scans:
            out.append(("LeaseTable", "LeaseTableScans", float(p.scans)))
        if p.records:
            out.append(("ProcessTask", "RecordsProcessed", p.records))
        if p.lag_millis is not None:
            out.append(("ProcessTask", "MillisBehindLatest", p.lag_millis))
        if p.lost:
            out.append(("RenewAllLeases", "LostLeases", float(p.lost)))
        if p.trimmed:
            out.append(("Fetcher", "RecordsTrimmedLost", p.trimmed))
        if p.errors:
            out.append(("LeaseTable", "LeaseTableErrors", float(p.errors)))
        if leader:
            out.append(("ShardSyncTask", "OpenShards", float(open_shards)))
        return out
