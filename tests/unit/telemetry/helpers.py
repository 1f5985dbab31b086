"""Shared helpers for the telemetry tests: settings with chosen metrics options, EMF reading."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ground.settings import Settings


def settings_with(**metrics: Any) -> Settings:
    return Settings.model_validate(
        {
            "application_name": "telemetry-test",
            "table": {"name": "orders", "partition_key": {"name": "pk"}},
            "metrics": {"destination": "none", **metrics},
        }
    )


def metric_sums(documents: Iterable[Mapping[str, Any]], **dimensions: str) -> dict[str, float]:
    """Sum every metric value over the documents whose root properties match ``dimensions``."""
    sums: dict[str, float] = defaultdict(float)
    for doc in documents:
        if any(doc.get(k) != v for k, v in dimensions.items()):
            continue
        for directive in doc["_aws"]["CloudWatchMetrics"]:
            for metric in directive["Metrics"]:
                value = doc[metric["Name"]]
                sums[metric["Name"]] += sum(value) if isinstance(value, list) else value
    return dict(sums)


def units(documents: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    return {
        m["Name"]: m["Unit"]
        for doc in documents
        for directive in doc["_aws"]["CloudWatchMetrics"]
        for m in directive["Metrics"]
    }
