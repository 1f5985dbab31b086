"""Ready leases that nobody takes although this worker has room: the lease side's stall.

The taker takes a free lease whose parents are finished whenever it holds fewer than its cap, so a
ready lease left free across rounds means something is wrong that no metric of the lease loop shows:
a take that keeps failing, a parent judged unfinished by mistake, a bug. :class:`NotTaken` follows
the free ready leases from one full scan to the next and reports those free for longer than
``worker.stall_timeout_millis`` while this worker had room all along (the ``LeasesNotTaken`` gauge an
alarm watches, and an ERROR once a minute). Leases this worker avoids (it gave them up as stalled) are
not its to take and are left out.
"""

from __future__ import annotations

import logging

from consumer.leases.decisions import parents_finished
from consumer.leases.model import Snapshot
from consumer.telemetry.catalogue import log_leases_not_taken
from ground.clock import Clock
from ground.settings import WorkerSettings

log = logging.getLogger("consumer.leases")

LOG_EVERY_MILLIS = 60_000


class NotTaken:
    def __init__(self, me: str, settings: WorkerSettings, clock: Clock) -> None:
        self._me = me
        self._timeout = settings.stall_timeout_millis
        self._clock = clock
        self._free_since: dict[str, int] = {}  # ready lease -> since when free with room here
        self._logged_at: int | None = None

    def observe(self, snapshot: Snapshot, room: bool, avoided: frozenset[str]) -> list[str]:
        """After a full scan's round: the ready leases free for longer than the stall timeout while this
        worker had room (empty while it has none: a full worker is not the one failing to take)."""
        now = self._clock.monotonic_millis()
        if self._timeout is None or not room:
            self._free_since.clear()
            return []
        free = [
            lease.shard_id
            for lease in snapshot.leases.values()
            if lease.owner is None
            and not lease.finished
            and lease.shard_id not in avoided
            and parents_finished(lease, snapshot.leases)
        ]
        self._free_since = {shard: self._free_since.get(shard, now) for shard in free}
        left = sorted(s for s, since in self._free_since.items() if now - since >= self._timeout)
        if left and (self._logged_at is None or now - self._logged_at >= LOG_EVERY_MILLIS):
            self._logged_at = now
            log_leases_not_taken(log, left, now - min(self._free_since[s] for s in left))
        return left
