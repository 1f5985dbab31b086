"""The dashboard's panels for a Kinesis source (``source.kind: kinesis``), part of the one list
(:data:`tools.dashboard.widgets.WIDGETS`) and drawn only where the source is a Kinesis stream
(``Widget.only_if``): the stream's own AWS/Kinesis metrics, stream-level (dimension StreamName),
which count every consumer of the stream, against its shards' limits.

Without enhanced fan-out every consumer shares each shard's 5 GetRecords calls/s and 2 MiB/s; the
panels draw both lines, the stream's iterator age against the lag alarm, and the records written to
the stream against those processed (a DynamoDB source draws its table's writes instead).
"""

from __future__ import annotations

from ground.settings import Settings
from tools.dashboard.widget_model import (
    SOURCE_STREAM,
    WORKER,
    Condition,
    Formula,
    Metric,
    Reference,
    ReferenceLine,
    Widget,
)

# A Kinesis shard's read limits without enhanced fan-out, shared by every consumer of the stream.
KINESIS_READS_PER_SHARD = 5
KINESIS_READ_BYTES_PER_SHARD = 2 * 2**20

# Worker metrics the cost and read-rate formulas share (both sources).
STREAM_READS = Metric(WORKER, "StreamReadRequests", "Sum", "stream read requests/s")
LEASES_HELD = Metric(WORKER, "CurrentLeases", "Maximum", "leases held by the fleet", across="Sum")


def kinesis_reference_lines(settings: Settings, n: int) -> dict[Reference, ReferenceLine]:
    """The read limits of a Kinesis source's N shards (none for a DynamoDB source)."""
    if not settings.source.is_kinesis:
        return {}
    return {
        Reference.STREAM_READ_BYTES_LIMIT: ReferenceLine(
            f"reads limit: 2 MiB/s x N = {n * KINESIS_READ_BYTES_PER_SHARD / 2**20:g} MiB/s (all consumers)",
            float(n * KINESIS_READ_BYTES_PER_SHARD),
        ),
        Reference.STREAM_READ_CALLS_LIMIT: ReferenceLine(
            f"{KINESIS_READS_PER_SHARD} GetRecords/s per shard (all consumers)",
            float(KINESIS_READS_PER_SHARD),
        ),
    }


KINESIS_RECORDS = Widget(
    "Records processed vs stream writes",
    "Count/Second",
    "records/s",
    (
        Metric(WORKER, "RecordsProcessed", "Sum", "records processed/s", absent="only while records arrive"),
        Metric(SOURCE_STREAM, "IncomingRecords", "Sum", "records written to the stream/s"),
        Metric(
            SOURCE_STREAM,
            "GetRecords.Records",
            "Sum",
            "records read from the stream/s (every consumer)",
            absent="AWS publishes it only for minutes with reads",
        ),
    ),
    note="A record of a KPL-aggregated write counts once as written and read, and once per user "
    "record as processed. Records processed need not add up to the writes: a worker that is killed "
    "publishes nothing for its last metrics period, and what it had not checkpointed is processed "
    "again by the next holder.",
    only_if=Condition.KINESIS_SOURCE,
)

KINESIS_READS: tuple[Widget, ...] = (
    Widget(
        "Stream iterator age vs the lag alarm",
        "Milliseconds",
        "ms behind",
        (
            Metric(
                SOURCE_STREAM,
                "GetRecords.IteratorAgeMilliseconds",
                "Maximum",
                "stream iterator age (the oldest read of every consumer)",
                absent="AWS publishes it only for minutes with reads",
            ),
        ),
        (Reference.LAG_ALARM,),
        note="The age of the last record each GetRecords returned, the oldest over the stream's "
        "consumers: above 'MillisBehindLatest per worker', another consumer of the stream is behind.",
        only_if=Condition.KINESIS_SOURCE,
    ),
    Widget(
        "Stream reads vs the shards' limit",
        "Bytes/Second",
        "bytes read/s",
        (
            Metric(
                SOURCE_STREAM,
                "GetRecords.Bytes",
                "Sum",
                "bytes read from the stream/s (every consumer)",
                absent="AWS publishes it only for minutes with reads",
            ),
        ),
        (Reference.STREAM_READ_BYTES_LIMIT,),
        note="Without enhanced fan-out every consumer of the stream shares each shard's 2 MiB/s and 5 "
        "GetRecords calls/s: near the line, reads are throttled (next panel).",
        only_if=Condition.KINESIS_SOURCE,
    ),
    Widget(
        "Stream read throttles",
        "Count/Second",
        "throttled GetRecords/s",
        (
            Metric(
                SOURCE_STREAM,
                "ReadProvisionedThroughputExceeded",
                "Sum",
                "GetRecords throttled/s (every consumer)",
                absent="only when a read is throttled",
            ),
        ),
        (),
        formulas=(
            Formula(
                "our GetRecords/s per shard",
                ((STREAM_READS, 1.0),),
                over=LEASES_HELD,
                absent="only while a worker holds leases",
                right=True,
            ),
        ),
        right_label="GetRecords/s per shard",
        right_references=(Reference.STREAM_READ_CALLS_LIMIT,),
        note="A throttled read is retried after a back-off and loses nothing, but the shard falls behind "
        "while it lasts. Lasting throttles: too many consumers of the stream, or "
        "worker.idle_time_between_reads_millis too short for them (`consumer plan`).",
        only_if=Condition.KINESIS_SOURCE,
    ),
)
