"""How fast this machine is right now: ``orjson.loads`` of one stream record, µs per record.

The README's ``make test`` timings are CPU-bound, and the small virtual machines they are taken on
change speed from one hour to the next; this reading, taken just before and just after a run, says
which hour a timing comes from. It parses 20 000 copies of one fixed 1 083-byte DynamoDB stream
record (twenty string attributes) and prints the best of seven passes in CPU time, so a second
process on the other core does not count against it.

    .venv/bin/python -m bench.machine_floor

Not a benchmark of ``python -m bench`` (no row of RESULTS.md): it times the loop the benches' floor
times (:func:`bench.fresh_orjson.parse_each`), on a fixed record instead of canned responses.
"""

from __future__ import annotations

import orjson

from bench.fresh_orjson import parse_each

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


def floor_micros() -> float:
    records = [RECORD] * COPIES
    return min(parse_each(records) for _ in range(PASSES)) / COPIES * 1e6


if __name__ == "__main__":
    print(f"machine floor: {floor_micros():.2f} µs per record ({len(RECORD)} bytes, best of {PASSES})")
