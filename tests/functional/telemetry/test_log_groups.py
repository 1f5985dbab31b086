"""Both log groups read back from CloudWatch Logs (moto): routing, JSON fields, meaningful messages."""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace
from typing import Any

import pytest

from consumer.processing.gap import GapEvent
from consumer.records import ShardInfo
from consumer.telemetry import catalogue
from consumer.telemetry.catalogue import MeaningfulEvent
from consumer.telemetry.context import shard_context
from consumer.telemetry.logs import configure_logging
from ground.settings import Settings
from tools.dashboard.readback import read_log_messages


def _settings(endpoint: str, level: str = "INFO") -> Settings:
    return Settings.model_validate(
        {
            "application_name": f"logs-{uuid.uuid4().hex[:8]}",
            "endpoint_url": endpoint,
            "table": {"name": "orders", "partition_key": {"name": "pk"}},
            "logs": {"retention_days": 1, "level": level},
        }
    )


def test_each_meaningful_message_lands_in_the_worker_group_with_context(
    logs_client: Any, moto_endpoint: str
) -> None:
    settings = _settings(moto_endpoint, level="DEBUG")
    handle = configure_logging(settings, "worker-7", logs_client, console=None, send_interval_seconds=0.2)
    try:
        lifecycle = logging.getLogger("consumer.lifecycle")
        processing = logging.getLogger("consumer.processing")
        with shard_context("shardId-0001"):
            catalogue.log_lease_lost_shutdown(lifecycle, "shardId-0001", new_owner="worker-9")
            catalogue.log_checkpoint_refused(processing, "shardId-0001", "000123")

        def other_thread() -> None:
            with shard_context("shardId-0002"):
                catalogue.log_retries_exhausted(
                    processing, "shardId-0002", 3, 5, "var/dead-letter", first_sequence_number="1"
                )

        thread = threading.Thread(target=other_thread)
        thread.start()
        thread.join()
        catalogue.log_parent_not_closed(logging.getLogger("consumer.streams"), "shardId-0004", "shardId-0003")
        catalogue.log_trimmed_loss(lifecycle, "shardId-0005", "000999", "TrimmedDataAccessException", "fail")
        with shard_context("shardId-0006"):
            catalogue.log_shard_stalled(lifecycle, "shardId-0006", "a call for it has not returned", "stack")
        catalogue.log_leases_not_taken(logging.getLogger("consumer.leases"), ["shardId-0007"], 400_000)
        gap = GapEvent(ShardInfo("shardId-0008"), "gap", "000120", "000200", None, 1.0, "r-1", 2.0)
        catalogue.log_reload_started(lifecycle, "shardId-0008", gap, 10.0, "worker.reload_read_share")
        catalogue.log_reload_delivered(
            lifecycle,
            "shardId-0008",
            replace(gap, phase="reloaded", records_reloaded=29),
            pages=6,
            units=12.5,
            millis=900,
        )
        logging.getLogger("consumer.app").info("application says hello")
        logging.getLogger("my_processor").warning("user processor warns")
        logging.getLogger("botocore.endpoint").debug("botocore debug must not ship")
    finally:
        handle.close()

    worker = read_log_messages(logs_client, settings.worker_log_group)
    application = read_log_messages(logs_client, settings.application_log_group)

    events = {line.get("event"): line for line in worker}
    assert set(MeaningfulEvent) <= set(events)
    lost = events[MeaningfulEvent.LEASE_LOST_SHUTDOWN]
    assert (
        lost["level"] == "WARNING" and lost["worker_id"] == "worker-7" and lost["shard_id"] == "shardId-0001"
    )
    assert "LEASE_LOST (zombie)" in lost["message"] and lost["message"].startswith("[LEASE_LOST_SHUTDOWN]")
    assert (
        events[MeaningfulEvent.CHECKPOINT_REFUSED_LEASE_GONE]["message"].count("doesn't hold the lease") == 1
    )
    assert events[MeaningfulEvent.RETRIES_EXHAUSTED]["shard_id"] == "shardId-0002"
    assert events[MeaningfulEvent.RETRIES_EXHAUSTED]["level"] == "ERROR"
    assert events[MeaningfulEvent.PARENT_NOT_CLOSED]["level"] == "WARNING"
    assert events[MeaningfulEvent.RECORDS_TRIMMED_LOST]["level"] == "ERROR"
    assert events[MeaningfulEvent.SHARD_STALLED]["level"] == "ERROR"
    reloaded = events[MeaningfulEvent.GAP_RELOADED]
    assert (
        reloaded["level"] == "WARNING"
        and reloaded["records_reloaded"] == 29
        and reloaded["reload_id"] == "r-1"
    )
    assert events[MeaningfulEvent.GAP_RELOAD_STARTED]["first_readable"] == "000200"
    assert events[MeaningfulEvent.SHARD_STALLED]["shard_id"] == "shardId-0006"
    assert events[MeaningfulEvent.LEASES_NOT_TAKEN]["level"] == "ERROR"
    assert events[MeaningfulEvent.PARENT_NOT_CLOSED]["shard_id"] is None  # no context set: not invented
    assert {"timestamp", "level", "logger", "message", "worker_id", "shard_id"} <= set(lost)

    assert {line["logger"] for line in worker} <= {
        "consumer.leases",
        "consumer.lifecycle",
        "consumer.processing",
        "consumer.streams",
    }
    assert {line["message"] for line in application} >= {"application says hello", "user processor warns"}
    assert all(
        not line["logger"].startswith("consumer.") or line["logger"] == "consumer.app" for line in application
    )
    assert not any(line["logger"].startswith("botocore") for line in worker + application)


def test_noisy_loggers_stay_at_info_while_configured(logs_client: Any, moto_endpoint: str) -> None:
    handle = configure_logging(_settings(moto_endpoint, "DEBUG"), "w", logs_client, console=None)
    try:
        for name in ("botocore", "urllib3", "s3transfer", "boto3"):
            assert logging.getLogger(name).getEffectiveLevel() >= logging.INFO
        assert logging.getLogger().level == logging.DEBUG
    finally:
        handle.close()


class ThrottledLogs:
    """A Logs client whose PutLogEvents is always throttled; everything else is the real client."""

    def __init__(self, real: Any) -> None:
        self._real = real
        self.attempts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)

    def put_log_events(self, **kwargs: Any) -> Any:
        from botocore.exceptions import ClientError

        self.attempts += 1
        raise ClientError(
            {"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "PutLogEvents"
        )


def test_throttled_log_shipping_costs_a_warning_and_a_counter(
    logs_client: Any, moto_endpoint: str, caplog: pytest.LogCaptureFixture
) -> None:
    throttled = ThrottledLogs(logs_client)
    handle = configure_logging(_settings(moto_endpoint), "w-throttled", throttled, console=None)
    try:
        for i in range(50):
            logging.getLogger("consumer.leases").info("renewed %d", i)
        with caplog.at_level(logging.WARNING, logger="consumer.telemetry.transport"):
            handle.flush()
    finally:
        handle.close()
    assert throttled.attempts >= 1
    totals = handle.health.totals()
    assert totals.send_failures >= 1 and totals.dropped >= 50
    assert any("ThrottlingException" in r.getMessage() for r in caplog.records)
