"""docs/deploy.md's cost table against the templates it prices (dev's and prod's shipped shapes).

The rows a template decides are computed here from the synthesized resources and the prices the
table itself states in its Assumption column: the instance type and count, the NAT gateways, the
interface endpoints, and the leases and workers tables' billing and capacity. The table once said
the workers table was on-demand while the template provisioned it at 100 RCU + 100 WCU; a change to
either side now fails this test until the other follows. Figures that depend on traffic (metrics,
logs, stream reads) are estimates the templates cannot check.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.infra.conftest import REPO, Synthesized, boot_plan_of, resources_of

pytestmark = pytest.mark.infra

HOURS = 730  # a month, as the table says
COLUMNS = {"dev": 1, "prod": 2}


def cost_table() -> tuple[list[str], dict[str, list[str]]]:
    """(header cells, row name -> cells) of the table under "Into an empty account"."""
    text = (REPO / "docs" / "deploy.md").read_text()
    section = text[text.index("### Into an empty account") :]
    lines = section[section.index("| Resource |") :].splitlines()
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("|")]
    header, _, *body = rows[: next(i for i, r in enumerate(rows) if r[0].startswith("**Total"))]
    return header, {row[0]: row for row in body}


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
        assert (
            endpoints[column]
            == f"{len(interface)} × {count} zones: {dollars(len(interface) * count * hourly * HOURS)}"
        )
    else:
        assert endpoints[column] == "none"

    tables = rows["Leases + workers tables"]
    leases = _table_billing(synth, synth.settings.leases_table_name)
    if "ProvisionedThroughput" in leases:
        read, write = (
            leases["ProvisionedThroughput"]["ReadCapacityUnits"],
            leases["ProvisionedThroughput"]["WriteCapacityUnits"],
        )
        rcu, wcu = prices(tables[3], "/RCU-h")[0], prices(tables[3], "/WCU-h")[0]
        assert tables[column].startswith(
            f"leases {read} RCU + {write} WCU provisioned: {dollars((read * rcu + write * wcu) * HOURS)}"
        ), tables[column]
    else:
        assert leases["BillingMode"] == "PAY_PER_REQUEST"
        assert tables[column].startswith("leases on demand"), tables[column]
    workers = _table_billing(synth, synth.settings.workers_table_name)
    assert workers["BillingMode"] == "PAY_PER_REQUEST" and "ProvisionedThroughput" not in workers
    assert "workers on demand" in tables[column], tables[column]

    emr = rows["EMR Serverless (`pipeline.emr_serverless`)"]
    has_emr = bool(resources_of(synth.raw, "AWS::EMRServerless::Application"))
    assert (emr[column] != "–") == has_emr
