"""The leases and workers tables as code outside the worker reads them: ``consumer leases``, the
dashboard's lease view, the demo's verdict, ``consumer plan``'s advice and the benchmarks' fleets.

The model (one lease row, one heartbeat row, a scan of both), the DynamoDB store that reads them,
the timing a worker judges liveness by, and the errors a store raises (the command turns each into
its exit code). The store port and its in-memory adapter, which a worker is assembled with, are in
:mod:`consumer.api.worker`.
"""

from consumer.leases.advice import suggested_max_leases_for_worker
from consumer.leases.decisions import Timing, live_workers
from consumer.leases.dynamodb import DynamoDBLeaseStore
from consumer.leases.errors import LeaseError, LeaseStoreUnavailableError, LeaseTableMissingError
from consumer.leases.items import heartbeat_to_item, lease_to_item
from consumer.leases.model import ExtendedSequenceNumber, HandOverRequest, Heartbeat, Lease, Snapshot

__all__ = [
    "DynamoDBLeaseStore",
    "ExtendedSequenceNumber",
    "HandOverRequest",
    "Heartbeat",
    "Lease",
    "LeaseError",
    "LeaseStoreUnavailableError",
    "LeaseTableMissingError",
    "Snapshot",
    "Timing",
    "heartbeat_to_item",
    "lease_to_item",
    "live_workers",
    "suggested_max_leases_for_worker",
]
