"""What every history of one environment shares (its templates, settings, boot outcomes, alarms
and the cost table's promise), and what a history samples every minute for the checker."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from ground.settings import Settings
from simulation.fleet_ops.alarms import AlarmSpec, alarm_specs
from simulation.fleet_ops.boot_outcomes import BootOutcome, outcomes
from simulation.fleet_ops.cost import promised_totals
from simulation.fleet_ops.templates import Templates, load, settings_of


@dataclass(frozen=True)
class Environment:
    """What every history of one environment shares: its templates, settings and boot outcomes."""

    templates: Templates
    settings: Settings
    outcomes: dict[str | None, BootOutcome]
    alarms: list[AlarmSpec]
    totals: list[tuple[int, float]]

    @classmethod
    def load(cls, env: str = "prod") -> Environment:
        templates = load(env)
        settings = settings_of(env)
        prefix = f"{settings.application_name}-{settings.env}-"
        return cls(
            templates,
            settings,
            outcomes(settings, templates.plan),
            alarm_specs(templates, prefix),
            promised_totals(),
        )


@functools.cache
def environment() -> Environment:
    """The prod environment's templates and boot outcomes, loaded once per process."""
    return Environment.load("prod")


@dataclass
class Sample:
    at: float
    desired: int
    in_service: int
    load: float
    processed: float
    lag: float
    leases: int
    lost: float  # records trimmed unprocessed this minute
    backlog: float = 0.0  # records written and not processed yet
