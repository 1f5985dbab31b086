"""How fast this machine is right now: ``orjson.loads`` of one stream record, µs per record.

The README's ``make test`` timings are CPU-bound, and the small virtual machines they are taken on
change speed from one hour to the next; this reading, taken just before and just after a run, says
which hour a timing comes from. It parses 20 000 copies of one fixed 1 083-byte DynamoDB stream
record (twenty string attributes) and prints the best of seven passes in CPU time, so a second
process on the other core does not count against it.

    .venv/bin/python -m scripts.machine_floor
"""

from __future__ import annotations

import time

import orjson

RECORD = orjson.dumps(
    {
        "eventID": "x" * 32,
        "eventName": "MODIFY",
        "dynamodb": {
            "Keys": {"pk": {"S": "k" * 20}},
            "NewImage": {f"a{i}": {"S": "v" * 30} for i in range(20)},
            "SequenceNumber": "1" * 21,
            "SizeBytes": 900,
        },
    }
)
COPIES = 20_000
PASSES = 7


def one_pass(records: list[bytes]) -> float:
    """CPU seconds to parse every record once, each result dropped before the next: the loop
    bench/fresh_orjson.py times as the benches' floor (scripts/ may not import bench/, its
    neighbour on the house's floor)."""
    loads = orjson.loads
    started = time.process_time()
    for record in records:
        loads(record)
    return time.process_time() - started


def floor_micros() -> float:
    records = [RECORD] * COPIES
    return min(one_pass(records) for _ in range(PASSES)) / COPIES * 1e6


if __name__ == "__main__":
    print(f"machine floor: {floor_micros():.2f} µs per record ({len(RECORD)} bytes, best of {PASSES})")
