"""The settings table of docs/settings.md, generated from the models so it cannot drift from the code.

``python -m tools.settings_doc`` prints the table; ``scripts/update-readme.py`` writes it into
docs/settings.md and a test checks that it is current. The *advice* column states the advice each
default follows and where it comes from (DynamoDB's limits, the KCL's behaviour, AWS Lambda's).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from ground.settings import UNBOUNDED, Settings

ADVICE: dict[str, str] = {
    "application_name": "KCL: the application name names the leases table and the metric namespace",
    "table.stream_view_type": "NEW_AND_OLD_IMAGES: each record carries both images, so a replica can apply and verify every change",
    "table.partitions": "a DynamoDB partition serves 3000 RCU, 1000 WCU, 10 GB: N = max(ceil(RCU/3000 + WCU/1000), ceil(GB/10))",
    "source.kind": "the Java KCL's first source is Kinesis; Lambda reads both: one worker, leases in KCL's form for either",
    "source.shard_count": "Kinesis on-demand streams start with 4 shards; a provisioned stream has the count it was given",
    "source.retention_hours": "Kinesis keeps records 24 h by default, up to 8760 h (365 days); DynamoDB Streams always 24 h",
    "source.kms_key_arn": "AWS-managed aws/kinesis needs no IAM grant (cdk-nag KDS3 prefers it); a customer-managed key needs kms:Decrypt for every consumer",
    "source.other_consumers": "without enhanced fan-out every consumer of a shard shares its 5 GetRecords/s and 2 MB/s",
    "worker.failover_time_millis": "KCL default 10 000; raise it if GC pauses or slow I/O make workers lose leases they still use",
    "worker.lease_renewal_interval_millis": "KCL renews every failover/3 − ε; must stay below failover",
    "worker.lease_taker_interval_millis": "KCL: 2 × (failover + ε); failover/3 resumes a dead worker's shards in ≤ 1.4 × failover",
    "worker.shard_sync_interval_millis": "KCL default 60 000; reaching a shard's end also triggers a sync, so children start without waiting",
    "worker.max_leases_for_worker": "between N/M and 6N/M (up to 6N shards readable in 24 h); N/M alone can fill every worker with children waiting for parents nobody may take; start at N/M + b",
    "worker.max_leases_to_steal_at_one_time": "KCL default 1; surplus is also handed off voluntarily, so joins converge fast",
    "worker.max_records": "unset: each stream's GetRecords maximum, 1000 on DynamoDB Streams, 10 000 on Kinesis (KCL's maxRecords default)",
    "worker.idle_time_between_reads_millis": "KCL 1.x default 1000; lower it for latency, mind 5 reads/s per shard",
    "worker.parent_shard_poll_interval_millis": "KCL default 10 000",
    "worker.call_process_records_even_for_empty_record_list": "as KCL's callProcessRecordsEvenForEmptyRecordList: needed for time-based flushes of buffered records",
    "worker.cleanup_leases_upon_shard_completion": "KCL default true: keeps the leases table, and its Scan cost, small",
    "worker.initial_position": "KCL default LATEST; descendants always start at TRIM_HORIZON or records are lost",
    "worker.initial_lease_table_read_capacity": "KCL's default 10 is often too low, and a throttled leases table loses leases; see `consumer plan`",
    "worker.initial_lease_table_write_capacity": "KCL's default 10 is often too low, and a throttled leases table loses leases; see `consumer plan`",
    "worker.on_trimmed": "stream records are trimmed after 24 h; never continue silently past data that is gone",
    "worker.reload_read_share": "a reload reads the whole table: leave the application most of its read capacity",
    "worker.reload_on_demand_read_units_per_second": "an on-demand table has no stated capacity to take a share of: say the rate",
    "metrics.level": "KCL metricsLevel (NONE, SUMMARY, DETAILED)",
    "metrics.shard_id_dimension": "one CloudWatch series per shard: turn it off for large streams (cost)",
    "logs.worker_log_group": "keep the lease worker's logs apart from the application's, so lease trouble is found without wading through processor output",
    "logs.application_log_group": "keep the lease worker's logs apart from the application's, so lease trouble is found without wading through processor output",
    "scaling.returned_item_count_multiplier": "KCL on DynamoDB Streams: leases ≥ 2N for 5 minutes (a Scan ReturnedItemCount alarm) means the fleet is falling behind",
    "scaling.period_seconds": "the 2N alarm above: over 5 minutes",
    "scaling.evaluation_periods": "the 2N alarm above: one period",
    "fleet.worker_processes_per_instance": "one process per core: Python threads share one core for CPU work",
    "processing.batching.batch_size": "Lambda's BatchSize (with max_window_millis as its MaximumBatchingWindowInSeconds); not worker.max_records, the GetRecords Limit",
    "processing.retry.max_retry_attempts": "Lambda retries until success by default; KCL moves past a batch whose processing failed, losing it",
    "processing.retry.bisect_on_error": "peers: Lambda's BisectBatchOnFunctionError isolates a poison record",
    "processing.dead_letter.type": "as Lambda's on-failure destination: records that can never succeed need their own path, not silent loss",
}


def _default(field: Any) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
        if isinstance(value, BaseModel):
            return "(section)"
        return json.dumps(value)
    default = field.default
    if default is PydanticUndefined:
        return "required"
    if default is None:
        return "—"
    if default == UNBOUNDED:
        return "unbounded"
    if isinstance(default, bool):
        return str(default).lower()
    return str(default)


def _rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    rows: list[tuple[str, str, str, str]] = []
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if path == "env":
            continue
        nested = next(
            (
                c
                for c in (field.annotation, *getattr(field.annotation, "__args__", ()))
                if isinstance(c, type) and issubclass(c, BaseModel)
            ),
            None,
        )
        if nested is not None and (field.default_factory is not None or field.is_required()):
            rows.extend(_rows(nested, f"{path}."))
            continue
        description = (field.description or "").replace("|", "\\|")
        rows.append((path, _default(field), description, ADVICE.get(path, "")))
    return rows


def settings_markdown_table() -> str:
    lines = ["| key | default | meaning | advice it follows |", "|---|---|---|---|"]
    lines += [
        f"| `{key}` | {default} | {meaning} | {advice} |" for key, default, meaning, advice in _rows(Settings)
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(settings_markdown_table(), end="")
