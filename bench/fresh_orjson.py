"""The honest CPU floor for the worker's record path: ``orjson.loads`` of the GetRecords bodies in
a fresh interpreter that has imported nothing else.

Run as ``python -m bench.fresh_orjson FILE`` (FILE written by ``bench.canned.write``): it prints one
JSON line with the CPU seconds (``time.process_time``) of parsing every body once, and the record
count. This is what a user who parses the responses themselves pays at best: a small heap, the
collector as Python starts it (nothing frozen, default thresholds, no ``gc.collect()`` first), each
parsed response dropped before the next is parsed. It deliberately imports neither the product nor
boto3 (``bench/__init__.py`` is empty): their modules would make the collector's full passes scan a
heap the user's own program would not have, which is the floor this module replaces (orjson timed
inside the worker's process, bench/record_cpu.py's ``in_worker_heap`` figure).

Then, in the same process, a stricter floor: ``orjson.loads`` of each record's own bytes, cut from
the bodies beforehand (not timed), each result dropped at once — what the worker's parser itself
does (consumer/streams/wire.py ``read_compact``); its objects are freed while still in the CPU's
caches, which a whole-body parse (~20 x the body in objects) cannot do. The canned bodies are
compact orjson output, so each record's bytes are ``orjson.dumps`` of the parsed record.
"""

from __future__ import annotations

import json
import sys
import time

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


def record_slices(bodies: list[bytes]) -> list[bytes]:
    """Each record's bytes (the canned bodies are compact: ``orjson.dumps`` of a record is its slice)."""
    return [orjson.dumps(record) for body in bodies for record in orjson.loads(body)["Records"]]


def parse_each(pieces: list[bytes]) -> float:
    """CPU seconds to parse every piece (a body, or a record's bytes) once, each result dropped
    before the next parse."""
    loads = orjson.loads
    started = time.process_time()
    for piece in pieces:
        loads(piece)
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.fresh_orjson FILE", file=sys.stderr)
        return 2
    bodies, records = read_bodies(args[0])
    seconds = parse_each(bodies)
    modules = len(sys.modules)
    slices = record_slices(bodies)
    each = parse_each(slices)
    print(
        json.dumps({"seconds": seconds, "per_record_seconds": each, "records": records, "modules": modules})
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
