"""Directed faults: the one unlucky moment a history scripts, within the fault model's bounds.

Random draws rarely line up the moment a particular defence exists for, so a history can carry a
:class:`Script` of :class:`Directed` faults, each hitting one call of one worker once: a scan that
sees the table as it was a failover ago, a listing a minute old, a checkpoint throttled and answered
late, the process stopped just before, right after sending, or right after the answer of a call, a
window-state write refused. The leases connection (simulation/faults.py) looks them up for its
calls and the stream's listing (stream.py); the window-state table reaches them through it
(sinks.py). Histories: tests/simulation/test_directed.py (the lease core), test_directed_delivery.py
(delivery).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass
class Directed:
    """One scripted fault, within the model's bounds: it hits the first ``call`` that ``worker``
    makes at or after ``at`` (simulated ms since the start of the history), once.

    A leases-table call is one call of the store's port, which may send several requests (a scan's
    pages, a cleanup's two writes); what hits the requests is applied by the DynamoDB client model
    (simulation/dynamodb_api.py), the rest around the call (simulation/faults.py).
    ``view_age_millis``: a scan (every page of it) or a listing answers with the table or stream as
    it was this long before (a scan at most the model's one failover). ``commit_delay_millis``: the
    server acts on the call's first request this long after it was sent, whatever the process does
    meanwhile -- if its client is still waiting then: a client that runs past its read timeout
    first gives the attempt up and botocore sends it again. ``throttle``: the call is refused without
    effect, at once (at the port: botocore's own retries of a throttle back off for seconds).
    ``answer_delay_millis``: the answer (a refusal too) reaches the calling thread this much later
    (the thread waits; the rest of the process runs). ``pause_before_send_millis`` /
    ``pause_after_send_millis`` / ``pause_after_millis``: the whole process stops just before the
    request goes out / right after it went out / right after the answer arrived (SIGSTOP, a GC
    pause, a suspended VM).

    ``thread`` names one of the worker's threads, or a pool of them ("shard": any of the
    scheduler's, "lanes": any lane's). Besides the leases table's calls, the stream's ``list_shards``
    and the window-state table's calls ("PutItem", "GetItem", "Query", "DeleteItem": a ``throttle``
    there is the table refusing the call) can be hit.
    """

    worker: str
    call: str  # a port method ("scan", "get_heartbeat", ...) or "list_shards"
    at: int
    thread: str = (
        ""  # only calls from this thread of the worker ("taker", "sync", "heartbeat"; a pool: "shard")
    )
    skip: int = 0  # let this many matching calls pass first (the second save of a flush, say)
    shard: str = ""  # only a checkpoint of this shard
    table: str = ""  # "leases" or "workers": ``view_age_millis`` for the requests to that table only
    view_age_millis: int = 0
    commit_delay_millis: int = 0
    throttle: bool = False
    answer_delay_millis: int = 0
    pause_before_send_millis: int = 0
    pause_after_send_millis: int = 0
    pause_after_millis: int = 0
    fired_at: int | None = None  # when it hit (None: it never did, and the history proves nothing)
    passed: int = 0  # matching calls let pass so far (``skip``)


# A directed fault names a worker's thread by its role; the worker's own names for them
# (consumer.runtime.worker, consumer.leases.coordinator; pools are "<name>-<n>").
ROLES = {
    "heartbeat": "lease-heartbeat",
    "taker": "lease-taker",
    "sync": "shard-sync",
    "children": "shard-children",
}


def _is(thread: str, worker: str, role: str) -> bool:
    """Whether ``thread`` is ``worker``'s thread of ``role``, or one of its pool of that name."""
    named = f"{worker}-{ROLES.get(role, role)}"
    rest = thread[len(named) + 1 :] if thread.startswith(f"{named}-") else ""
    return thread == named or rest.rsplit("-", 1)[-1].isdigit()


class Script:
    """The directed faults of one history."""

    def __init__(self, faults: Sequence[Directed], start: int) -> None:
        self.faults, self.start = list(faults), start

    def take(self, worker: str, thread: str, call: str, now: int, shard: str = "") -> Directed | None:
        for fault in self.faults:
            if (
                fault.fired_at is None
                and fault.worker == worker
                and fault.call == call
                and fault.shard in ("", shard)
                and (not fault.thread or _is(thread, worker, fault.thread))
                and now - self.start >= fault.at
            ):
                if fault.passed < fault.skip:
                    fault.passed += 1
                    return None
                fault.fired_at = now - self.start
                return fault
        return None

    def unfired(self) -> list[Directed]:
        return [fault for fault in self.faults if fault.fired_at is None]
