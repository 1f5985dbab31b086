"""Settings for every part of the product, read from ``config/base.yaml`` + ``config/<env>.yaml``.

One model serves the workers, the CDK stacks, the emulator and the Spark pipeline, so a key in
``config/*.yaml`` means one thing everywhere. Worker properties keep the Java KCL's names (in
snake_case) and its defaults, so a team moving from KCL can carry its tuning over unchanged.

Layering, lowest to highest precedence:

1. ``config/base.yaml``
2. ``config/<env>.yaml``
3. environment variables ``CONSUMER_<SECTION>__<KEY>=value`` (``__`` separates nesting levels,
   values are parsed as YAML scalars), e.g. ``CONSUMER_WORKER__FAILOVER_TIME_MILLIS=20000``.

Every error names the file (or variable) the offending value came from, the key path, what is
allowed, and the nearest valid key when a key is misspelt.

One module per part it configures; this one holds the root :class:`Settings` and re-exports every
public name, so ``from ground.settings import X`` works whatever module defines ``X``:

- :mod:`~ground.settings.base`: the strict model base, :class:`ConfigError`, error wording, renamed keys
- :mod:`~ground.settings.table`: the source table
- :mod:`~ground.settings.source`: which stream is read (the table's, or a Kinesis data stream)
- :mod:`~ground.settings.worker`: lease-worker properties (KCL's)
- :mod:`~ground.settings.processing`: processor, retries, dead letter, filters, batching
- :mod:`~ground.settings.streams`: several streams in one fleet (``streams:``; an entry's ``source:``: Kinesis)
- :mod:`~ground.settings.telemetry`: metrics and logs
- :mod:`~ground.settings.fleet`: instances, network, scaling alarms (the infra)
- :mod:`~ground.settings.local`: the emulator and the demo's load generator
- :mod:`~ground.settings.pipeline`: the Spark pipeline and EMR Serverless
- :mod:`~ground.settings.loading`: reading and merging config/*.yaml and ``CONSUMER_*`` variables
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import Field, PrivateAttr, field_validator, model_validator

from ground.settings.base import (
    ConfigError,
    Problem,
    RenamedKeyWarning,
    SettingsModel,
)
from ground.settings.fleet import STREAM_RETENTION_HOURS, FleetSettings, ScalingSettings, VpcAttributes
from ground.settings.loading import (
    CONFIG_DIR_VARIABLE,
    DEFAULT_CONFIG_DIR,
    ENV_PREFIX,
    ENVIRONMENTS,
    available_environments,
    config_dir,
    load_layers,
    loaded_sources,
)
from ground.settings.local import EmulatorFaults, EmulatorSettings, LoadSettings, is_loopback_endpoint
from ground.settings.locations import LOCATION_KEYS, PLACEHOLDERS, fill_locations, unfilled_locations
from ground.settings.pipeline import PipelineSettings, emr_location_problems
from ground.settings.processing import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_WINDOW_STATE_BYTES,
    BatchingSettings,
    DeadLetterSettings,
    FilterSettings,
    ProcessingSettings,
    RetrySettings,
)
from ground.settings.source import KINESIS_WITH_STREAMS, SourceSettings, refuse_records_over_limits
from ground.settings.streams import StreamSettings, expand_streams, stream_problems
from ground.settings.table import KeyAttribute, TableSettings
from ground.settings.telemetry import LOG_RETENTION_DAYS, LogsSettings, MetricsSettings
from ground.settings.worker import UNBOUNDED, WorkerSettings

__all__ = [
    "CONFIG_DIR_VARIABLE",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_CONFIG_DIR",
    "DEFAULT_MAX_WINDOW_STATE_BYTES",
    "ENVIRONMENTS",
    "ENV_PREFIX",
    "LOCATION_KEYS",
    "LOG_RETENTION_DAYS",
    "PLACEHOLDERS",
    "STREAM_RETENTION_HOURS",
    "UNBOUNDED",
    "BatchingSettings",
    "ConfigError",
    "DeadLetterSettings",
    "EmulatorFaults",
    "EmulatorSettings",
    "FilterSettings",
    "FleetSettings",
    "KeyAttribute",
    "LoadSettings",
    "LogsSettings",
    "MetricsSettings",
    "PipelineSettings",
    "Problem",
    "ProcessingSettings",
    "RenamedKeyWarning",
    "RetrySettings",
    "ScalingSettings",
    "Settings",
    "SettingsModel",
    "SourceSettings",
    "StreamSettings",
    "TableSettings",
    "VpcAttributes",
    "WorkerSettings",
    "available_environments",
    "config_dir",
    "is_loopback_endpoint",
    "json_schema",
    "load_settings",
    "loaded_sources",
]


class Settings(SettingsModel):
    """Everything one environment needs. ``env`` is filled in by the loader."""

    env: str = Field("local", description="Environment name (set by the loader).")
    application_name: str = Field(
        pattern=r"^[A-Za-z0-9_.-]{3,200}$",
        description="Names the leases table, the metric namespace and the log groups.",
    )
    region: str = Field(
        "us-east-1",
        pattern=r"^[a-z]{2}(-[a-z]+)+-\d{1,2}$",
        description=(
            "AWS region (e.g. eu-west-1); an environment deployed to AWS must set it (the default is "
            "not a choice). Fills {region} in the S3 locations."
        ),
    )
    account: str | None = Field(
        None,
        pattern=r"^\d{12}$",
        description=(
            "AWS account (12 digits) the CDK stack deploys to; required by every environment without "
            "endpoint_url, so a deploy with another account's credentials is refused. Fills {account} "
            "in the S3 locations (processing.options.destination, processing.dead_letter.uri, "
            "pipeline.*_uri): bucket names are global."
        ),
    )
    scope_names_by_env: bool = Field(
        False,
        description=(
            "Derive the leases and workers tables, log groups and metric namespace from "
            "<application_name>-<env>, so environments can share an account (names set explicitly win)."
        ),
    )
    endpoint_url: str | None = Field(None, description="Endpoint of the local emulator (local only).")
    table: TableSettings
    source: SourceSettings = Field(default_factory=SourceSettings, description=SourceSettings.__doc__)
    worker: WorkerSettings = Field(default_factory=WorkerSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    logs: LogsSettings = Field(default_factory=LogsSettings)
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    scaling: ScalingSettings = Field(default_factory=ScalingSettings)
    processing: ProcessingSettings = Field(default_factory=ProcessingSettings)
    streams: tuple[StreamSettings, ...] | None = Field(
        None,
        description=(
            "Several tables' streams in one fleet: each entry a table: and a processing: layered over "
            "the top-level ones (docs/settings.md#several-streams). Empty: the one table: above."
        ),
    )
    emulator: EmulatorSettings = Field(default_factory=EmulatorSettings)
    load: LoadSettings = Field(default_factory=LoadSettings)
    pipeline: PipelineSettings = Field(default_factory=PipelineSettings)
    # Set by load_settings: what the loader noticed (old key names) that does not make the
    # configuration invalid; listed by warnings() so that `consumer config validate` shows it.
    _notices: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _fill_locations(cls, data: Any) -> Any:
        """``{account}`` and ``{region}`` in the S3 locations (bucket names are global); each
        ``streams:`` entry layered over the top-level table and processing first."""
        region = str(cls.model_fields["region"].default)
        return fill_locations(expand_streams(data, region), region)

    @field_validator("account", mode="before")
    @classmethod
    def _account_as_text(cls, value: object) -> object:
        # YAML reads an unquoted account as a number (and drops its leading zeros).
        if isinstance(value, int) and not isinstance(value, bool):
            text = str(value)
            if len(text) != 12:
                raise ValueError(f'{value} is not 12 digits: quote the account, e.g. account: "012345678901"')
            return text
        return value

    @model_validator(mode="after")
    def _sections_agree(self) -> Settings:
        """EMR Serverless has no local disk that outlives a job: every pipeline location must be on
        S3, and the change log it reads must be the one the workers write. A reload hands the
        table's items as plain batches: a window's state cannot take them in. worker.max_records
        is every stream's GetRecords Limit."""
        sources = [view.source for view in self.per_stream()]
        refuse_records_over_limits(self.worker.max_records, sources, self.several_streams)
        problems = emr_location_problems(self.pipeline, self.processing.options)
        if self.worker.on_trimmed == "reload" and any(
            v.processing.tumbling_window_seconds for v in self.per_stream()
        ):
            problems.append("worker.on_trimmed: reload cannot go with processing.tumbling_window_seconds")
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @model_validator(mode="after")
    def _streams_apart(self) -> Settings:
        if self.streams is not None and self.source.is_kinesis:
            raise ValueError(KINESIS_WITH_STREAMS)
        problems = [] if self.streams is None else stream_problems(self.streams, self.pipeline.changelog_uri)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @property
    def several_streams(self) -> bool:
        """``streams:`` is given: lease keys are namespaced per stream, metrics carry a Stream
        dimension (even for a list of one: adding a second stream later renames no lease)."""
        return self.streams is not None

    def table_keys(self) -> tuple[str, ...]:
        """Where each stream's table is configured, in :meth:`per_stream`'s order."""
        if self.streams is None:
            return ("table",)
        return tuple(f"streams.{index}.table" for index in range(len(self.streams)))

    def per_stream(self) -> tuple[Settings, ...]:
        """One view per stream, each with that stream's ``table``, ``processing`` and ``source`` (and
        no ``streams``): what builds a stream's processor and resolves its table or Kinesis stream.
        Without ``streams:``, this environment itself."""
        if self.streams is None:
            return (self,)
        views = ({"table": s.table, "processing": s.processing, "source": s.source} for s in self.streams)
        return tuple(self.model_copy(update={**view, "streams": None}) for view in views)

    @property
    def name_prefix(self) -> str:
        """What derived names start with: the application name, plus ``-<env>`` when scoped."""
        if self.scope_names_by_env:
            return f"{self.application_name}-{self.env}"
        return self.application_name

    @property
    def leases_table_name(self) -> str:
        return self.worker.lease_table_name or self.name_prefix

    @property
    def workers_table_name(self) -> str:
        """Where heartbeats live, beside the leases table (which then holds leases only)."""
        return self.worker.worker_table_name or f"{self.leases_table_name}-workers"

    @property
    def window_state_table_name(self) -> str:
        """Where tumbling windows keep their state (processing.tumbling_window_seconds > 0): beside
        the leases table, never in it (every lease taker's scan would read the states)."""
        return f"{self.leases_table_name}-window-state"

    @property
    def metrics_namespace(self) -> str:
        return self.metrics.namespace or self.name_prefix

    @property
    def worker_log_group(self) -> str:
        return self.logs.worker_log_group or f"/{self.name_prefix}/lease-worker"

    @property
    def application_log_group(self) -> str:
        return self.logs.application_log_group or f"/{self.name_prefix}/application"

    @property
    def metrics_log_group(self) -> str:
        return self.metrics.log_group or f"/{self.name_prefix}/metrics"

    def unfilled_locations(self) -> list[str]:
        """Locations that still name ``{account}`` or ``{region}``: the account is not set."""
        values: dict[str, str | None] = {}
        for path in LOCATION_KEYS:
            value: Any = self
            for part in path:
                value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
            values[".".join(path)] = value if isinstance(value, str) else None
        return unfilled_locations(values)

    @property
    def total_worker_processes(self) -> int:
        return self.fleet.desired_instances * self.fleet.worker_processes_per_instance

    @property
    def on_emulator(self) -> bool:
        """The environment runs against the local emulator (its endpoint_url is on this machine)."""
        return is_loopback_endpoint(self.endpoint_url)

    def partitions(self) -> tuple[int, str]:
        """N, the partitions (each writing one open shard), and where it came from.

        On the emulator N is what the emulator runs (``emulator.partitions``), whatever the table's
        capacity figures would estimate for AWS; elsewhere it is the table's estimate or
        ``table.partitions``.
        """
        if self.source.is_kinesis:
            return self.source.shard_count, "source.shard_count (the Kinesis stream's open shards)"
        if self.streams is not None:  # the fleet's N: every stream's open shards, in one leases table
            views = self.per_stream()
            counts = [view.partitions()[0] for view in views]
            return sum(counts), f"sum over streams: of each table's N ({' + '.join(map(str, counts))})"
        if self.on_emulator:
            return self.emulator.partitions, "emulator.partitions (the emulator's partition count)"
        return self.table.expected_partitions()

    def derived(self) -> dict[str, object]:
        """Keys left empty in config/*.yaml whose value the product derives, with that value
        (``consumer config validate --show`` prints these instead of null)."""
        worker = self.worker
        candidates: dict[str, tuple[object, object]] = {
            "table.partitions": (self.table.partitions, self.per_stream()[0].partitions()[0]),
            "worker.lease_renewal_interval_millis": (
                worker.lease_renewal_interval_millis,
                worker.renewal_interval_millis,
            ),
            "worker.lease_taker_interval_millis": (
                worker.lease_taker_interval_millis,
                worker.taker_interval_millis,
            ),
            "worker.lease_full_scan_interval_millis": (
                worker.lease_full_scan_interval_millis,
                worker.full_scan_interval_millis,
            ),
            "worker.lease_table_name": (worker.lease_table_name, self.leases_table_name),
            "worker.worker_table_name": (worker.worker_table_name, self.workers_table_name),
            "metrics.namespace": (self.metrics.namespace, self.metrics_namespace),
            "metrics.log_group": (self.metrics.log_group, self.metrics_log_group),
            "logs.worker_log_group": (self.logs.worker_log_group, self.worker_log_group),
            "logs.application_log_group": (self.logs.application_log_group, self.application_log_group),
            "pipeline.emr_work_uri": (self.pipeline.emr_work_uri, self.pipeline.emr_work_location),
        }
        return {
            path: value for path, (given, value) in candidates.items() if given is None and value is not None
        }

    def account_needed(self) -> str | None:
        """What to do while locations still name ``{account}``: the one value a shipped deployable
        environment leaves to its user. None once the account is set."""
        unfilled = self.unfilled_locations()
        if not unfilled:
            return None
        return (
            f"{', '.join(unfilled)} name {{account}}: set account (the 12-digit AWS account) to fill "
            "them in; until then these locations are no bucket"
        )

    def warnings(self, *, account: bool = True) -> list[str]:
        """Cross-field advice that does not make the configuration invalid, and what the loader
        noticed (a key under its old name, with the file or variable that used it). ``account``:
        include :meth:`account_needed` (``consumer plan`` shows it as a step before deploying)."""
        found: list[str] = []
        n, _ = self.partitions()
        emulated = self.emulator.partitions
        for key, view in zip(self.table_keys(), self.per_stream(), strict=True):
            if self.on_emulator and view.table.partitions not in (None, emulated):
                found.append(
                    f"{key}.partitions is {view.table.partitions} but the emulator runs emulator.partitions = "
                    f"{emulated}: on the emulator N is the emulator's (make them equal, or drop {key}.partitions)"
                )
        capacity = self.worker.max_leases_for_worker * self.total_worker_processes
        if capacity < n:
            found.append(
                f"worker.max_leases_for_worker x worker processes = {capacity} < N = {n}: the fleet cannot "
                "hold every active shard and will fall behind (each of M workers must be able to hold N/M)"
            )
        if self.endpoint_url is None and self.env == "local":
            found.append("env local without endpoint_url talks to real AWS")
        needed = self.account_needed()
        if account and needed is not None:
            found.append(needed)
        found.extend(self._notices)
        return found


def load_settings(
    env: str,
    directory: str | Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Load ``base.yaml`` + ``<env>.yaml`` + environment overrides, or raise :class:`ConfigError`."""
    settings, notices = load_layers(Settings, env, directory, environ)
    settings._notices = tuple(notices)
    return settings


def json_schema() -> dict[str, Any]:
    """JSON schema of config/*.yaml, for editor completion (every key optional in env files)."""
    return Settings.model_json_schema()
