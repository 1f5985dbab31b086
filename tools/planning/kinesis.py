"""The figures of a Kinesis source (``source.kind: kinesis``): N is the stream's shard count, and
the stream's own limits decide whether it carries the load and its readers.

A shard takes 1 000 records/s or 1 MB/s of writes, whichever comes first, and serves 5 GetRecords
calls/s and 2 MB/s of reads; without enhanced fan-out every consumer of the stream shares those
reads (``source.other_consumers`` besides this fleet). So the plan checks, per shard:

* writes: the shards the peak needs (``max(records/s / 1000, KB/s / 1024)``) against N; an
  on-demand stream adds shards itself, so there it is a note on how N will grow;
* read calls: this fleet's polls at rest (one per ``worker.idle_time_between_reads_millis``) and
  catching up (one per ``worker.min_time_between_reads_millis``) against its share of the 5 calls/s;
* read bytes: every consumer reads every record, so the shard's writes times the consumers must stay
  under 2 MB/s, and what is left is how fast a consumer catches up after an outage.

There are no rollovers: a shard lives until it is resharded, so at most about 2N shards are
readable (a resharding's parents, until they are read to their end, beside their children),
not the 6N of a DynamoDB stream's 4-hourly rollovers.
"""

from __future__ import annotations

import math

from ground.settings import Settings
from tools.planning.figures import Sheet

WRITE_RECORDS_PER_SHARD = 1000
WRITE_KB_PER_SHARD = 1024
READ_KB_PER_SHARD = 2048
READ_CALLS_PER_SHARD = 5
# Readable shards per open shard: a resharding's parents beside their children.
READABLE_SHARDS_FACTOR = 2


def kinesis_stream(sheet: Sheet, settings: Settings, n: int) -> None:
    """The stream's write and read figures for N shards, with a warning where a limit is passed."""
    add, source, worker = sheet.add, settings.source, settings.worker
    on_demand = source.create and source.stream_mode == "ON_DEMAND"
    records = source.peak_records_per_second
    write_kb = add(
        "stream_write_kb_per_second",
        records * source.average_record_kb,
        "KB/s",
        "source.peak_records_per_second x source.average_record_kb",
    )
    needed = add(
        "shards_needed_for_writes",
        max(1, math.ceil(records / WRITE_RECORDS_PER_SHARD), math.ceil(write_kb / WRITE_KB_PER_SHARD)),
        "shards",
        "max(1, ceil(records/s / 1000), ceil(KB/s / 1024)): a shard takes 1000 records/s or 1 MB/s of writes",
    )
    if needed > n:
        if on_demand:
            sheet.notes.append(
                f"the peak writes need {needed:.0f} shards and source.shard_count is {n}: an on-demand stream "
                f"adds shards itself, so N grows to about {needed:.0f} (size the fleet for that N)"
            )
        else:
            sheet.warnings.append(
                f"the peak writes need {needed:.0f} shards but the stream has source.shard_count = {n}: writes "
                f"are throttled; reshard to {needed:.0f} shards (UpdateShardCount) and set source.shard_count"
            )
    consumers = add(
        "stream_consumers",
        1 + source.other_consumers,
        "consumers",
        "1 + source.other_consumers: every GetRecords reader of the stream (enhanced fan-out ones excluded)",
    )
    share = add(
        "get_records_per_shard_share",
        READ_CALLS_PER_SHARD / consumers,
        "calls/s",
        "5 GetRecords/s per shard / consumers",
    )
    at_rest = add(
        "get_records_per_shard",
        1000 / max(worker.idle_time_between_reads_millis, 1),
        "calls/s",
        "1000 / worker.idle_time_between_reads_millis (a shard with records arriving, not full batches)",
    )
    catching_up = (
        1000 / max(worker.min_time_between_reads_millis, 1) if worker.catch_up_behind_millis else at_rest
    )
    add(
        "get_records_per_shard_catching_up",
        catching_up,
        "calls/s",
        "1000 / worker.min_time_between_reads_millis (catch-up reads back to back)",
    )
    if at_rest > share:
        sheet.warnings.append(
            f"this fleet polls each shard {at_rest:g} times/s but its share of the 5 GetRecords/s is {share:g} "
            f"({consumers:.0f} consumers): reads are throttled; raise worker.idle_time_between_reads_millis "
            f"to {math.ceil(1000 / share)} or move other consumers to enhanced fan-out"
        )
    elif catching_up > share:
        sheet.notes.append(
            f"catching up, this fleet reads a shard {catching_up:g} times/s, above its share of {share:g} "
            "GetRecords/s: a backlog is read with throttled calls (retried after a back-off, nothing lost)"
        )
    shards = max(n, needed) if on_demand else n  # on demand, AWS adds the shards the writes need
    per_shard_kb = add(
        "stream_write_kb_per_shard",
        write_kb / shards,
        "KB/s",
        "stream_write_kb_per_second / N"
        + (" (at least shards_needed_for_writes: on demand)" if on_demand else ""),
    )
    headroom = add(
        "catch_up_kb_per_second_per_shard",
        READ_KB_PER_SHARD / consumers - per_shard_kb,
        "KB/s",
        "2 MB/s / consumers - stream_write_kb_per_shard: how fast a consumer gains on the tip",
    )
    if headroom <= 0:
        sheet.warnings.append(
            f"{consumers:.0f} consumers each reading {per_shard_kb:.0f} KB/s of every shard need more than its "
            "2 MB/s of reads: every consumer falls behind; add shards, or move consumers to enhanced fan-out"
        )
