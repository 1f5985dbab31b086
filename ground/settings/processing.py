"""What the fleet does with records: the processor, its failure policy (retries, dead letter),
filters and batching across polls. Read by consumer/processing/factory.py at start-up.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, model_validator

from ground.settings.base import SettingsModel, take_renamed_keys

# The defaults of settings that code wiring a processor by hand (consumer.processing.factory) also
# takes as its own defaults: one value each, whichever way a processor is built.
DEFAULT_BATCH_SIZE = 1000
DEFAULT_MAX_WINDOW_STATE_BYTES = 262_144


class RetrySettings(SettingsModel):
    max_retry_attempts: int = Field(
        -1, ge=-1, description="-1 retries until an operator acts (never loses a record)."
    )
    max_record_age_seconds: int = Field(-1, ge=-1, description="-1: no age limit.")
    base_backoff_millis: int = Field(200, ge=1, description="First retry delay (exponential, with jitter).")
    max_backoff_millis: int = Field(30_000, ge=1, description="Longest retry delay.")
    bisect_on_error: bool = Field(True, description="Split a failing batch to isolate a poison record.")
    non_retryable_exceptions: list[str] = Field(
        default_factory=list, description="Exception classes (import paths) sent straight to the dead letter."
    )


class DeadLetterSettings(SettingsModel):
    type: Literal["none", "local", "s3", "sqs"] = Field(
        "none", description="Where exhausted records go; none means retries never stop."
    )
    uri: str | None = Field(None, description="Directory, s3://bucket/prefix or SQS queue URL.")

    @model_validator(mode="after")
    def _needs_uri(self) -> DeadLetterSettings:
        if self.type != "none" and not self.uri:
            raise ValueError(f"dead_letter.type {self.type} needs dead_letter.uri")
        return self


class FilterSettings(SettingsModel):
    event_names: list[Literal["INSERT", "MODIFY", "REMOVE"]] = Field(
        default_factory=list, description="Keep only these event names (empty: all)."
    )
    key_equals: dict[str, Any] = Field(
        default_factory=dict, description="Keep records whose keys equal these."
    )
    new_image_equals: dict[str, Any] = Field(
        default_factory=dict, description="Keep records whose new image has these attribute values."
    )


class BatchingSettings(SettingsModel):
    """Buffering across polls: the pair Lambda calls BatchSize and MaximumBatchingWindowInSeconds.

    ``batch_size``, not ``max_records``: that is ``worker.max_records``, the GetRecords Limit, a
    different setting. ``processing.batching.max_records`` is still read as ``batch_size``, with a
    warning that names the new key, for one release.
    """

    batch_size: int = Field(
        DEFAULT_BATCH_SIZE,
        ge=1,
        description=(
            "Records per handler call at most; a shard's buffer is flushed when it holds this many."
        ),
    )
    max_window_millis: int = Field(0, ge=0, le=300_000, description="Or after this long (0: every poll).")

    @model_validator(mode="before")
    @classmethod
    def _old_names(cls, data: Any) -> Any:
        return take_renamed_keys(data, "processing.batching", {"max_records": "batch_size"})


class ProcessingSettings(SettingsModel):
    processor: str = Field(
        "changelog",
        description=(
            "Built-in sink (changelog, dynamodb_replica), a user processor 'package.module:Name', or an "
            "AWS Lambda handler 'lambda:module.function'."
        ),
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Options of this processor; a file or variable that changes processor starts from none."
        ),
    )
    import_paths: list[str] = Field(
        default_factory=lambda: ["."],
        description=(
            "Directories user processors are imported from, ahead of installed packages "
            "(relative ones: from the working directory)."
        ),
    )
    retry: RetrySettings = Field(default_factory=RetrySettings)
    dead_letter: DeadLetterSettings = Field(default_factory=DeadLetterSettings)
    filter: FilterSettings = Field(default_factory=FilterSettings)
    batching: BatchingSettings = Field(default_factory=BatchingSettings)
    parallelization_factor: int = Field(
        1,
        ge=1,
        le=10,
        description=(
            "Lanes per shard run at once (function form and built-in sinks): records are spread by "
            "a hash of their keys, one item's records stay in order in one lane; Lambda's "
            "ParallelizationFactor. 1: one batch at a time."
        ),
    )
    tumbling_window_seconds: int = Field(
        0,
        ge=0,
        le=900,
        description=(
            "Tumbling windows (function form): the handler gets the window's state with each batch "
            "and returns the new one; it is saved with every checkpoint. 0: off."
        ),
    )
    max_window_state_bytes: int = Field(
        DEFAULT_MAX_WINDOW_STATE_BYTES,
        ge=1024,
        le=350_000,
        description="Largest window state (JSON) a handler may return; bigger fails the batch.",
    )
