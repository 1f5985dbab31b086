"""Synth tests: what the fleet's role may do, per environment — least privilege, read from the
templates (the instance-side grants: tests/infra/test_boot_policy.py)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.infra.conftest import (
    ENVIRONMENTS,
    FIXTURE_ACCOUNT,
    FIXTURE_REGION,
    Synthesized,
    resolve_join,
    resources_of,
)

pytestmark = pytest.mark.infra


@pytest.fixture(params=ENVIRONMENTS)
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def _statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for policy in resources_of(raw, "AWS::IAM::Policy"):
        found += policy["PolicyDocument"]["Statement"]
    for role in resources_of(raw, "AWS::IAM::Role"):
        for inline in role.get("Policies", []):
            found += inline["PolicyDocument"]["Statement"]
    return found


def test_no_wildcard_grants_on_dynamodb_logs_cloudwatch(synth: Synthesized) -> None:
    statements = _statements(synth.raw)
    assert statements
    for statement in statements:
        actions = _as_list(statement["Action"])
        resources = _as_list(statement.get("Resource", []))
        assert "*" not in actions
        for action in actions:
            service, _, name = action.partition(":")
            if service in ("dynamodb", "logs", "cloudwatch"):
                assert "*" not in name, statement
        if "*" in resources:
            # Reads that take no resource ARN: the boot's question for its group's name, the
            # watchdog's one-replacement-at-a-time check and its peers' host names, and the group's
            # size read at a deploy (infra/fleet_size.py, alone in its function's role).
            if set(actions) <= {
                "autoscaling:DescribeAutoScalingInstances",
                "autoscaling:DescribeAutoScalingGroups",
                "ec2:DescribeInstances",
            }:
                continue
            # The new group's size after a replacing update: only this stack's groups, by tag.
            if actions == ["autoscaling:SetDesiredCapacity"]:
                tag = statement["Condition"]["StringEquals"][
                    "autoscaling:ResourceTag/aws:cloudformation:stack-name"
                ]
                assert tag == list(synth.stacks)[-1], statement
                continue
            # PutMetricData takes no resource ARN; it must then be pinned to our namespace.
            assert actions == ["cloudwatch:PutMetricData"], statement
            assert statement["Condition"] == {
                "StringEquals": {"cloudwatch:namespace": synth.settings.metrics_namespace}
            }


def _worker_statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The fleet role's statements only (the pipeline's job role may also Scan: the source table)."""
    return [
        statement
        for logical_id, resource in raw["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith(("Fleet", "WorkerPolicy"))
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_worker_grants_target_this_stream_and_leases_table(synth: Synthesized) -> None:
    statements = _worker_statements(synth.raw)
    assert statements
    by_action = {a: s for s in statements for a in _as_list(s["Action"])}
    stream = by_action["dynamodb:GetRecords"]["Resource"]
    table = synth.settings.table
    if table.existing_stream_arn:
        assert stream == table.existing_stream_arn
    else:  # by the table's name: any stream of that table (its label is only known in the account)
        assert resolve_join(stream).endswith(f":table/{table.source_table_name}/stream/*")
    leases = by_action["dynamodb:Scan"]["Resource"]
    tables = (synth.settings.leases_table_name, synth.settings.workers_table_name)
    # The fleet's stack names the data stack's tables by ARN (no export between the stacks) ...
    assert [resolve_join(arn).rsplit(":", 1)[-1] for arn in leases] == [f"table/{name}" for name in tables]
    # ... and those tables are the ones the data stack creates.
    created = {r["TableName"] for r in resources_of(synth.raw, "AWS::DynamoDB::Table")}
    assert set(tables) <= created
    assert "dynamodb:CreateTable" not in by_action


def test_s3_grants_only_where_destinations_are_configured(synthesized: dict[str, Synthesized]) -> None:
    local_actions = {a for s in _statements(synthesized["local"].raw) for a in _as_list(s["Action"])}
    assert "s3:PutObject" not in local_actions  # local writes the change log to var/
    prod_statements = _statements(synthesized["prod"].raw)
    puts = [
        s for s in prod_statements if s["Action"] == "s3:PutObject" or "s3:PutObject" in _as_list(s["Action"])
    ]
    resources = {resolve_join(r) for s in puts for r in _as_list(s["Resource"])}
    # The partition is the stack's (AWS::Partition), not a hard-coded arn:aws.
    bucket = f"orders-stream-consumer-prod-{FIXTURE_ACCOUNT}-{FIXTURE_REGION}"
    assert f"arn:<TOKEN>:s3:::{bucket}/changes/*" in resources
    assert f"arn:<TOKEN>:s3:::{bucket}/dead-letter/*" in resources


def test_the_workers_table_sits_beside_the_leases_table_and_workers_may_use_both(synth: Synthesized) -> None:
    settings = synth.settings
    synth.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "TableName": settings.workers_table_name,
            "KeySchema": [{"AttributeName": "workerId", "KeyType": "HASH"}],
        },
    )
    policies = resources_of(synth.raw, "AWS::IAM::Policy")
    statements = [s for p in policies for s in p["PolicyDocument"]["Statement"]]
    lease_writes = [s for s in statements if "dynamodb:UpdateItem" in _as_list(s["Action"])]
    assert lease_writes and len(_as_list(lease_writes[0]["Resource"])) == 2
    (shortfall,) = [
        a
        for a in resources_of(synth.raw, "AWS::CloudWatch::Alarm")
        if a["AlarmName"].endswith("ready-shards-unassigned")
    ]
    assert "MAX(ReadyLeasesUnassigned)" in shortfall["Metrics"][0]["Expression"]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
