"""The emulator's streams as the settings shape them: partitions, rollover and split cadence, trimming,
iterator expiry, the seed, and the faults (``emulator.*`` in config/<env>.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field

from emulator.faults import FaultSettings
from ground.settings import EmulatorSettings


@dataclass(frozen=True)
class EngineConfig:
    partitions: int = 4
    rollover_ms: int = 60_000
    split_every_ms: int | None = None
    trim_after_ms: int = 360_000
    iterator_expiry_ms: int = 60_000
    seed: int = 7
    unknown_record_fields: bool = False
    faults: FaultSettings = field(default_factory=FaultSettings)

    @classmethod
    def from_settings(cls, settings: EmulatorSettings) -> EngineConfig:
        f = settings.faults
        return cls(
            partitions=settings.partitions,
            rollover_ms=int(settings.rollover_seconds * 1000),
            split_every_ms=None
            if settings.split_every_seconds is None
            else int(settings.split_every_seconds * 1000),
            trim_after_ms=int(settings.trim_after_seconds * 1000),
            iterator_expiry_ms=int(settings.iterator_expiry_seconds * 1000),
            seed=settings.seed,
            unknown_record_fields=settings.unknown_record_fields,
            faults=FaultSettings(
                error_rate=f.error_rate,
                latency_millis=f.latency_millis,
                reads_per_shard_per_second=f.reads_per_shard_per_second,
                describe_stream_per_second=f.describe_stream_per_second,
                consistency_delay_millis=f.consistency_delay_millis,
                child_visibility_delay_millis=f.child_visibility_delay_millis,
            ),
        )
