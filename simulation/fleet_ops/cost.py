"""What the deployed environment costs per hour as it runs, against the cost table's promise.

The prices are those the cost table itself states (docs/deploy.md, "Into an empty account", its
Assumption column: us-east-1 list prices, 730 hours a month), plus one it leaves out: AWS's charge
for a public IPv4 address ($0.005 an hour, each NAT gateway has one). What is billed is what the
model runs, hour by hour: the instances of every group (two groups during a deploy), their volumes
and detailed monitoring, the NAT gateways and interface endpoints of the templates, the leases
table's provisioned units as its auto scaling sets them minute by minute, the workers table's
requests on demand, the stream's reads, the custom metrics of every worker process, the alarms,
dashboard and key of the templates, the EMR Serverless capacity of the follow jobs, and the change
log's PUTs (one object per batch and shard a second while records flow, where the destination is
S3). Per-GB charges (NAT, endpoints, logs beyond the table's estimate) and the change log's growing
storage are left out, as the table leaves them out ("comes on top").

The promise read from the table is its total for prod: ``≈ $A at M instances, ≈ $B at K`` (a line
through those points, per instance beyond).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from simulation.fleet_ops.templates import REPO, Templates

HOURS_PER_MONTH = 730
INSTANCE_HOUR = {"t3.medium": 0.0416, "c7i.xlarge": 0.1785}
EBS_GB_MONTH = 0.08
DETAILED_MONITORING_MONTH = 7 * 0.30
NAT_HOUR = 0.045
PUBLIC_IPV4_HOUR = 0.005
ENDPOINT_ZONE_HOUR = 0.01
RCU_HOUR, WCU_HOUR = 0.00013, 0.00065
ON_DEMAND_WRITE = 0.625 / 1e6
STREAM_READ = 0.02 / 100_000
METRIC_MONTH = 0.30
METRICS_PER_PROCESS = 20
LOGS_MONTH = 12.0  # the table's prod estimate (20 GB ingested, 90 days kept)
DASHBOARD_MONTH, ALARM_MONTH, KMS_MONTH = 3.0, 0.10, 1.0
EMR_VCPU_HOUR, EMR_GB_HOUR = 0.053, 0.0058
S3_PUT = 0.005 / 1_000
TOLERANCE = 0.15  # the table's figures are "≈"
ZONES = 2


_TOTAL = re.compile(
    r"\$\s*(\d[\d ,]*?)\s*(?:[–-]\s*\$?\s*(\d[\d ,]*?))?\s*(?:\*\*)?\s*(?:a month\s*)?at (\d+)"
)


def promised_totals(doc: Path = REPO / "docs" / "deploy.md") -> list[tuple[int, float]]:
    """(instances, dollars a month) from the cost table's Total row, prod's column: ``≈ $A at M``
    or, where the table gives a range, ``≈ $A–B at M`` (its upper end: what the table allows)."""
    text = doc.read_text()
    row = next(line for line in text.splitlines() if line.startswith("| **Total"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    found = [
        (int(n), float((high or low).replace(" ", "").replace(",", "")))
        for low, high, n in _TOTAL.findall(cells[2])
    ]
    if len(found) < 2:
        raise ValueError(
            f"the cost table's total for prod does not read as '$A at M instances': {cells[2]!r}"
        )
    return sorted(found)


def promised(instances: float, totals: list[tuple[int, float]]) -> float:
    """The table's monthly total for ``instances`` (a line through its two first points)."""
    (n0, a0), (n1, a1) = totals[0], totals[1]
    return a0 + (instances - n0) * (a1 - a0) / (n1 - n0)


@dataclass
class Bill:
    templates: Templates
    instance_type: str
    volume_gb: int
    totals: list[tuple[int, float]]
    hours: list[tuple[float, float, float]] = field(default_factory=list)  # (hour start, $, instances)
    _current: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # $, instance-seconds, seconds

    def fixed_per_hour(self) -> float:
        t = self.templates
        nat = len(t.of_type("AWS::EC2::NatGateway"))
        interface = sum(
            1
            for r in t.of_type("AWS::EC2::VPCEndpoint").values()
            if r["Properties"].get("VpcEndpointType") == "Interface"
        )
        monthly = (
            len(t.of_type("AWS::CloudWatch::Alarm")) * ALARM_MONTH
            + len(t.of_type("AWS::CloudWatch::Dashboard")) * DASHBOARD_MONTH
            + len(t.of_type("AWS::KMS::Key")) * KMS_MONTH
            + LOGS_MONTH
        )
        return (
            nat * (NAT_HOUR + PUBLIC_IPV4_HOUR)
            + interface * ZONES * ENDPOINT_ZONE_HOUR
            + monthly / HOURS_PER_MONTH
        )

    def provisioned_floor(self) -> tuple[float, float]:
        """The tables' provisioned read and write units as the templates create them."""
        reads = writes = 0.0
        for table in self.templates.of_type("AWS::DynamoDB::Table").values():
            throughput = table["Properties"].get("ProvisionedThroughput")
            if throughput:
                reads += throughput["ReadCapacityUnits"]
                writes += throughput["WriteCapacityUnits"]
        return reads, writes

    def accrue(
        self,
        seconds: float,
        instances: int,
        processes: int,
        open_shards: int,
        emr: tuple[float, float],
        *,
        provisioned: tuple[float, float] | None = None,
        change_log_puts: float = 0.0,
    ) -> None:
        """``seconds`` of the fleet as it ran: ``provisioned`` (RCU, WCU) the tables' units then
        (default: as created), ``change_log_puts`` the change log's PUTs a second."""
        reads, writes = self.provisioned_floor() if provisioned is None else provisioned
        per_instance = (
            INSTANCE_HOUR[self.instance_type]
            + (self.volume_gb * EBS_GB_MONTH + DETAILED_MONITORING_MONTH) / HOURS_PER_MONTH
        )
        variable = (
            instances * per_instance
            + processes * (3600 / 3.3) * ON_DEMAND_WRITE
            + open_shards * 3600 * STREAM_READ
            + processes * METRICS_PER_PROCESS * METRIC_MONTH / HOURS_PER_MONTH
            + reads * RCU_HOUR
            + writes * WCU_HOUR
            + change_log_puts * 3600 * S3_PUT
        )
        cost = (self.fixed_per_hour() + variable) * seconds / 3600
        cost += emr[0] * EMR_VCPU_HOUR + emr[1] * EMR_GB_HOUR
        self._current[0] += cost
        self._current[1] += instances * seconds
        self._current[2] += seconds

    def close_hour(self, start: float) -> None:
        dollars, instance_seconds, seconds = self._current
        if seconds:
            self.hours.append((start, dollars * 3600 / seconds, instance_seconds / seconds))
        self._current = [0.0, 0.0, 0.0]

    def over_table(self) -> list[str]:
        """Hours whose cost, as a month, is above the table's total for the instances they ran."""
        found = []
        for start, per_hour, instances in self.hours:
            monthly = per_hour * HOURS_PER_MONTH
            allowed = promised(max(instances, self.totals[0][0]), self.totals) * (1 + TOLERANCE)
            if monthly > allowed:
                found.append(
                    f"hour from {start:.0f}: ${per_hour:.3f}/h (${monthly:,.0f} a month) at {instances:.1f} "
                    f"instances, above the table's ${allowed / (1 + TOLERANCE):,.0f} (+{TOLERANCE:.0%})"
                )
        return found
