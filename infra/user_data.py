"""What an instance runs at boot, rendered as text (no CDK here, so it is testable on its own).

Boot installs the product from the CDK asset (this repository, zipped), the runtime packages at the
repository's own pins (``requirements.txt`` as a constraints file, so an instance runs exactly what
the tests ran), then starts ``worker_processes_per_instance`` systemd units of ``consumer run`` and
the CloudWatch agent with its EMF listener. A small watcher notices the Auto Scaling termination
lifecycle state and stops the units first: each worker gets SIGTERM, checkpoints and releases its
leases (a long-standing KCL complaint: it only lets leases expire), and only then is the instance let go.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from urllib.parse import urlsplit

from consumer.settings import Settings
from infra.errors import InfraConfigError

INSTALL_ROOT = "/opt/consumer"
SOURCE_DIR = f"{INSTALL_ROOT}/src"
VENV_DIR = f"{INSTALL_ROOT}/venv"
CONFIG_DIR = f"{SOURCE_DIR}/config"
UNIT_NAME = "consumer-worker"
WATCHER_NAME = "consumer-lifecycle"
# Imported by the worker at run time; pip resolves the rest under the repository's constraints.
RUNTIME_PACKAGES = ("boto3", "pydantic", "PyYAML", "orjson", "rich", "watchtower", "aws-embedded-metrics")
# Leave the hook this long after the units stopped to complete the lifecycle action itself.
_STOP_MARGIN_SECONDS = 15


@dataclass(frozen=True)
class BootParameters:
    """Values only known to the stack (asset location, names); tokens are fine here."""

    asset_url: str
    auto_scaling_group_name: str
    lifecycle_hook_name: str
    # https://<the interface endpoint's DNS name> when the VPC has one for DynamoDB Streams.
    streams_endpoint_url: str | None = None


# botocore's service-specific endpoint variable for the ``dynamodbstreams`` client (service id
# "DynamoDB Streams"): the interface endpoint of DynamoDB Streams has no private DNS name, so the
# workers are pointed at its own DNS name instead.
STREAMS_ENDPOINT_VARIABLE = "AWS_ENDPOINT_URL_DYNAMODB_STREAMS"


def stop_timeout_seconds(settings: Settings) -> int:
    """How long systemd waits for a worker to release its leases before SIGKILL."""
    return max(10, settings.fleet.lifecycle_hook_timeout_seconds - _STOP_MARGIN_SECONDS)


def worker_unit(settings: Settings, streams_endpoint_url: str | None = None) -> str:
    """The systemd template unit ``consumer-worker@.service`` (one instance per worker process)."""
    streams = (
        [f"Environment={STREAMS_ENDPOINT_VARIABLE}={streams_endpoint_url}"] if streams_endpoint_url else []
    )
    command = (
        f"{VENV_DIR}/bin/consumer run --env {shlex.quote(settings.env)} --config-dir {CONFIG_DIR} "
        "--worker-name %H-%i"
    )
    return "\n".join(
        [
            "[Unit]",
            f"Description=DynamoDB stream consumer worker %i ({settings.env})",
            "After=network-online.target amazon-cloudwatch-agent.service",
            "Wants=network-online.target",
            "",
            "[Service]",
            "Type=simple",
            "User=consumer",
            f"WorkingDirectory={SOURCE_DIR}",
            f"Environment=AWS_DEFAULT_REGION={settings.region}",
            *streams,
            f"ExecStart={command}",
            "Restart=on-failure",
            "RestartSec=5",
            # SIGTERM makes the worker checkpoint and release its leases (graceful hand-off).
            "KillSignal=SIGTERM",
            f"TimeoutStopSec={stop_timeout_seconds(settings)}",
            "",
            "[Install]",
            "WantedBy=multi-user.target",
            "",
        ]
    )


def agent_listener(settings: Settings) -> str:
    """The EMF listener's address, the one the workers send to (``metrics.agent_endpoint``).

    Workers name the log group in every document (``_aws.LogGroupName``: ``settings.metrics_log_group``,
    which the stack creates and the instance role may write), so the agent needs no group of its own.
    """
    parts = urlsplit(settings.metrics.agent_endpoint)
    if parts.hostname not in ("127.0.0.1", "localhost"):
        raise InfraConfigError(
            f"metrics.agent_endpoint {settings.metrics.agent_endpoint!r}: the agent on each instance "
            "listens on the loopback interface only (tcp://127.0.0.1:25888)"
        )
    return f"{parts.scheme}://127.0.0.1:{parts.port}"


def agent_config(settings: Settings) -> dict[str, object]:
    """CloudWatch agent: EMF listener for the workers' metrics, CPU/memory/disk per instance.

    The agent publishes under the application's namespace (so the role's PutMetricData grant can be
    limited to that one namespace) with an ``InstanceId`` roll-up, which the dashboard searches. The
    workers' EMF documents carry their log group, so the agent writes them where the stack created
    the group and granted the role (``settings.metrics_log_group``), not to ``emf/logs/default``.
    """
    return {
        "agent": {"metrics_collection_interval": 60, "run_as_user": "cwagent", "region": settings.region},
        "metrics": {
            "namespace": settings.metrics_namespace,
            "append_dimensions": {"InstanceId": "${aws:InstanceId}"},
            "aggregation_dimensions": [["InstanceId"]],
            "metrics_collected": {
                "cpu": {"measurement": ["usage_active"], "totalcpu": True},
                "mem": {"measurement": ["used_percent"]},
                "disk": {"measurement": ["used_percent"], "resources": ["/"]},
            },
        },
        "logs": {
            "metrics_collected": {
                "emf": {"service_address": agent_listener(settings)},
            },
            "log_stream_name": "{instance_id}",
        },
    }


def lifecycle_watcher(settings: Settings, boot: BootParameters) -> str:
    """Shell loop: on target state Terminated, stop the workers, then complete the lifecycle action."""
    return "\n".join(
        [
            "#!/bin/bash",
            "set -u",
            "imds() {",
            '  token=$(curl -sf -X PUT "http://169.254.169.254/latest/api/token" '
            '-H "X-aws-ec2-metadata-token-ttl-seconds: 300")',
            '  curl -sf -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"',
            "}",
            "instance_id=$(imds instance-id)",
            "while true; do",
            '  if [ "$(imds autoscaling/target-lifecycle-state)" = "Terminated" ]; then',
            f"    systemctl stop '{UNIT_NAME}@*'",
            "    aws autoscaling complete-lifecycle-action --lifecycle-action-result CONTINUE \\",
            f"      --lifecycle-hook-name {boot.lifecycle_hook_name} \\",
            f"      --auto-scaling-group-name {boot.auto_scaling_group_name} \\",
            f'      --instance-id "$instance_id" --region {settings.region}',
            "    exit 0",
            "  fi",
            "  sleep 5",
            "done",
            "",
        ]
    )


def _write_file(path: str, content: str, mode: str = "0644") -> list[str]:
    marker = "CONSUMER_EOF"
    if marker in content:  # pragma: no cover - guarded by the fixed inputs above
        raise ValueError(f"{path}: content contains the heredoc marker")
    return [f"cat > {path} <<'{marker}'", content.rstrip("\n"), marker, f"chmod {mode} {path}"]


def boot_script(settings: Settings, boot: BootParameters) -> list[str]:
    """User-data lines (without the shebang, which CDK's UserData adds)."""
    processes = settings.fleet.worker_processes_per_instance
    units = " ".join(f"{UNIT_NAME}@{i}" for i in range(1, processes + 1))
    packages = " ".join(RUNTIME_PACKAGES)
    lines = [
        "set -euxo pipefail",
        "dnf install -y python3.11 python3.11-pip amazon-cloudwatch-agent unzip",
        "id consumer >/dev/null 2>&1 || useradd --system --home-dir /opt/consumer --shell /sbin/nologin consumer",
        f"mkdir -p {SOURCE_DIR}",
        f"aws s3 cp {boot.asset_url} /tmp/consumer.zip --region {settings.region}",
        f"unzip -o -q /tmp/consumer.zip -d {SOURCE_DIR}",
        f"python3.11 -m venv {VENV_DIR}",
        f"{VENV_DIR}/bin/pip install --quiet -c {SOURCE_DIR}/requirements.txt {packages}",
        f"{VENV_DIR}/bin/pip install --quiet --no-deps --no-build-isolation {SOURCE_DIR}",
        f"chown -R consumer:consumer {INSTALL_ROOT}",
        *_write_file(
            "/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json",
            json.dumps(agent_config(settings), indent=2, sort_keys=True),
        ),
        "/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s "
        "-c file:/opt/aws/amazon-cloudwatch-agent/etc/amazon-cloudwatch-agent.json",
        *_write_file(
            f"/etc/systemd/system/{UNIT_NAME}@.service", worker_unit(settings, boot.streams_endpoint_url)
        ),
        *_write_file(f"{INSTALL_ROOT}/lifecycle-watcher.sh", lifecycle_watcher(settings, boot), "0755"),
        *_write_file(
            f"/etc/systemd/system/{WATCHER_NAME}.service",
            "\n".join(
                [
                    "[Unit]",
                    "Description=Stop consumer workers when Auto Scaling terminates this instance",
                    "[Service]",
                    f"ExecStart={INSTALL_ROOT}/lifecycle-watcher.sh",
                    "Restart=always",
                    "[Install]",
                    "WantedBy=multi-user.target",
                ]
            ),
        ),
        "systemctl daemon-reload",
        f"systemctl enable --now {units} {WATCHER_NAME}",
    ]
    return lines
