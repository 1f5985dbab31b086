"""The honest CPU floor for the worker's record path: ``orjson.loads`` of the GetRecords bodies in
a fresh interpreter that has imported nothing else.

Run as ``python -m bench.fresh_orjson FILE`` (FILE written by ``bench.canned.write``): it prints one
JSON line with the CPU seconds (``time.process_time``) of parsing every body once, and the record
count. This is what a user who parses the responses themselves pays at best: a small heap, the
collector as Python starts it (nothing frozen, default thresholds, no ``gc.collect()`` first), each
parsed response dropped before the next is parsed. It deliberately imports neither the product nor
boto3 (``bench/__init__.py`` imports nothing): their modules would make the collector's full passes scan a
heap the user's own program would not have, which is the floor this module replaces (orjson timed
inside the worker's process, bench/record_cpu.py's ``in_worker_heap`` figure).

Then, in the same process, the per-record floor: what a user pays who cuts each compact body into
its records and parses each record's own bytes with ``orjson.loads``, as the worker's parser does
(consumer/streams/wire.py ``read_compact``), written as a user would write it (:func:`parse_records`:
find the ``Records`` array, take the first record's first key, and split at ``},{"<key>"``). The
cut is timed with the parses: it is part of what the user runs. Each record's objects are freed
while still in the CPU's caches, which a whole-body parse (~20 x the body in objects) cannot do, so
this floor is about a third of the first.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable  # loaded when Python starts: typing is not

import orjson


def read_bodies(path: str) -> tuple[list[bytes], int]:
    """The bodies saved by ``bench.canned.write`` (read here without importing bench.canned, so
    this process holds only what it parses) and the number of records they hold."""
    with open(path, "rb") as source:
        header = orjson.loads(source.readline())
        bodies = [
            source.read(int.from_bytes(source.read(8), "little"))
            for count in header["shards"]
            for _ in range(count)
        ]
    return bodies, len(bodies) * int(header["records_per_response"])


def parse_each(pieces: list[bytes]) -> float:
    """CPU seconds to parse every piece (a body, or a record's bytes) once, each result dropped
    before the next parse."""
    loads = orjson.loads
    started = time.process_time()
    for piece in pieces:
        loads(piece)
    return time.process_time() - started


def parse_records(bodies: list[bytes], parse: Callable[[bytes], object] = orjson.loads) -> float:
    """CPU seconds to cut every body into its records and ``parse`` each record's bytes once (each
    result dropped before the next)."""
    loads = parse
    started = time.process_time()
    for body in bodies:
        start = body.index(b'"Records":[') + len(b'"Records":[')
        if body.startswith(b"]", start):
            continue  # no records
        end = body.rindex(b"}]") + 1
        first_key = body[start + 1 : body.index(b'"', start + 2) + 1]  # '"eventID"', say
        between = b"},{" + first_key
        find = body.find
        boundary = find(between, start, end)
        while boundary >= 0:
            loads(body[start : boundary + 1])
            start = boundary + 2
            boundary = find(between, start, end)
        loads(body[start:end])
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.fresh_orjson FILE", file=sys.stderr)
        return 2
    bodies, records = read_bodies(args[0])
    seconds = parse_each(bodies)
    modules = len(sys.modules)
    each = parse_records(bodies)
    print(
        json.dumps({"seconds": seconds, "per_record_seconds": each, "records": records, "modules": modules})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
