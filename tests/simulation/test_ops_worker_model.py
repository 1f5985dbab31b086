"""The fleet model's worker process held to the real worker: what its instance's watchdog reads of
it while the leases table alone fails, and while the workers table alone fails.

The real worker runs in simulation/world.py (the product's own coordinator, on simulated threads and
time) with its heartbeat file fed by its own round observer; the leases-table calls of every worker
(full scans, takes, checkpoints) refuse for 90 s, or the workers table's (its heartbeat puts and
reads). The model (simulation/fleet_ops/workers.py) meets the same outage. Both must show what the
watchdog and its peers see: with the leases table refusing, rounds go on (the file's time keeps
moving), none succeeds from the first full scan due (within a full-scan interval and a round of the
outage's start) until the table answers again (within a taking interval of its end), and the
heartbeat row keeps being written; with the workers table refusing, no round succeeds and the row
stops.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from consumer.leases.errors import LeaseStoreUnavailableError
from simulation.faults import Faults
from simulation.fleet_ops.heartbeat_files import HeartbeatState
from simulation.fleet_ops.tables import Outage, Table
from simulation.fleet_ops.workers import Timing, WorkerProcess
from simulation.histories import sim_settings
from simulation.stream import ShardSpec
from simulation.world import World

START = 1_000_000
OUTAGE = (60_000, 150_000)  # ms after the start
LEASES_CALLS = (
    "scan",
    "get",
    "take",
    "release",
    "checkpoint",
    "create_if_absent",
    "delete_finished",
    "request_steal",
)
WORKERS_CALLS = ("scan", "scan_workers", "heartbeat", "get_heartbeat")  # a full scan reads both tables
SETTINGS = sim_settings(
    {"failover_time_millis": 10_000, "max_clock_skew_millis": 500, "initial_position": "TRIM_HORIZON"}
)


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _refusing(world: World, calls: tuple[str, ...]) -> None:
    for worker in world.workers.values():
        for name in calls:
            real = getattr(worker.store, name)

            def refused(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
                if START + OUTAGE[0] <= world.kernel.now < START + OUTAGE[1]:
                    world.kernel.sleep(20)
                    raise LeaseStoreUnavailableError("InternalServerError (HTTP 500)")
                return _real(*args, **kwargs)

            setattr(worker.store, name, refused)


Samples = list[tuple[float, HeartbeatState]]


def _real_worker(calls: tuple[str, ...]) -> tuple[dict[str, Samples], dict[str, list[float]]]:
    """Per worker: its heartbeat file sampled each second, and the times its row says."""
    shards = {f"s{i}": ShardSpec(f"s{i}", None, START, START + 600_000, 300) for i in range(4)}
    files: dict[str, HeartbeatState] = {}

    def observer(name: str) -> Callable[[bool | None, str | None], None]:
        files[name] = HeartbeatState()
        return lambda ok, error: files[name].record(world.kernel.now / 1000, ok, error)

    world = World(1, SETTINGS, Faults(), shards=shards, on_round_for=observer)
    samples: dict[str, Samples] = {}
    rows: dict[str, list[float]] = {}
    try:
        world.start(3)
        world.kernel.run_until(START + 20_000)
        _refusing(world, calls)
        for t in range(START + 20_000, START + 200_000, 1_000):
            world.kernel.run_until(t)
            for name in world.workers:
                beat = world.table.get_heartbeat(name)
                if beat is not None:
                    rows.setdefault(name, []).append(beat.at_wall_millis / 1000)
                state = files[name]
                samples.setdefault(name, []).append(
                    (t / 1000, HeartbeatState(state.written, state.ok_at, state.error))
                )
    finally:
        world.close()
    return samples, {name: sorted(set(times)) for name, times in rows.items()}


class _Fleet:
    def __init__(self, table: str) -> None:
        t0, t1 = (START + OUTAGE[0]) / 1000, (START + OUTAGE[1]) / 1000
        self.leases_table = Table("leases", "leases", None, None, read_timeout=2.0)
        self.workers_table = Table("workers", "workers", None, None, read_timeout=2.0)
        target = self.leases_table if table == "leases" else self.workers_table
        target.outages.append(Outage(table, "refusing", t0, t1))

    def minute(self, t: float) -> int:
        return int(t // 60)

    def reaches_tables(self, host: str, t: float) -> bool:
        return True

    def calm(self, host: str, t0: float, t1: float) -> bool:
        return self.leases_table.calm(t0, t1, 0.0) and self.workers_table.calm(t0, t1, 0.0, writes=True)

    def lease_count(self) -> float:
        return 4.0


def _model(table: str) -> list[tuple[Samples, list[float]]]:
    import random

    env = _Fleet(table)
    timing = Timing.of(SETTINGS)
    out = []
    for i in range(3):
        file = HeartbeatState()
        worker = WorkerProcess.start(
            "h", str(i), START / 1000, timing=timing, file=file, rng=random.Random(i)
        )
        samples: Samples = []
        rows: set[float] = set()
        for t in range(START + 20_000, START + 200_000, 1_000):
            worker.advance(t / 1000, env)  # type: ignore[arg-type]
            if worker.row is not None:
                rows.add(worker.row["at"])
            samples.append((t / 1000, HeartbeatState(file.written, file.ok_at, file.error)))
        out.append((samples, sorted(rows)))
    return out


def _judge(samples: list[tuple[float, HeartbeatState]], rows: list[float], *, table: str) -> None:
    timing = Timing.of(SETTINGS)
    t0, t1 = (START + OUTAGE[0]) / 1000, (START + OUTAGE[1]) / 1000
    during = [s for t, s in samples if t0 + timing.full_scan + timing.taker < t <= t1]
    last_ok = max(s.ok_at or 0.0 for t, s in samples if t <= t1)
    assert last_ok <= t0 + timing.full_scan + timing.taker, "a round succeeded well into the outage"
    assert all(s.error for s in during), "rounds during the outage said no error"
    if table == "leases":
        assert max(s.written or 0.0 for s in during) >= t1 - timing.taker, "the rounds stopped"
        assert [r for r in rows if t0 < r < t1], (
            "the heartbeat row stopped while only the leases table failed"
        )
    else:
        assert not [r for r in rows if t0 + timing.renewal < r < t1], (
            "the row was written while its table refused"
        )
    after = [s.ok_at for t, s in samples if t > t1 + 2 * timing.taker]
    assert after and all(ok is not None and ok > t1 for ok in after), "rounds did not succeed again"


@pytest.mark.parametrize("table", ["leases", "workers"])
def test_the_model_worker_and_the_real_one_show_the_watchdog_the_same_outage(table: str) -> None:
    samples, rows = _real_worker(LEASES_CALLS if table == "leases" else WORKERS_CALLS)
    assert len(samples) == 3
    for name, series in samples.items():
        _judge(series, rows.get(name, []), table=table)
    for series, model_rows in _model(table):
        _judge(series, model_rows, table=table)
