"""The boto3 clients an instance's watchdog is built with, answering from the fleet model.

``deploy.watchdog`` calls Auto Scaling (``set_instance_health``, ``describe_auto_scaling_groups``,
``complete_lifecycle_action``), DynamoDB (``scan`` of the workers table, and of whatever other
table its probe reads) and EC2 (``describe_instances``, to find a silent peer's host) with
botocore's own exceptions on failure; these fakes answer the same calls from the group, the tables
and the partitions of the model, and fail the same way:
``EndpointConnectionError`` when the instance cannot reach the service, ``ClientError`` with
DynamoDB's codes when a table throttles or refuses (the watchdog's client makes two attempts, with
a 10 s read timeout: a slower table times out).

Times: the watchdog's probes are built with the simulation's clock (``clock``, which
``deploy.watchdog.main`` leaves at ``time.time``), so the rows' wall times and the instances' launch
times are answered as the model holds them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any, Protocol

from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from simulation.fleet_ops.tables import Table

WATCHDOG_ATTEMPTS = 2
WATCHDOG_READ_TIMEOUT = 10.0


class GroupView(Protocol):
    """What the Auto Scaling fake needs of the model's groups."""

    def describe(self, name: str) -> list[dict[str, str]]: ...

    def set_unhealthy(self, instance_id: str) -> None: ...

    def complete_hook(self, group_name: str, instance_id: str, hook: str) -> None: ...


class FakeAutoScaling:
    def __init__(self, groups: GroupView, reachable: Callable[[], bool]) -> None:
        self._groups = groups
        self._reachable = reachable
        self.calls: list[str] = []

    def _check(self, call: str) -> None:
        self.calls.append(call)
        if not self._reachable():
            raise EndpointConnectionError(endpoint_url="https://autoscaling.eu-west-1.amazonaws.com/")

    def set_instance_health(
        self,
        *,
        InstanceId: str,  # noqa: N803
        HealthStatus: str,  # noqa: N803
        ShouldRespectGracePeriod: bool,  # noqa: N803
    ) -> None:
        self._check("SetInstanceHealth")
        if HealthStatus == "Unhealthy":
            self._groups.set_unhealthy(InstanceId)

    def describe_auto_scaling_groups(self, *, AutoScalingGroupNames: list[str]) -> dict[str, Any]:  # noqa: N803
        self._check("DescribeAutoScalingGroups")
        return {
            "AutoScalingGroups": [
                {"AutoScalingGroupName": name, "Instances": self._groups.describe(name)}
                for name in AutoScalingGroupNames
            ]
        }

    def complete_lifecycle_action(
        self,
        *,
        LifecycleHookName: str,  # noqa: N803
        AutoScalingGroupName: str,  # noqa: N803
        LifecycleActionResult: str,  # noqa: N803
        InstanceId: str,  # noqa: N803
    ) -> None:
        self._check("CompleteLifecycleAction")
        self._groups.complete_hook(AutoScalingGroupName, InstanceId, LifecycleHookName)


class FakeEC2:
    """``describe_instances`` of the model's machines: each one's private DNS name (its host) and
    launch time."""

    def __init__(
        self, machines: Callable[[str], tuple[str, float] | None], reachable: Callable[[], bool]
    ) -> None:
        self._machines = machines
        self._reachable = reachable

    def describe_instances(self, *, InstanceIds: list[str]) -> dict[str, Any]:  # noqa: N803
        if not self._reachable():
            raise EndpointConnectionError(endpoint_url="https://ec2.eu-west-1.amazonaws.com/")
        instances = []
        for instance_id in InstanceIds:
            found = self._machines(instance_id)
            if found is not None:
                host, launched = found
                instances.append(
                    {
                        "InstanceId": instance_id,
                        "PrivateDnsName": f"{host}.eu-west-1.compute.internal",
                        "LaunchTime": datetime.fromtimestamp(launched, UTC),
                    }
                )
        return {"Reservations": [{"Instances": instances}]}


class FakeDynamoDB:
    """Scans of the model's tables, as one instance reaches them."""

    def __init__(
        self,
        tables: dict[str, Table],
        rows: Callable[[str], Iterable[dict[str, Any]]],
        now: Callable[[], float],
        reachable: Callable[[], bool],
        rng: random.Random,
    ) -> None:
        self._tables = tables
        self._rows = rows
        self._now = now
        self._reachable = reachable
        self._rng = rng
        self.scans = 0

    def scan(self, *, TableName: str, **request: Any) -> dict[str, Any]:  # noqa: N803
        self.scans += 1
        if not self._reachable():
            raise EndpointConnectionError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com/")
        table = self._tables.get(TableName)
        if table is None:
            raise ClientError(
                {"Error": {"Code": "ResourceNotFoundException", "Message": f"{TableName} not found"}}, "Scan"
            )
        now = self._now()
        outage = table.outage_at(now)
        if outage is not None:
            self._fail(outage.kind, outage.rate, outage.latency, table)
        items = list(self._rows(table.role))
        if "Limit" in request:
            items = items[: int(request["Limit"])]
        return {"Items": items, "Count": len(items)}

    def _fail(self, kind: str, rate: float, latency: float, table: Table) -> None:
        if kind == "refusing":
            raise ClientError(
                {"Error": {"Code": "InternalServerError", "Message": "Internal server error"}}, "Scan"
            )
        if kind == "slow" and latency + 0.02 > WATCHDOG_READ_TIMEOUT:
            raise ReadTimeoutError(endpoint_url=f"https://dynamodb/{table.name}")
        if kind == "throttled" and all(self._rng.random() < rate for _ in range(WATCHDOG_ATTEMPTS)):
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "Rate exceeded"}},
                "Scan",
            )
