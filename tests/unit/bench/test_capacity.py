"""Capacity arithmetic of the leases table (DynamoDB's rules) and the store that charges by them."""

from __future__ import annotations

from bench.capacity import MeteredStore, item_bytes, scan_units, write_units
from consumer.leases.memory import InMemoryLeaseStore
from consumer.leases.model import ExtendedSequenceNumber, Heartbeat, Lease


def test_dynamodb_rounding() -> None:
    assert item_bytes({"leaseKey": {"S": "abc"}, "leaseCounter": {"N": "12"}}) == 8 + 3 + 12 + 2
    assert (scan_units(1), scan_units(4096), scan_units(4097)) == (0.5, 0.5, 1.0)
    assert (write_units(1), write_units(1024), write_units(1025)) == (1, 1, 2)


def test_metered_store_charges_each_request() -> None:
    store = MeteredStore(InMemoryLeaseStore())
    store.create_if_absent(Lease("s1", None, 0, ExtendedSequenceNumber("TRIM_HORIZON")))
    store.heartbeat(Heartbeat("w", 1, 1), None)
    store.scan()
    assert store.meter.writes == 2 and store.meter.write_units == 2
    assert store.meter.scans == 1 and store.meter.read_units == 1.0  # 0.5 per table scanned
