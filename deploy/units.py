"""The systemd units an instance runs, rendered from the boot plan and the layout.

``consumer-worker@.service`` runs one ``consumer run`` per instance number; ``%i`` and ``%H`` are
systemd's specifiers (instance number, host name), substituted by systemd on an instance and by the
tests' unit runner on a developer's machine. ``consumer-watchdog.service`` runs
:mod:`deploy.watchdog` with the virtualenv's python.
"""

from __future__ import annotations

import shlex

from deploy.plan import STREAMS_ENDPOINT_VARIABLE, WATCHDOG_UNIT, WORKER_UNIT, BootPlan, Layout


def worker_command(plan: BootPlan, layout: Layout) -> str:
    return (
        f"{layout.venv_dir}/bin/consumer run --env {shlex.quote(plan.env)} --config-dir {layout.config_dir} "
        f"--worker-name %H-%i --heartbeat-file {layout.health_dir}/worker-%i"
    )


def worker_unit(plan: BootPlan, layout: Layout) -> str:
    """The template unit ``consumer-worker@.service`` (one instance per worker process)."""
    streams = (
        [f"Environment={STREAMS_ENDPOINT_VARIABLE}={plan.streams_endpoint_url}"]
        if plan.streams_endpoint_url
        else []
    )
    return "\n".join(
        [
            "[Unit]",
            f"Description=DynamoDB stream consumer worker %i ({plan.env})",
            "After=network-online.target amazon-cloudwatch-agent.service",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            "User=consumer",
            f"WorkingDirectory={layout.source_dir}",
            f"Environment=AWS_DEFAULT_REGION={plan.region}",
            *streams,
            f"ExecStart={worker_command(plan, layout)}",
            "Restart=on-failure",
            "RestartSec=5",
            # SIGTERM makes the worker checkpoint and release its leases (graceful hand-off).
            "KillSignal=SIGTERM",
            f"TimeoutStopSec={plan.stop_timeout_seconds}",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def watchdog_unit(plan: BootPlan, layout: Layout) -> str:
    """The watchdog: lifecycle hand-off on termination, Unhealthy when the workers are not."""
    return "\n".join(
        [
            "[Unit]",
            "Description=Consumer watchdog: release leases on termination, report unhealthy workers",
            f"After={' '.join(f'{name}.service' for name in plan.unit_names())}",
            "",
            "[Service]",
            "Type=simple",
            f"WorkingDirectory={layout.source_dir}",
            f"Environment=AWS_DEFAULT_REGION={plan.region}",
            f"ExecStart={layout.venv_dir}/bin/python -m deploy.watchdog --plan {layout.plan_file} "
            f"--root {layout.root}",
            "Restart=always",
            "RestartSec=5",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def unit_files(plan: BootPlan, layout: Layout) -> dict[str, str]:
    """File name (in the unit directory) -> content."""
    return {
        f"{WORKER_UNIT}@.service": worker_unit(plan, layout),
        f"{WATCHDOG_UNIT}.service": watchdog_unit(plan, layout),
    }
