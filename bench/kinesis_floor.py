"""The CPU floor for a Kinesis record: ``orjson.loads`` of each record's own bytes (its data, as a
user who reads the records themselves would parse it), in a fresh interpreter that imported nothing
but orjson and what :mod:`bench.fresh_orjson` imports.

Run as ``python -m bench.kinesis_floor FILE``: FILE holds the records' data in the format
:func:`bench.fresh_orjson.read_bodies` reads (one "body" per record); it prints one JSON line with
the CPU seconds (``time.process_time``) of parsing every record once, each result dropped before the
next, and the record count.
"""

from __future__ import annotations

import json
import sys

from bench.fresh_orjson import parse_each, read_bodies


def write_records(records: list[bytes], path: str) -> None:
    """Save ``records`` for :func:`main` (the header :func:`bench.fresh_orjson.read_bodies` reads)."""
    with open(path, "wb") as out:
        out.write(json.dumps({"shards": [len(records)], "records_per_response": 1}).encode() + b"\n")
        for record in records:
            out.write(len(record).to_bytes(8, "little"))
            out.write(record)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m bench.kinesis_floor FILE", file=sys.stderr)
        return 2
    records, count = read_bodies(args[0])
    seconds = parse_each(records)
    print(json.dumps({"seconds": seconds, "records": count, "modules": len(sys.modules)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
