"""The boot plan (what the stack tells an instance) and the file layout under a root prefix.

The stack renders the plan into the user data as JSON: values from the environment's settings
(process count, stop timeout, agent configuration) and values only the deployed stack knows (its
name, the group's logical id for the signal, the streams endpoint). Every path the bootstrap,
the units and the watchdog use comes from :class:`Layout`, so a test runs the same code under a
temporary directory that an instance runs under ``/``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

WORKER_UNIT = "consumer-worker"
WATCHDOG_UNIT = "consumer-watchdog"
# botocore's endpoint variable for the ``dynamodbstreams`` client (see infra/fleet.py).
STREAMS_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"


@dataclass(frozen=True)
class BootPlan:
    """Everything the bootstrap needs beyond the asset; JSON-serializable by construction."""

    env: str
    region: str
    worker_processes: int
    stop_timeout_seconds: int
    agent_config: dict[str, Any]
    stack_name: str
    signal_resource: str
    # Empty in the template (CloudFormation names the group, anew at each replacing update): the
    # user data asks Auto Scaling at boot and the bootstrap writes it into the plan it keeps.
    group_name: str
    lifecycle_hook_name: str
    # Boot gives up (and signals FAILURE) when the workers are not all healthy by then.
    health_timeout_seconds: int = 600
    # A worker whose last lease-taking round is older than this is not healthy.
    heartbeat_max_age_seconds: int = 120
    # The watchdog calls the instance unhealthy after this many worker restarts within the window.
    crash_loop_restarts: int = 5
    crash_loop_window_seconds: int = 300
    streams_endpoint_url: str | None = None
    # The watchdog reads the workers table to tell a fleet-wide failure from this instance's own: a
    # worker of another instance is fine when its heartbeat row is younger than this (failover +
    # skew) and the last lease-taking round it had succeed (the row's ``leaseRoundOkAt``) younger
    # than ``heartbeat_max_age_seconds``. It also reads one item of the leases table: a table that
    # refuses the watchdog too is a dependency failing, not this instance.
    workers_table: str | None = None
    peer_horizon_seconds: float = 10.5
    leases_table: str | None = None

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BootPlan:
        return cls(**json.loads(text))

    def unit_names(self) -> list[str]:
        return [f"{WORKER_UNIT}@{i}" for i in range(1, self.worker_processes + 1)]


@dataclass(frozen=True)
class Layout:
    """Paths on the instance, under ``root`` (``/`` on an instance, a temporary directory in tests)."""

    root: Path = Path("/")

    def at(self, absolute: str) -> Path:
        return self.root / absolute.lstrip("/")

    @property
    def install_root(self) -> Path:
        return self.at("/opt/consumer")

    @property
    def source_dir(self) -> Path:
        """The unpacked asset: the units' working directory (processors/ and config/ live here)."""
        return self.install_root / "src"

    @property
    def venv_dir(self) -> Path:
        return self.install_root / "venv"

    @property
    def config_dir(self) -> Path:
        return self.source_dir / "config"

    @property
    def wheelhouse(self) -> Path:
        return self.source_dir / "wheelhouse"

    @property
    def health_dir(self) -> Path:
        """One heartbeat file per worker unit (``worker-<i>``), written by ``consumer run``."""
        return self.install_root / "health"

    @property
    def plan_file(self) -> Path:
        return self.install_root / "boot.json"

    @property
    def unit_dir(self) -> Path:
        return self.at("/etc/systemd/system")

    @property
    def agent_config_file(self) -> Path:
        return self.at("/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json")

    def heartbeat(self, instance: str) -> Path:
        return self.health_dir / f"worker-{instance}"
