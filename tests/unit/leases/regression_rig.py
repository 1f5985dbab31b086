"""The rig of the lease core's real-world regression tests: the in-memory table with hooks around
chosen calls (a slow call, a stale scan, a write that commits and still fails), a gauge recorder,
and the workers' usual start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from consumer.leases.coordinator import LeaseCoordinator
from consumer.leases.errors import LeaseStoreThrottledError, LeaseStoreUnavailableError
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot
from ground.clock import FakeClock
from ground.settings import WorkerSettings

ESN = ExtendedSequenceNumber
SETTINGS = WorkerSettings()  # failover 10 s, skew 0.5 s, fence at 8 s, renewal 3308 ms
FAILOVER = SETTINGS.failover_time_millis
HORIZON = FAILOVER + SETTINGS.max_clock_skew_millis


class Hooked(InMemoryLeaseStore):
    """The in-memory table with a hook around chosen calls: ``hooks[name](call)`` runs instead of the
    call and decides when (and whether, and how often) the real write happens."""

    def __init__(self) -> None:
        super().__init__()
        self.hooks: dict[str, Callable[[Callable[[], Any]], Any]] = {}
        self.stale: Snapshot | None = None

    def _hooked(self, name: str, call: Callable[[], Any]) -> Any:
        hook = self.hooks.pop(name, None)
        return hook(call) if hook is not None else call()

    def scan(self) -> Snapshot:
        return self.stale if self.stale is not None else super().scan()

    def heartbeat(
        self, beat: Heartbeat, expected_counter: int | None, clear: Any = ()
    ) -> tuple[HandOverRequest, ...]:
        return self._hooked("heartbeat", lambda: super(Hooked, self).heartbeat(beat, expected_counter, clear))  # type: ignore[no-any-return]

    def checkpoint(self, held: Lease, checkpoint: ExtendedSequenceNumber) -> Lease:
        return self._hooked("checkpoint", lambda: super(Hooked, self).checkpoint(held, checkpoint))  # type: ignore[no-any-return]

    def take(self, seen: Lease, new_owner: str) -> Lease:
        return self._hooked("take", lambda: super(Hooked, self).take(seen, new_owner))  # type: ignore[no-any-return]

    def get_heartbeat(self, worker_id: str) -> Heartbeat | None:
        return self._hooked("get_heartbeat", lambda: super(Hooked, self).get_heartbeat(worker_id))  # type: ignore[no-any-return]


class RecordingMetrics:
    """Keeps the last value of every gauge (the Metrics protocol's other calls are ignored)."""

    def __init__(self) -> None:
        self.gauges: dict[tuple[str, str], float] = {}

    def count(self, *_: Any, **__: Any) -> None:
        return None

    def timing(self, *_: Any, **__: Any) -> None:
        return None

    def gauge(self, operation: str, name: str, value: float, unit: str, shard_id: str | None = None) -> None:
        self.gauges[(operation, name)] = value


def table(*shards: str) -> Hooked:
    store = Hooked()
    for shard in shards:
        store.create_if_absent(Lease(shard, None, 0, ESN("TRIM_HORIZON")))
    return store


def worker(
    store: Hooked, clock: FakeClock, name: str, settings: WorkerSettings = SETTINGS
) -> LeaseCoordinator:
    coordinator = LeaseCoordinator(store, name, settings, clock)
    assert coordinator.heartbeat_once()
    coordinator.take_round()
    return coordinator


def retried_after_commit(call: Callable[[], Any]) -> Any:
    """HTTP 500 after the write committed: botocore sends it again; the retry's answer is the one seen."""
    call()
    return call()


def timed_out_after_commit(call: Callable[[], Any]) -> Any:
    call()
    raise LeaseStoreUnavailableError("read timeout (the write had committed)")


def throttled(call: Callable[[], Any]) -> Any:
    raise LeaseStoreThrottledError("ProvisionedThroughputExceededException")


def refused_for_now(store: Hooked, coordinator: LeaseCoordinator, shard_id: str, position: str) -> None:
    """The worker processed to ``position`` and the table throttles its checkpoint: refused for now
    (the throttle stays on until the test takes ``store.hooks["checkpoint"]`` away)."""
    store.hooks["checkpoint"] = throttled
    try:
        coordinator.checkpoint(shard_id, position)
    except LeaseStoreThrottledError:
        return
    raise AssertionError(f"the checkpoint of {position} was not refused")
