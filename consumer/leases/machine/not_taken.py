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

from consumer.leases.decisions import parents_finished
from consumer.leases.machine.actions import Outbox
from consumer.leases.model import Snapshot
from ground.settings import WorkerSettings

LOG_EVERY_MILLIS = 60_000


class NotTaken:
    def __init__(self, me: str, settings: WorkerSettings, out: Outbox) -> None:
        self._me = me
        self._timeout = settings.stall_timeout_millis
        self._out = out
        self._free_since: dict[str, int] = {}  # ready lease -> since when free with room here
        self._logged_at: int | None = None

    def observe(self, snapshot: Snapshot, room: bool, avoided: frozenset[str], now: int) -> list[str]:
        """After a full scan's round (``now``: monotonic ms): the ready leases free for longer than the
        stall timeout while this worker had room (empty while it has none: a full worker is not the
        one failing to take)."""
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
            self._out.not_taken(left, now - min(self._free_since[s] for s in left))
        return left
