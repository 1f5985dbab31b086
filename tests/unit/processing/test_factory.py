"""Start-up validation: every bad processing setting fails before any lease, naming what to fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from consumer.processing import (
    InMemoryCheckpointer,
    ProcessingConfigError,
    ProcessRecordsInput,
)
from consumer.processing.function_processor import FunctionProcessor
from consumer.records import ShardInfo
from consumer.runtime.processors import ProcessingClients, build_processor_factory
from ground.clock import FakeClock
from ground.settings import Settings
from tests.unit.processing import user_processors
from tests.unit.processing.helpers import SHARD, records

MODULE = "tests.unit.processing.user_processors"


def make_settings(worker: dict[str, Any] | None = None, **processing: Any) -> Settings:
    return Settings.model_validate(
        {
            "application_name": "orders-consumer",
            "table": {"name": "orders", "partition_key": {"name": "pk"}},
            "worker": worker or {},
            "processing": processing,
        }
    )


@pytest.mark.parametrize(
    ("processing", "message"),
    [
        ({"processor": "changelogg"}, "is not a built-in (changelog, dynamodb_replica)"),
        ({"processor": "no_such_module_xyz:handle"}, "module no_such_module_xyz does not import"),
        ({"processor": f"{MODULE}:missing"}, "has no missing"),
        ({"processor": f"{MODULE}:NotAProcessor"}, "class lacks initialize"),
        ({"processor": f"{MODULE}:Indexer"}, "cannot be created with processing.options"),
        ({"processor": f"{MODULE}:handle", "options": {"a": 1}}, "cannot be passed to the function"),
        ({"processor": "dynamodb_replica"}, "processing.options.table"),
        ({"processor": "changelog", "options": {"destination": "s3://bucket/x"}}, "needs an S3 client"),
        ({"processor": "changelog", "options": {"dest": "x"}}, "unknown dest"),
        ({"processor": "changelog", "options": {"format": "csv"}}, "use jsonl or parquet"),
        (
            {"retry": {"non_retryable_exceptions": ["builtins.NoSuchError"]}},
            "has no exception class NoSuchError",
        ),
        ({"dead_letter": {"type": "sqs", "uri": "not-a-url"}}, "type sqs needs a queue URL"),
        ({"dead_letter": {"type": "s3", "uri": "s3://b/p"}}, "needs an S3 client"),
        ({"batching": {"max_window_millis": 500}}, "call_process_records_even_for_empty_record_list"),
    ],
)
def test_bad_settings_fail_at_start_up(processing: dict[str, Any], message: str, tmp_path: Path) -> None:
    processing.setdefault("options", {"destination": str(tmp_path)} if "processor" not in processing else {})
    with pytest.raises(ProcessingConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build_processor_factory(make_settings(**processing), clock=FakeClock())


def test_class_form_is_created_per_shard_with_options() -> None:
    factory = build_processor_factory(
        make_settings(processor=f"{MODULE}:CheckpointEveryBatch", options={"label": "y"})
    )
    first, second = factory(ShardInfo("a")), factory(ShardInfo("b"))
    assert isinstance(first, user_processors.CheckpointEveryBatch) and first is not second
    assert first.label == "y"


@pytest.mark.parametrize(("name", "options"), [("handle", {}), ("Indexer", {"prefix": "p"})])
def test_function_forms_are_wrapped_with_the_policy(name: str, options: dict[str, Any]) -> None:
    user_processors.handled.clear()
    factory = build_processor_factory(make_settings(processor=f"{MODULE}:{name}", options=options))
    processor = factory(ShardInfo(SHARD))
    assert isinstance(processor, FunctionProcessor)
    checkpointer = InMemoryCheckpointer(SHARD)
    batch = records(1, 3)
    checkpointer.delivered(batch[-1].sequence_number)
    processor.process_records(ProcessRecordsInput(batch, checkpointer, 0, ShardInfo(SHARD)))
    assert user_processors.handled == [1, 2, 3]
    assert checkpointer.last_checkpoint == batch[-1].sequence_number


def test_changelog_defaults_to_the_pipeline_location_and_takes_non_retryable_classes(tmp_path: Path) -> None:
    settings = make_settings(
        processor="changelog",
        options={"destination": str(tmp_path)},
        retry={"non_retryable_exceptions": [f"{MODULE}.CustomTimeoutError", "builtins:KeyError"]},
        dead_letter={"type": "local", "uri": str(tmp_path / "dead")},
        worker=None,
    )
    assert build_processor_factory(settings, clients=ProcessingClients())(ShardInfo(SHARD)) is not None
    default = build_processor_factory(make_settings(processor="changelog"))
    assert default(ShardInfo(SHARD)) is not None
