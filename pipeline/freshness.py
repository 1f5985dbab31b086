"""The freshness ``follow`` reports after each run, as a CloudWatch metric the stacks alarm on.

``LakeFreshnessSeconds`` (dimension ``Table``), in the application's metric namespace: how old the
oldest change a run merged was when its commit made it visible to readers, and 0 when a run found
nothing waiting. The alarm (infra/pipeline_resources.py) fires when its maximum stays above
``pipeline.freshness_seconds``, and when it stops arriving (``follow`` is not running).

Sent with ``PutMetricData`` from the driver: an EMR Serverless job has no CloudWatch agent to take
embedded-metric-format logs, and one call per run is far below any limit. A failed call is said on
the progress and does not stop ``follow``: the alarm's missing data speaks for it.
"""

from __future__ import annotations

from typing import Any

from ground.settings import Settings
from pipeline.log_lines import Progress, quiet

METRIC = "LakeFreshnessSeconds"
DIMENSION = "Table"


class CloudWatchFreshness:
    """A :data:`pipeline.follow.Report` that puts one datapoint per run."""

    def __init__(self, settings: Settings, client: Any = None, progress: Progress = quiet) -> None:
        if client is None:
            import boto3

            client = boto3.client(
                "cloudwatch", region_name=settings.region, endpoint_url=settings.endpoint_url
            )
        self._client = client
        self._namespace = settings.metrics_namespace
        self._table = settings.table.name
        self._progress = progress

    def __call__(self, seconds: float) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self._client.put_metric_data(
                Namespace=self._namespace,
                MetricData=[
                    {
                        "MetricName": METRIC,
                        "Dimensions": [{"Name": DIMENSION, "Value": self._table}],
                        "Value": float(seconds),
                        "Unit": "Seconds",
                    }
                ],
            )
        except (BotoCoreError, ClientError) as exc:
            self._progress(f"[follow] could not send {METRIC} to CloudWatch: {exc}")
