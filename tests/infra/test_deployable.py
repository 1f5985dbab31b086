"""Alarms that page, deploys that keep the fleet, and the stack shaped as users expect.

Every assertion reads the synthesized templates of each environment (local, dev, prod), or a copy
of the configuration edited to show a refusal; the scaling rules are evaluated as plain data.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.application import build_app
from infra.scaling import (
    AT_MAX_PERIODS,
)
from tests.infra.alarm_walk import topic_of
from tests.infra.conftest import (
    ENVIRONMENTS,
    FIXTURE_ACCOUNT,
    REPO,
    Synthesized,
    deployable_config,
    instance_units,
    resolve_join,
    resources_of,
)

pytestmark = pytest.mark.infra

AWS_ENVIRONMENTS = ("dev", "prod")


@pytest.fixture(params=ENVIRONMENTS)
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def _alarms(synth: Synthesized) -> dict[str, dict[str, Any]]:
    """Alarms by name without the ``<app>-<env>-`` prefix."""
    prefix = f"{synth.settings.application_name}-{synth.settings.env}-"
    found: dict[str, dict[str, Any]] = {}
    for alarm in resources_of(synth.raw, "AWS::CloudWatch::Alarm"):
        name = alarm["AlarmName"]
        assert name.startswith(prefix), name
        found[name.removeprefix(prefix)] = alarm
    return found


def _query(alarm: dict[str, Any]) -> str:
    (metric,) = alarm["Metrics"]
    expression: str = metric["Expression"]
    return expression


def _config_copy(tmp_path: Path) -> Path:
    return deployable_config(tmp_path)


def _edit(path: Path, section: str, changes: dict[str, Any]) -> None:
    data = yaml.safe_load(path.read_text())
    target = data.setdefault(section, {})
    for key, value in changes.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = value
    path.write_text(yaml.safe_dump(data))


# ------------------------------------------------------------------------------ 5. alarms that page


def test_silence_of_the_fleet_breaches(synth: Synthesized) -> None:
    alarms = _alarms(synth)
    silent = alarms["workers-silent"]
    # A gauge every live worker publishes at each lease-taking round, records or not: no data in a
    # five-minute period means no worker is running, and that pages.
    assert silent["TreatMissingData"] == "breaching"
    assert "MAX(NumWorkers)" in _query(silent) and "Operation = 'TakeLeases'" in _query(silent)
    assert (silent["ComparisonOperator"], silent["Threshold"]) == ("LessThanThreshold", 1)
    period = silent["Metrics"][0]["Period"]
    worker = synth.settings.worker
    assert (
        period == 300 > max(synth.settings.metrics.flush_interval_seconds, worker.failover_time_millis / 1000)
    )
    # Lag is published only with records (an idle stream reports none) and counters only when their
    # event happens: their silence is no page.
    for name in (
        "lag-near-retention",
        "ready-shards-unassigned",
        "leases-lost",
        "dead-letters",
        "records-lost-to-trimming",
        "telemetry-send-failures",
        "telemetry-dropped",
        "group-at-max",
    ):
        assert alarms[name]["TreatMissingData"] == "notBreaching", name


def test_lag_alarm_at_a_quarter_of_the_stream_retention(synth: Synthesized) -> None:
    lag = _alarms(synth)["lag-near-retention"]
    assert synth.settings.scaling.lag_alarm_retention_fraction == 0.25
    assert lag["Threshold"] == 0.25 * 24 * 3_600_000
    assert lag["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"


def test_alarms_on_lost_leases_shortfall_telemetry_and_the_group_at_max(synth: Synthesized) -> None:
    alarms = _alarms(synth)
    namespace = synth.settings.metrics_namespace
    for name, metric, operation in (
        ("leases-lost", "LostLeases", "RenewAllLeases"),
        ("ready-shards-unassigned", "ReadyLeasesUnassigned", "TakeLeases"),
        ("telemetry-send-failures", "TelemetrySendFailures", "Telemetry"),
        ("telemetry-dropped", "TelemetryDropped", "Telemetry"),
    ):
        query = _query(alarms[name])
        assert f'SCHEMA("{namespace}", Operation, WorkerIdentifier)' in query, name
        assert f"({metric})" in query and f"Operation = '{operation}'" in query, name
        assert alarms[name]["Threshold"] == 1
    # Transient send failures are retried: two periods in a row before paging.
    assert alarms["telemetry-send-failures"]["EvaluationPeriods"] == 2
    # The group at its maximum pages only while leases are still at 2N (scale-out wants more).
    at_max = alarms["group-at-max"]
    expression = next(m["Expression"] for m in at_max["Metrics"] if m.get("ReturnData", True))
    assert f"instances >= {synth.settings.fleet.max_instances}" in expression
    assert f">= {synth.settings.scaling.returned_item_count_multiplier:g}" in expression
    assert at_max["EvaluationPeriods"] == AT_MAX_PERIODS >= 2


def test_prod_health_alarms_page_its_topic_and_the_scaling_alarms_do_not(
    synthesized: dict[str, Synthesized],
) -> None:
    prod = synthesized["prod"]
    assert prod.settings.scaling.require_alarm_topic
    (topic_id,) = [k for k, r in prod.raw["Resources"].items() if r["Type"] == "AWS::SNS::Topic"]
    (subscription,) = resources_of(prod.raw, "AWS::SNS::Subscription")
    assert subscription["Protocol"] == "email"
    assert subscription["Endpoint"] == prod.settings.scaling.alarm_topic_email
    scaling = {"leases-at-2N", "leases-near-N"}
    # The topic is the data stack's; the fleet stack's alarms name it by its ARN.
    assert topic_id in prod.stacks[f"{prod.settings.application_name}-prod-data"]["Resources"]
    for name, alarm in _alarms(prod).items():
        paged = [
            topic_of(prod, action) for action in alarm["AlarmActions"] if "Fn::GetAtt" not in action
        ] == [topic_id]
        assert paged == (name not in scaling), name


def test_an_existing_topic_by_arn_is_used_as_is(tmp_path: Path) -> None:
    config = _config_copy(tmp_path)
    arn = f"arn:aws:sns:eu-west-1:{FIXTURE_ACCOUNT}:oncall-pager"
    _edit(config / "prod.yaml", "scaling", {"alarm_topic_email": None, "alarm_topic_arn": arn})
    app, stack = build_app("prod", config_dir=config, outdir=tmp_path / "out")
    raw = app.synth().get_stack_by_name(stack.stack_name).template
    assert resources_of(raw, "AWS::SNS::Topic") == []
    alarms = resources_of(raw, "AWS::CloudWatch::Alarm")
    paging = [a for a in alarms if not a["AlarmName"].endswith(("-leases-at-2N", "-leases-near-N"))]
    assert paging and all(alarm["AlarmActions"] == [arn] for alarm in paging)


# ---------------------------------------------------------------- 5. scaling that does not oscillate
# tests/infra/test_alarms_reach_people.py evaluates the scaling alarms' expressions over fleet sizes,
# loads and lease counts (one Scan page and many) and walks the group with them.


# ------------------------------------------------------------------------------ 6. stable deploys


def test_synth_warns_of_nothing(synth: Synthesized) -> None:
    """CDK warned "desiredCapacity has been configured" (every deploy resets the size) before."""
    manifest = json.loads((synth.assembly_dir / "manifest.json").read_text())
    stack = manifest["artifacts"][f"{synth.settings.application_name}-{synth.settings.env}"]
    warnings = [
        entry["data"]
        for entries in stack.get("metadata", {}).values()
        for entry in entries
        if entry["type"] in ("aws:cdk:warning", "aws:cdk:error")
    ]
    assert warnings == []


@pytest.mark.parametrize("env", AWS_ENVIRONMENTS)
def test_the_ami_is_pinned_in_the_configuration(env: str, synthesized: dict[str, Synthesized]) -> None:
    synth = synthesized[env]
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    assert template["LaunchTemplateData"]["ImageId"] == synth.settings.fleet.ami_id
    # No SSM parameter re-resolved by CloudFormation at each deploy.
    parameters = synth.raw.get("Parameters", {})
    assert not [p for p in parameters.values() if "ami" in str(p.get("Default", "")).lower()]
    assert set(parameters) <= {"BootstrapVersion"}
    assert "/aws/service/ami-amazon-linux-latest" not in json.dumps(synth.raw)


def test_bumping_the_ami_changes_only_the_image(tmp_path: Path, synthesized: dict[str, Synthesized]) -> None:
    config = _config_copy(tmp_path)
    _edit(config / "prod.yaml", "fleet", {"ami_id": "ami-0fedcba9876543210"})
    app, stack = build_app("prod", config_dir=config, outdir=tmp_path / "bumped")
    bumped = app.synth().get_stack_by_name(stack.stack_name).template
    before = synthesized["prod"].raw
    changed = {k for k, r in bumped["Resources"].items() if r != before["Resources"].get(k)}
    assert changed == {k for k, r in before["Resources"].items() if r["Type"] == "AWS::EC2::LaunchTemplate"}


# ------------------------------------------------------------------------- 7. the stack's shape


def test_outputs_for_what_a_user_needs(synth: Synthesized) -> None:
    outputs = synth.raw["Outputs"]
    expected = {
        "SourceTableArn",
        "StreamArn",
        "LeasesTableName",
        "LeasesTableArn",
        "WorkersTableName",
        "AutoScalingGroupName",
        "DashboardUrl",
    }
    assert expected <= set(outputs)
    prefix = f"{synth.settings.application_name}-{synth.settings.env}"
    assert outputs["LeasesTableName"]["Value"] == {
        "Ref": _logical_id(synth, synth.settings.leases_table_name)
    }
    url = resolve_join(outputs["DashboardUrl"]["Value"])
    region = synth.settings.region
    assert url.endswith(f"#dashboards:name={prefix}-{region}") and f"region={region}" in url
    pipeline = synth.settings.pipeline.emr_serverless
    destination = str(synth.settings.processing.options.get("destination", ""))
    assert ("ChangeLogBucketName" in outputs) == (pipeline or destination.startswith("s3://"))
    assert ("EmrApplicationId" in outputs) == pipeline
    assert ("EmrJobRoleArn" in outputs) == pipeline


def _logical_id(synth: Synthesized, table_name: str) -> str:
    (found,) = [
        k
        for k, r in synth.raw["Resources"].items()
        if r["Type"] == "AWS::DynamoDB::Table" and r["Properties"]["TableName"] == table_name
    ]
    return found


def test_gateway_endpoints_for_s3_and_dynamodb(synth: Synthesized) -> None:
    endpoints = resources_of(synth.raw, "AWS::EC2::VPCEndpoint")
    gateways = {resolve_join(e["ServiceName"]) for e in endpoints if e.get("VpcEndpointType") != "Interface"}
    region = synth.settings.region
    assert {f"com.amazonaws.{region}.s3", f"com.amazonaws.{region}.dynamodb"} <= {
        g.replace("<TOKEN>", region) for g in gateways
    }
    # Both private subnets route through them.
    for endpoint in endpoints:
        if endpoint.get("VpcEndpointType") != "Interface":
            assert len(endpoint["RouteTableIds"]) == 2


def test_interface_endpoints_where_configured(synthesized: dict[str, Synthesized]) -> None:
    for env, synth in synthesized.items():
        endpoints = [
            e
            for e in resources_of(synth.raw, "AWS::EC2::VPCEndpoint")
            if e.get("VpcEndpointType") == "Interface"
        ]
        services = {resolve_join(e["ServiceName"]).rsplit(".", 1)[-1] for e in endpoints}
        configured = {"dynamodb-streams": "dynamodb-streams", "monitoring": "monitoring", "logs": "logs"}
        assert services == {configured[name] for name in synth.settings.fleet.interface_endpoints}, env
        # DynamoDB Streams' endpoint has no private DNS (PrivateLink for DynamoDB Streams): the
        # workers' stream client is pointed at the endpoint's own name; the others use private DNS.
        for endpoint in endpoints:
            streams = resolve_join(endpoint["ServiceName"]).endswith(".dynamodb-streams")
            assert endpoint["PrivateDnsEnabled"] is (not streams), env
        worker = instance_units(synth.raw)["consumer-worker@.service"]
        assert ("AWS_ENDPOINT_URL_DYNAMODB_STREAMS=https://" in worker) is (
            "dynamodb-streams" in synth.settings.fleet.interface_endpoints
        ), env
    assert synthesized["prod"].settings.fleet.interface_endpoints == [
        "dynamodb-streams",
        "monitoring",
        "logs",
    ]
    # Reachable from the workers' security group only, on 443.
    prod = synthesized["prod"].raw
    ingress = [
        rule
        for group in resources_of(prod, "AWS::EC2::SecurityGroup")
        if group["GroupDescription"].startswith("Interface endpoints")
        for rule in group.get("SecurityGroupIngress", [])
    ] + resources_of(prod, "AWS::EC2::SecurityGroupIngress")
    assert ingress and all("CidrIp" not in rule for rule in ingress)
    assert all(rule["FromPort"] == rule["ToPort"] == 443 for rule in ingress)
    (streams_id,) = [
        k
        for k, r in prod["Resources"].items()
        if r["Type"] == "AWS::EC2::VPCEndpoint"
        and resolve_join(r["Properties"]["ServiceName"]).endswith(".dynamodb-streams")
    ]
    (template,) = resources_of(prod, "AWS::EC2::LaunchTemplate")
    assert {"Fn::GetAtt": [streams_id, "DnsEntries"]} in _walk(template["LaunchTemplateData"]["UserData"])


def _walk(value: Any) -> list[Any]:
    """Every dict and list nested in ``value`` (to find a reference inside Fn::Join/Fn::Select)."""
    found: list[Any] = [value]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    for child in children:
        found += _walk(child)
    return found


def test_nat_gateway_per_zone_in_prod_one_in_dev(synthesized: dict[str, Synthesized]) -> None:
    assert len(resources_of(synthesized["prod"].raw, "AWS::EC2::NatGateway")) == 2
    assert len(resources_of(synthesized["dev"].raw, "AWS::EC2::NatGateway")) == 1


def test_termination_protection_in_prod_only(synthesized: dict[str, Synthesized]) -> None:
    for env, synth in synthesized.items():
        manifest = json.loads((synth.assembly_dir / "manifest.json").read_text())
        for name in synth.stacks:
            protected = manifest["artifacts"][name]["properties"].get("terminationProtection", False)
            assert protected is (env == "prod"), (env, name)


def test_stateful_and_stateless_stacks(synth: Synthesized) -> None:
    name = f"{synth.settings.application_name}-{synth.settings.env}"
    assert set(synth.stacks) == {name, f"{name}-data"}
    data, fleet = synth.stacks[f"{name}-data"], synth.stacks[name]

    def kinds(template: dict[str, Any]) -> set[str]:
        return {r["Type"] for r in template["Resources"].values()}

    stateful = {"AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::S3::Bucket"}
    stateless = {
        "AWS::AutoScaling::AutoScalingGroup",
        "AWS::EC2::LaunchTemplate",
        "AWS::CloudWatch::Alarm",
        "AWS::CloudWatch::Dashboard",
        "AWS::IAM::Policy",
    }
    assert "AWS::DynamoDB::Table" in kinds(data) and "AWS::Logs::LogGroup" in kinds(data)
    assert kinds(data).isdisjoint(stateless)
    assert stateless <= kinds(fleet) and kinds(fleet).isdisjoint(stateful)
    # The fleet's stack is deployed after the data stack and imports nothing from it.
    manifest = json.loads((synth.assembly_dir / "manifest.json").read_text())
    assert f"{name}-data" in manifest["artifacts"][name]["dependencies"]
    assert "Fn::ImportValue" not in json.dumps(fleet)
    assert "Outputs" not in data or not any("Export" in o for o in data["Outputs"].values())


def test_no_hard_coded_partition(synth: Synthesized) -> None:
    assert "arn:aws:" not in json.dumps(synth.raw)
    sources = "\n".join(p.read_text() for p in sorted((REPO / "infra").glob("*.py")))
    assert "arn:aws:" not in sources


def test_the_streams_endpoint_variable_is_the_one_botocore_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unit's variable points the workers' ``dynamodbstreams`` client (and only it) at the
    interface endpoint, with no change to the worker's code."""
    import boto3

    from infra.user_data import STREAMS_ENDPOINT_VARIABLE

    url = "https://vpce-0a1b2c3d-4e5f6a7b.streams.dynamodb.eu-west-1.vpce.amazonaws.com"
    monkeypatch.setenv(STREAMS_ENDPOINT_VARIABLE, url)
    session = boto3.session.Session(region_name="eu-west-1", aws_access_key_id="x", aws_secret_access_key="y")
    assert session.client("dynamodbstreams", endpoint_url=None).meta.endpoint_url == url
    assert session.client("dynamodb", endpoint_url=None).meta.endpoint_url != url
