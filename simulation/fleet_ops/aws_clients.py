"""The boto3 clients an instance's watchdog is built with, answering from the fleet model.

``deploy.watchdog`` calls Auto Scaling (``set_instance_health``, ``describe_auto_scaling_groups``,
``complete_lifecycle_action``) and DynamoDB (``scan`` of the workers table, and of whatever other
table its probe reads) with botocore's own exceptions on failure; these fakes answer the same
calls from the group, the tables and the partitions of the model, and fail the same way:
``EndpointConnectionError`` when the instance cannot reach the service, ``ClientError`` with
DynamoDB's codes when a table throttles or refuses (the watchdog's client makes two attempts, with
a 10 s read timeout: a slower table times out).

Times: the probe compares a row's ``heartbeatAt`` with ``time.time()``, the machine's clock, not
the simulation's. A scan's answer therefore carries every wall-time attribute of a row (a name
ending in ``At``: ``heartbeatAt``, ``leaseRoundOkAt``) moved by the difference between the two
clocks at the moment of the scan; the probe's comparisons are then those it would make on an
instance at the simulated time (within the microseconds between its clock read and the scan).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable
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


def _shifted(item: dict[str, Any], offset_millis: int) -> dict[str, Any]:
    out = dict(item)
    for name, value in item.items():
        if name.endswith("At") and isinstance(value, dict) and "N" in value:
            out[name] = {"N": str(int(value["N"]) + offset_millis)}
    return out


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
        offset = int((time.time() - now) * 1000)
        return {"Items": [_shifted(item, offset) for item in items], "Count": len(items)}

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
