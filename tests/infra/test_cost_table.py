"""docs/deploy.md's cost table against the templates it prices (dev's and prod's shipped shapes).

The rows a template decides are computed here from the synthesized resources and the prices the
table itself states in its Assumption column: the instance type and count, the NAT gateways and
their public IPv4 addresses, the interface endpoints (hourly and per GB), the leases table's
auto-scaled capacity range and the workers table's billing, the hours the EMR schedule runs
``follow`` (its rate and the job's length, priced from the driver alone to the application's
capacity cap), the change log's requests (one object per batch and shard) and its lifecycle. Each
total must be the sum of its column. The table once said the workers table was on-demand while the
template provisioned it, and priced the hourly EMR job "per job run"; a change to either side now
fails this test until the other follows. Figures that depend on traffic (metrics, logs, stream
reads) are estimates the templates cannot check.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from tests.infra.conftest import REPO, Synthesized, boot_plan_of, resources_of

pytestmark = pytest.mark.infra

HOURS = 730  # a month, as the table says
COLUMNS = {"dev": 1, "prod": 2}


def cost_table() -> tuple[list[str], dict[str, list[str]]]:
    """(header cells, row name -> cells) of the table under "Into an empty account"."""
    header, rows, _ = _table()
    return header, rows


def _table() -> tuple[list[str], dict[str, list[str]], list[str]]:
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("### Into an empty account") :]
    lines = section[section.index("| Resource |") :].splitlines()
    rows = []
    for line in lines:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip("|").split("|")])
    end = next(i for i, r in enumerate(rows) if r[0].startswith("**Total"))
    header, _, *body = rows[:end]
    return header, {row[0]: row for row in body}, [cell.strip("*") for cell in rows[end]]


TOTALS = _table()[2]


def dollars(amount: float) -> str:
    """As the table writes money: whole dollars, a space between thousands."""
    return "$" + f"{round(amount):,}".replace(",", " ")


def prices(cell: str, unit: str) -> list[float]:
    return [float(p) for p in re.findall(r"\$([\d.]+)" + re.escape(unit), cell)]


def _table_billing(synth: Synthesized, name: str) -> dict[str, Any]:
    (table,) = [t for t in resources_of(synth.raw, "AWS::DynamoDB::Table") if t["TableName"] == name]
    return table


@pytest.mark.parametrize("env", list(COLUMNS))
def test_the_cost_table_prices_what_the_templates_create(
    env: str, synthesized: dict[str, Synthesized]
) -> None:
    synth = synthesized[env]
    header, rows = cost_table()
    column = COLUMNS[env]
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    instance_type = template["LaunchTemplateData"]["InstanceType"]
    (group,) = resources_of(synth.raw, "AWS::AutoScaling::AutoScalingGroup")
    low, high = int(group["MinSize"]), int(group["MaxSize"])
    processes = boot_plan_of(synth.raw).worker_processes

    # The shape the column prices: the instance type, the group's minimum, the processes.
    assert f"`{instance_type}` × {low}" in header[column], header[column]
    assert f"{processes} processes" in header[column]
    if high > low and env == "prod":
        assert f"{low} to {high}" in header[column]

    instances = rows["Instances"]
    hourly = prices(instances[3], "/h")[column - 1]
    assert instances[column].startswith(dollars(hourly * HOURS * low)), instances[column]

    nat = rows["NAT gateways (new VPC)"]
    gateways = len(resources_of(synth.raw, "AWS::EC2::NatGateway"))
    assert nat[column].startswith(f"{gateways}") and nat[column].endswith(
        dollars(gateways * prices(nat[3], "/h")[0] * HOURS)
    ), nat[column]

    endpoints = rows["Interface endpoints (new VPC)"]
    interface = [
        e for e in resources_of(synth.raw, "AWS::EC2::VPCEndpoint") if e.get("VpcEndpointType") == "Interface"
    ]
    if interface:
        zones = {len(e["SubnetIds"]) for e in interface}
        assert len(zones) == 1
        (count,) = zones
        hourly = prices(endpoints[3], "/h")[0]
        assert endpoints[column] == (
            f"{len(interface)} × {count} zones: {dollars(len(interface) * count * hourly * HOURS)}, "
            f"plus ${prices(endpoints[3], '/GB processed')[0]:g} per GB"
        ), endpoints[column]
        assert prices(endpoints[3], "/GB processed") == [0.01]
    else:
        assert endpoints[column] == "none"

    leases_row = rows["Leases table"]
    leases = _table_billing(synth, synth.settings.leases_table_name)
    if "ProvisionedThroughput" in leases:
        read, write = (
            leases["ProvisionedThroughput"]["ReadCapacityUnits"],
            leases["ProvisionedThroughput"]["WriteCapacityUnits"],
        )
        ceiling = {
            t["ScalableDimension"].rsplit(":", 1)[1]: int(t["MaxCapacity"])
            for t in resources_of(synth.raw, "AWS::ApplicationAutoScaling::ScalableTarget")
            if t["ScalableDimension"].startswith("dynamodb:table:")
        }
        floors = {
            t["ScalableDimension"].rsplit(":", 1)[1]: int(t["MinCapacity"])
            for t in resources_of(synth.raw, "AWS::ApplicationAutoScaling::ScalableTarget")
            if t["ScalableDimension"].startswith("dynamodb:table:")
        }
        assert floors == {"ReadCapacityUnits": read, "WriteCapacityUnits": write}  # scaled from the floor
        rcu, wcu = prices(leases_row[3], "/RCU-h")[0], prices(leases_row[3], "/WCU-h")[0]
        top_read, top_write = ceiling["ReadCapacityUnits"], ceiling["WriteCapacityUnits"]
        assert leases_row[column] == (
            f"{read} RCU + {write} WCU, auto-scaled up to {top_read} RCU + {top_write} WCU: "
            f"{dollars((read * rcu + write * wcu) * HOURS)} "
            f"(at most {dollars((top_read * rcu + top_write * wcu) * HOURS)})"
        ), leases_row[column]
    else:
        assert leases["BillingMode"] == "PAY_PER_REQUEST"
        assert leases_row[column].startswith("on demand"), leases_row[column]
    workers = _table_billing(synth, synth.settings.workers_table_name)
    assert workers["BillingMode"] == "PAY_PER_REQUEST" and "ProvisionedThroughput" not in workers
    assert rows["Workers table"][column].startswith("on demand"), rows["Workers table"][column]

    ipv4 = rows["Public IPv4 (the NAT gateways' Elastic IPs)"]
    addresses = len(resources_of(synth.raw, "AWS::EC2::EIP"))
    assert addresses == gateways
    assert ipv4[column] == f"{addresses}: {dollars(addresses * prices(ipv4[3], '/h')[0] * HOURS)}", ipv4[
        column
    ]

    changelog_requests(synth, rows["Change-log bucket: requests"], column)
    changelog_storage(synth, rows["Change-log bucket: storage"], column)

    emr = rows["EMR Serverless `follow` (`pipeline.emr_serverless`, `pipeline.emr_follow`)"]
    schedules = resources_of(synth.raw, "AWS::Scheduler::Schedule")
    if not schedules:
        assert emr[column] == "–"
    else:
        follow_hours(synth, emr, column, schedules)

    total = cost_total(rows, header, column)
    assert total is not None


def follow_hours(synth: Synthesized, row: list[str], column: int, schedules: list[dict[str, Any]]) -> None:
    """The schedule starts a job every ``rate`` minutes that runs ``--minutes``: job-hours a month,
    priced from the driver alone to the application's cap (the template's MaximumCapacity)."""
    (schedule,) = schedules
    every = int(re.fullmatch(r"rate\((\d+) minutes\)", schedule["ScheduleExpression"]).group(1))  # type: ignore[union-attr]
    request = schedule["Target"]["Input"]
    text = request if isinstance(request, str) else json.dumps(request)
    runs = int(re.search(r'\\?"--minutes\\?",\s*\\?"(\d+)', text).group(1))  # type: ignore[union-attr]
    hours = HOURS * runs / every
    (application,) = resources_of(synth.raw, "AWS::EMRServerless::Application")
    cap = application["MaximumCapacity"]
    vcpu, memory = int(cap["Cpu"].split()[0]), int(cap["Memory"].split()[0])
    per_vcpu, per_gb = prices(row[3], " per vCPU-hour")[0], prices(row[3], " per GB-hour")[0]
    assert f"(4 vCPU / 16 GB, ${4 * per_vcpu + 16 * per_gb:.2f}/h)" in row[3]
    assert f"({vcpu} vCPU / {memory} GB, ${vcpu * per_vcpu + memory * per_gb:.2f}/h)" in row[3]
    low, high = (hours * (c * per_vcpu + g * per_gb) for c, g in ((4, 16), (vcpu, memory)))
    expected = f"{round(hours)} job-hours (a {runs}-minute job started every {every} minutes): "
    assert row[column] == expected + f"{dollars(low)}–{dollars(high).lstrip('$')}", row[column]


def changelog_requests(synth: Synthesized, row: list[str], column: int) -> None:
    """One PUT per batch and shard, a batch every poll while records flow (N shards)."""
    if not resources_of(synth.raw, "AWS::S3::Bucket"):
        assert row[column] == "–"
        return
    settings = synth.settings
    n = settings.table.expected_partitions()[0]
    poll = settings.worker.idle_time_between_reads_millis / 1000
    assert settings.processing.batching.max_window_millis == 0  # a batch every poll
    puts = n * HOURS * 3600 / poll
    price = prices(row[3], " per 1 000 PUTs")[0]
    shards = "shard" if n == 1 else "shards"
    where = f"on N = {n} {shards}" if n == 1 else f"on each of N = {n} {shards}"
    assert row[column] == f"one batch a second {where}: {dollars(puts / 1000 * price)}", row[column]


def changelog_storage(synth: Synthesized, row: list[str], column: int) -> None:
    """The lifecycle the template gives the change log: kept (grows), or expired after N days."""
    rules = [
        rule
        for bucket in resources_of(synth.raw, "AWS::S3::Bucket")
        for rule in bucket.get("LifecycleConfiguration", {}).get("Rules", [])
        if rule.get("Id") == "expire-change-log"
    ]
    days = synth.settings.pipeline.changelog_expiration_days
    if days is None:
        assert rules == [] and row[column] == "grows: kept", row[column]
    else:
        assert [r["ExpirationInDays"] for r in rules] == [days]
        assert row[column] == f"expires after {days} days", row[column]


def _first_dollars(cell: str) -> tuple[float, float]:
    """The cell's figure at the group's minimum: its first amount, and a range's upper end."""
    found = re.search(r"\$([\d ]+(?:\.\d+)?)(?:–([\d ]+))?", cell)
    if found is None:
        return 0.0, 0.0
    low = float(found.group(1).replace(" ", ""))
    high = float(found.group(2).replace(" ", "")) if found.group(2) else low
    return low, high


def cost_total(rows: dict[str, list[str]], header: list[str], column: int) -> tuple[float, float]:
    """The column's total is the sum of its rows (the source table's and the storage that grows left
    out), at the group's minimum, low and high, within a dollar a row of rounding."""
    counted = [name for name in rows if not name.startswith("Source table")]
    low = sum(_first_dollars(rows[name][column])[0] for name in counted)
    high = sum(_first_dollars(rows[name][column])[1] for name in counted)
    total_low, total_high = _first_dollars(TOTALS[column])
    assert abs(total_low - low) <= len(counted) and abs(total_high - high) <= len(counted), (
        header[column],
        low,
        high,
        TOTALS[column],
    )
    return low, high
