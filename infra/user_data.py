"""What an instance runs at boot: a short user data that hands over to ``deploy/bootstrap.py``.

The user data installs the two system packages (Python 3.11, the CloudWatch agent), downloads the
asset, asks Auto Scaling for the name of the instance's group (CloudFormation names the group, and
a replacing update names a new one, so no template can say it), writes the boot plan
(:func:`boot_plan`: the environment's values and the stack's) and runs the bootstrap from the
downloaded archive with that name. Everything else (virtualenv from the asset's locked
wheelhouse with no index, agent configuration, systemd units, the wait for healthy workers and
the CloudFormation signal) is Python in the repository, tested on a developer's machine
(``tests/infra/test_boot_policy.py``, ``tests/e2e/test_instance_boot.py``). A failure before the
bootstrap runs (dnf, the download) signals FAILURE from the shell's ERR trap, so no path through
boot leaves the creation policy waiting for its timeout without a word, and marks the instance
Unhealthy, so that outside a deploy (a scale-out, where nobody hears the signal and the watchdog
never started) the group replaces it. So does every failure of the bootstrap before the watchdog
starts (it signals, and exits with ``SIGNALLED_FAILURE``); once the watchdog runs, it judges.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from deploy.bootstrap import SIGNALLED_FAILURE, SIGNALLED_WATCHDOG_JUDGES
from deploy.plan import STREAMS_ENDPOINT_VARIABLE, BootPlan, Layout
from ground.settings import Settings
from infra.errors import InfraConfigError

__all__ = ["STREAMS_ENDPOINT_VARIABLE", "BootParameters", "boot_plan", "boot_script"]

# What the instances need from Amazon Linux 2023 beyond its image: the Python the product runs on
# and the CloudWatch agent (docs/deploy.md, "Boot without distro mirrors?").
SYSTEM_PACKAGES = "python3.11 python3.11-pip amazon-cloudwatch-agent"
INSTANCE = Layout()
INSTALL_ROOT = str(INSTANCE.install_root)
SOURCE_DIR = str(INSTANCE.source_dir)
ASSET_ARCHIVE = f"{INSTALL_ROOT}/asset.zip"
PLAN_SOURCE = "/etc/consumer-boot.json"
# The CloudWatch agent ships buffered logs (the workers' EMF documents) this often; the watchdog's
# hand-off waits twice this after the units stopped (deploy.watchdog.hand_off).
AGENT_FLUSH_INTERVAL_SECONDS = 5
# Leave the hook this long after the units stopped: the agent's wait, then the watchdog's poll and
# its call completing the lifecycle action.
_STOP_MARGIN_SECONDS = 15 + 2 * AGENT_FLUSH_INTERVAL_SECONDS
# From boot to the bootstrap's verdict: dnf, the download, the virtualenv, and the workers' first
# lease-taking rounds. The creation policy's timeout is this plus a margin.
HEALTH_TIMEOUT_SECONDS = 600
SIGNAL_TIMEOUT_MINUTES = 20


@dataclass(frozen=True)
class BootParameters:
    """Values only known to the stack (asset location, names); tokens are fine here."""

    asset_url: str
    lifecycle_hook_name: str
    stack_name: str
    # The Auto Scaling group's logical id: the resource the creation/update policy waits on.
    signal_resource: str
    # https://<the interface endpoint's DNS name> when the VPC has one for DynamoDB Streams.
    streams_endpoint_url: str | None = None


def stop_timeout_seconds(settings: Settings) -> int:
    """How long systemd waits for a worker to release its leases before SIGKILL."""
    return max(10, settings.fleet.lifecycle_hook_timeout_seconds - _STOP_MARGIN_SECONDS)


def heartbeat_max_age_seconds(settings: Settings) -> int:
    """A worker takes leases every two failover times (KCL's rhythm): three missed rounds, and at
    least two minutes, before it counts as not running."""
    return max(120, 6 * settings.worker.failover_time_millis // 1000)


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
            "force_flush_interval": AGENT_FLUSH_INTERVAL_SECONDS,
        },
    }


def boot_plan(settings: Settings, boot: BootParameters) -> BootPlan:
    return BootPlan(
        env=settings.env,
        region=settings.region,
        worker_processes=settings.fleet.worker_processes_per_instance,
        stop_timeout_seconds=stop_timeout_seconds(settings),
        agent_config=agent_config(settings),
        stack_name=boot.stack_name,
        signal_resource=boot.signal_resource,
        # Known at boot only: the user data passes it to the bootstrap (--group-name).
        group_name="",
        lifecycle_hook_name=boot.lifecycle_hook_name,
        health_timeout_seconds=HEALTH_TIMEOUT_SECONDS,
        heartbeat_max_age_seconds=heartbeat_max_age_seconds(settings),
        streams_endpoint_url=boot.streams_endpoint_url,
        workers_table=settings.workers_table_name,
        leases_table=settings.leases_table_name,
        peer_horizon_seconds=(settings.worker.failover_time_millis + settings.worker.max_clock_skew_millis)
        / 1000,
    )


def boot_script(settings: Settings, boot: BootParameters) -> list[str]:
    """User-data lines (without the shebang, which CDK's UserData adds)."""
    plan = boot_plan(settings, boot).to_json()
    marker = "CONSUMER_EOF"
    if marker in plan:  # pragma: no cover - guarded by the fixed inputs above
        raise ValueError("the boot plan contains the heredoc marker")
    region = settings.region
    imds = "http://169.254.169.254/latest"
    # Without its id an instance can neither signal nor be marked: the metadata service is asked
    # again rather than once.
    retry = "--retry 10 --retry-connrefused --retry-delay 1"
    return [
        "set -euxo pipefail",
        # Without its id nothing below can signal or mark the instance: it powers off instead, and
        # Auto Scaling's EC2 health check replaces an instance that is not running.
        "metadata_lost() {",
        '  echo "the instance metadata service did not answer: powering off for the group to replace '
        'this instance" >&2',
        "  shutdown -h now",
        "  exit 1",
        "}",
        f'token=$(curl -sf {retry} -X PUT {imds}/api/token -H "X-aws-ec2-metadata-token-ttl-seconds: 300") '
        "|| metadata_lost",
        f'instance_id=$(curl -sf {retry} -H "X-aws-ec2-metadata-token: $token" {imds}/meta-data/instance-id) '
        "|| metadata_lost",
        # Outside a deploy nobody hears the signal, and the watchdog that would judge the instance
        # never started: the group replaces it instead of keeping it InService without workers.
        "mark_unhealthy() {",
        f'  aws autoscaling set-instance-health --instance-id "$instance_id" --health-status Unhealthy '
        f"--no-should-respect-grace-period --region {region} || true",
        "}",
        "signal_failure() {",
        f"  aws cloudformation signal-resource --stack-name {boot.stack_name} --logical-resource-id "
        f'{boot.signal_resource} --unique-id "$instance_id" --status FAILURE --region {region} || true',
        "  mark_unhealthy",
        "}",
        # Until the bootstrap runs (it signals for itself), any failing line signals FAILURE.
        "trap signal_failure ERR",
        # An image that has them already (one baked for the fleet) boots without the repositories.
        f"rpm -q {SYSTEM_PACKAGES} > /dev/null || dnf install -y {SYSTEM_PACKAGES}",
        f"mkdir -p {INSTALL_ROOT}",
        f"aws s3 cp {boot.asset_url} {ASSET_ARCHIVE} --region {region}",
        f'group_name=$(aws autoscaling describe-auto-scaling-instances --instance-ids "$instance_id" '
        f"--region {region} --query 'AutoScalingInstances[0].AutoScalingGroupName' --output text)",
        # Each on its own line: a failing test inside an && list would not fire the ERR trap.
        'test -n "$group_name"',
        'test "$group_name" != None',
        f"cat > {PLAN_SOURCE} <<'{marker}'",
        plan,
        marker,
        "trap - ERR",
        "status=0",
        f"PYTHONPATH={ASSET_ARCHIVE} python3.11 -m deploy.bootstrap --archive {ASSET_ARCHIVE} "
        f'--plan {PLAN_SOURCE} --group-name "$group_name" --root / || status=$?',
        # The bootstrap's verdict (deploy/bootstrap.py): 0 booted; SIGNALLED_FAILURE before the
        # watchdog ran: mark; SIGNALLED_WATCHDOG_JUDGES: the watchdog runs and judges; anything else
        # died before it could signal: signal and mark here.
        f'case "$status" in 0|{SIGNALLED_WATCHDOG_JUDGES}) ;; {SIGNALLED_FAILURE}) mark_unhealthy ;; '
        "*) signal_failure ;; esac",
        'exit "$status"',
    ]
