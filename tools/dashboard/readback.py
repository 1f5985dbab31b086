"""Reading EMF documents back: from CloudWatch Logs (the emulator locally) or a JSON Lines file.

The local dashboard and the tests use this instead of CloudWatch's metric extraction, which the
emulator does not perform: the documents are the source of truth either way.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from tools.dashboard.errors import DashboardError

DIMENSION_NAMES = ("Operation", "WorkerIdentifier", "ShardId")


@dataclass(frozen=True)
class MetricPoint:
    """One metric of one document: every value it carried, with the document's dimensions."""

    timestamp_millis: int
    namespace: str
    name: str
    unit: str
    values: tuple[float, ...]
    operation: str | None
    worker: str | None
    shard_id: str | None
    dimension_sets: tuple[tuple[str, ...], ...]


def is_emf(document: Mapping[str, Any]) -> bool:
    aws = document.get("_aws")
    return isinstance(aws, Mapping) and "CloudWatchMetrics" in aws and "Timestamp" in aws


def points_of(document: Mapping[str, Any]) -> list[MetricPoint]:
    """The metric points of one EMF document (values may be a number or a list of numbers)."""
    aws = document["_aws"]
    points: list[MetricPoint] = []
    for directive in aws["CloudWatchMetrics"]:
        sets = tuple(tuple(s) for s in directive.get("Dimensions", []))
        for metric in directive.get("Metrics", []):
            raw = document.get(metric["Name"])
            if raw is None:
                continue  # a directive naming a value the document lacks: CloudWatch skips it too
            values = tuple(float(v) for v in raw) if isinstance(raw, list) else (float(raw),)
            points.append(
                MetricPoint(
                    timestamp_millis=int(aws["Timestamp"]),
                    namespace=str(directive.get("Namespace", "")),
                    name=str(metric["Name"]),
                    unit=str(metric.get("Unit", "None")),
                    values=values,
                    operation=document.get("Operation"),
                    worker=document.get("WorkerIdentifier"),
                    shard_id=document.get("ShardId"),
                    dimension_sets=sets,
                )
            )
    return points


def points_of_all(documents: Iterable[Mapping[str, Any]]) -> list[MetricPoint]:
    return [point for doc in documents if is_emf(doc) for point in points_of(doc)]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """EMF documents from a JSON Lines file; other JSON lines (plain logs) are skipped."""
    source = Path(path)
    try:
        lines = source.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise DashboardError(f"cannot read metrics file {source}: {exc}") from exc
    documents: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            parsed = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DashboardError(
                f"{source}:{number}: not JSON ({exc.msg}); expected one EMF document per line"
            ) from exc
        if isinstance(parsed, dict) and is_emf(parsed):
            documents.append(parsed)
    return documents


def _log_events(logs_client: Any, log_group: str, start_millis: int | None) -> Iterator[dict[str, Any]]:
    kwargs: dict[str, Any] = {"logGroupName": log_group}
    if start_millis is not None:
        kwargs["startTime"] = start_millis
    paginator = logs_client.get_paginator("filter_log_events")
    for page in paginator.paginate(**kwargs):
        yield from page.get("events", [])


def read_log_group(logs_client: Any, log_group: str, start_millis: int | None = None) -> list[dict[str, Any]]:
    """EMF documents stored in ``log_group`` (every stream), oldest first."""
    documents: list[dict[str, Any]] = []
    try:
        for event in _log_events(logs_client, log_group, start_millis):
            try:
                parsed = json.loads(event["message"])
            except (json.JSONDecodeError, KeyError):
                continue
            if isinstance(parsed, dict) and is_emf(parsed):
                documents.append(parsed)
    except ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            raise DashboardError(
                f"log group {log_group} does not exist: has a worker with metrics.destination=logs run?"
            ) from exc
        raise DashboardError(f"cannot read {log_group}: {exc}") from exc
    except BotoCoreError as exc:
        raise DashboardError(f"cannot reach CloudWatch Logs to read {log_group}: {exc}") from exc
    documents.sort(key=lambda d: int(d["_aws"]["Timestamp"]))
    return documents


def read_log_messages(logs_client: Any, log_group: str) -> list[dict[str, Any]]:
    """JSON log lines of a log group (for tests and troubleshooting), oldest first."""
    lines: list[dict[str, Any]] = []
    for event in _log_events(logs_client, log_group, None):
        try:
            parsed = json.loads(event["message"])
        except (json.JSONDecodeError, KeyError):
            continue
        if isinstance(parsed, dict):
            lines.append(parsed)
    return lines
