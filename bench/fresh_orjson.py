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


def parse_all(bodies: list[bytes]) -> float:
    """CPU seconds to parse every body once, each result dropped before the next parse."""
    loads = orjson.loads
    started = time.process_time()
    for body in bodies:
        loads(body)
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.fresh_orjson FILE", file=sys.stderr)
        return 2
    bodies, records = read_bodies(args[0])
    seconds = parse_all(bodies)
    print(json.dumps({"seconds": seconds, "records": records, "modules": len(sys.modules)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
