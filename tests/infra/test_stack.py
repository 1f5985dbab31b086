"""Synth tests: every environment's template against the values in its config file."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from infra.scaling import expected_partitions, scaling_thresholds
from infra.widgets import dashboard_widgets
from tests.infra.conftest import (
    ENVIRONMENTS,
    FIXTURE_ACCOUNT,
    FIXTURE_REGION,
    Synthesized,
    boot_plan_of,
    dashboard_body,
    instance_units,
    resources_of,
)

pytestmark = pytest.mark.infra


@pytest.fixture(params=ENVIRONMENTS)
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def test_source_table_stream_view_type_and_keys(synth: Synthesized) -> None:
    from aws_cdk.assertions import Match

    table = synth.settings.table
    if not table.create:
        # Imported (prod's default): nothing of it is in the template (tests/infra/test_environments.py).
        tables = [r.get("TableName") for r in resources_of(synth.raw, "AWS::DynamoDB::Table")]
        assert table.source_table_name not in tables
        return
    synth.template.has_resource_properties(
        "AWS::DynamoDB::Table",
        {
            "TableName": table.name,
            "StreamSpecification": {"StreamViewType": table.stream_view_type},
            "KeySchema": [
                {"AttributeName": table.partition_key.name, "KeyType": "HASH"},
                {"AttributeName": table.sort_key.name, "KeyType": "RANGE"},
            ],
            "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
            "SSESpecification": {"SSEEnabled": True},
            "BillingMode": Match.absent() if table.billing_mode == "PROVISIONED" else "PAY_PER_REQUEST",
        },
    )


def test_leases_table_capacity_from_worker_settings(synth: Synthesized) -> None:
    from aws_cdk.assertions import Match

    worker = synth.settings.worker
    expected: dict[str, Any] = {
        "TableName": synth.settings.leases_table_name,
        "KeySchema": [{"AttributeName": "leaseKey", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "leaseKey", "AttributeType": "S"}],
        "DeletionProtectionEnabled": synth.settings.env == "prod",
    }
    if worker.lease_table_billing_mode == "PROVISIONED":
        expected["ProvisionedThroughput"] = {
            "ReadCapacityUnits": worker.initial_lease_table_read_capacity,
            "WriteCapacityUnits": worker.initial_lease_table_write_capacity,
        }
    else:
        expected["BillingMode"] = "PAY_PER_REQUEST"
        expected["ProvisionedThroughput"] = Match.absent()
    synth.template.has_resource_properties("AWS::DynamoDB::Table", expected)


def test_prod_leases_capacity_is_not_kcl_default(synthesized: dict[str, Synthesized]) -> None:
    # Seed 004: 10/10 is too low for a table of this size; prod.yaml raises it and the stack follows.
    prod = synthesized["prod"]
    (leases,) = [
        t
        for t in resources_of(prod.raw, "AWS::DynamoDB::Table")
        if t["TableName"] == prod.settings.leases_table_name
    ]
    assert leases["ProvisionedThroughput"] == {"ReadCapacityUnits": 100, "WriteCapacityUnits": 100}


@pytest.mark.parametrize("env", ["local", "prod"])
def test_a_provisioned_leases_table_scales_to_what_the_largest_fleet_and_a_rollover_ask(
    env: str, synthesized: dict[str, Synthesized]
) -> None:
    """From the configured capacity up to `consumer plan`'s figures for the group at its maximum,
    plus a rollover's writes (a child lease created and a parent's last checkpoint for each of the N
    partitions), at the target utilization. prod's table was fixed at 100/100: a rollover of its 44
    partitions asks ~88 WCU on top of its checkpoints."""
    from tools.planning import make_plan

    synth = synthesized[env]
    settings = synth.settings
    targets = {
        t["ScalableDimension"].rsplit(":", 1)[1]: t
        for t in resources_of(synth.raw, "AWS::ApplicationAutoScaling::ScalableTarget")
        if t["ScalableDimension"].startswith("dynamodb:table:")
    }
    worker, n = settings.worker, settings.table.expected_partitions()[0]
    fleet = settings.fleet.model_copy(update={"desired_instances": settings.fleet.max_instances})
    plan = make_plan(settings.model_copy(update={"fleet": fleet}))
    target = settings.scaling.lease_table_target_utilization_percent / 100
    reads, writes = targets["ReadCapacityUnits"], targets["WriteCapacityUnits"]
    assert int(reads["MinCapacity"]) == worker.initial_lease_table_read_capacity
    assert int(writes["MinCapacity"]) == worker.initial_lease_table_write_capacity
    assert int(reads["MaxCapacity"]) >= plan.value("lease_table_read_units") / target
    assert int(writes["MaxCapacity"]) >= (plan.value("lease_table_write_units_catching_up") + 2 * n) / target
    if env == "prod":
        assert int(writes["MaxCapacity"]) > 100 + 2 * n  # room for a rollover above the old fixed 100
    dev = synthesized["dev"]  # on demand: nothing to scale
    assert resources_of(dev.raw, "AWS::ApplicationAutoScaling::ScalableTarget") == []


def test_auto_scaling_group_sizes(synth: Synthesized) -> None:
    fleet = synth.settings.fleet
    (group,) = resources_of(synth.raw, "AWS::AutoScaling::AutoScalingGroup")
    assert (group["MinSize"], group["MaxSize"]) == (str(fleet.min_instances), str(fleet.max_instances))
    # Not desired_instances (a planning figure): the size the group runs at, read at each deploy.
    assert (
        set(group["DesiredCapacity"]) == {"Fn::GetAtt"}
        and group["DesiredCapacity"]["Fn::GetAtt"][1] == "Size"
    )


def test_launch_template_hardening(synth: Synthesized) -> None:
    (template,) = resources_of(synth.raw, "AWS::EC2::LaunchTemplate")
    data = template["LaunchTemplateData"]
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    assert "KeyName" not in data
    assert data["InstanceType"] == synth.settings.fleet.instance_type
    assert all(device["Ebs"]["Encrypted"] for device in data["BlockDeviceMappings"])
    plan = boot_plan_of(synth.raw)
    processes = synth.settings.fleet.worker_processes_per_instance
    assert plan.unit_names() == [f"consumer-worker@{i}" for i in range(1, processes + 1)]
    worker = instance_units(synth.raw)["consumer-worker@.service"]
    assert f"consumer run --env {synth.settings.env} --config-dir /opt/consumer/src/config" in worker
    assert "Restart=on-failure" in worker
    collected = plan.agent_config["metrics"]["metrics_collected"]
    assert "emf" in plan.agent_config["logs"]["metrics_collected"] and {"mem", "disk"} <= set(collected)


def test_termination_lifecycle_hook(synth: Synthesized) -> None:
    # Part of the group itself, so a replacement group has it from its first instance.
    synth.template.has_resource_properties(
        "AWS::AutoScaling::AutoScalingGroup",
        {
            "LifecycleHookSpecificationList": [
                {
                    "LifecycleHookName": f"{synth.settings.application_name}-{synth.settings.env}-release-leases",
                    "LifecycleTransition": "autoscaling:EC2_INSTANCE_TERMINATING",
                    "HeartbeatTimeout": synth.settings.fleet.lifecycle_hook_timeout_seconds,
                    "DefaultResult": "CONTINUE",
                }
            ]
        },
    )


def _alarm(synth: Synthesized, suffix: str) -> dict[str, Any]:
    (found,) = [
        a for a in resources_of(synth.raw, "AWS::CloudWatch::Alarm") if a["AlarmName"].endswith(f"-{suffix}")
    ]
    return found


def _queries(alarm: dict[str, Any]) -> tuple[str, dict[str, dict[str, Any]]]:
    """The alarm's expression and its metrics by id."""
    (expression,) = [m["Expression"] for m in alarm["Metrics"] if m.get("ReturnData", True)]
    return expression, {m["Id"]: m["MetricStat"] for m in alarm["Metrics"] if "MetricStat" in m}


def test_seed_alarm_leases_at_two_n(synth: Synthesized) -> None:
    """ReturnedItemCount of the leases table's Scan >= 2N for one 5-minute period adds one instance:
    leases read as the Scans' items over the scans (any number of pages), N the open shards listed
    (the configured estimate until the first listing is published). tests/infra/test_alarms_reach_people.py
    evaluates it."""
    settings = synth.settings
    alarm = _alarm(synth, f"leases-at-{settings.scaling.returned_item_count_multiplier:g}N")
    expression, metrics = _queries(alarm)
    n = settings.table.expected_partitions()[0]
    assert expression == f"(items / scans) / FILL(FILL(openShards, REPEAT), {n})"
    items = metrics["items"]
    assert (items["Metric"]["Namespace"], items["Metric"]["MetricName"], items["Stat"]) == (
        "AWS/DynamoDB",
        "ReturnedItemCount",
        "Sum",
    )
    assert sorted(items["Metric"]["Dimensions"], key=lambda d: d["Name"]) == [
        {"Name": "Operation", "Value": "Scan"},
        {"Name": "TableName", "Value": settings.leases_table_name},
    ]
    assert metrics["scans"]["Metric"]["MetricName"] == "LeaseTableScans"
    assert metrics["openShards"]["Metric"]["MetricName"] == "OpenShards"
    assert {m["Period"] for m in metrics.values()} == {settings.scaling.period_seconds} == {300}
    assert alarm["Threshold"] == settings.scaling.returned_item_count_multiplier
    assert alarm["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert alarm["EvaluationPeriods"] == settings.scaling.evaluation_periods == 1
    # Its action is the scaling policy that adds exactly one instance.
    (action,) = alarm["AlarmActions"]
    policy = synth.raw["Resources"][action["Fn::GetAtt"][0]]
    assert policy["Type"] == "AWS::AutoScaling::ScalingPolicy"
    assert policy["Properties"]["AdjustmentType"] == "ChangeInCapacity"
    assert policy["Properties"]["ScalingAdjustment"] == 1
    group = policy["Properties"]["AutoScalingGroupName"]["Ref"]
    assert synth.raw["Resources"][group]["Type"] == "AWS::AutoScaling::AutoScalingGroup"


def test_prod_falls_back_to_n_of_44(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    # prod.yaml: ceil(12000/3000 + 40000/1000) = 44 partitions > ceil(300 GB / 10) = 30.
    assert expected_partitions(prod.settings) == 44
    expression, _ = _queries(_alarm(prod, "leases-at-2N"))
    assert expression.endswith("REPEAT), 44)")


def test_scale_in_alarm_removes_one_instance(synth: Synthesized) -> None:
    scale_in = _alarm(synth, "leases-near-N")
    assert scale_in["ComparisonOperator"] == "GreaterThanOrEqualToThreshold"
    assert scale_in["EvaluationPeriods"] == synth.settings.scaling.scale_in_evaluation_periods
    expression, metrics = _queries(scale_in)
    assert expression.startswith(f"IF(instances > {synth.settings.fleet.min_instances} AND")
    assert {"items", "scans", "openShards", "records", "instances"} == set(metrics)
    (action,) = scale_in["AlarmActions"]
    policy = synth.raw["Resources"][action["Fn::GetAtt"][0]]["Properties"]
    assert policy["ScalingAdjustment"] == -1


def test_health_alarms_beyond_the_seed(synth: Synthesized) -> None:
    names = {a["AlarmName"] for a in resources_of(synth.raw, "AWS::CloudWatch::Alarm")}
    prefix = f"{synth.settings.application_name}-{synth.settings.env}"
    for suffix in (
        "lag-near-retention",
        "records-lost-to-trimming",
        "dead-letters",
        "leases-table-throttled",
        "ready-shards-unassigned",
    ):
        assert f"{prefix}-{suffix}" in names
    (lag,) = [
        a
        for a in resources_of(synth.raw, "AWS::CloudWatch::Alarm")
        if a["AlarmName"].endswith("lag-near-retention")
    ]
    assert lag["Threshold"] == synth.settings.scaling.lag_alarm_millis == 6 * 3_600_000
    assert "MAX(MillisBehindLatest)" in lag["Metrics"][0]["Expression"]


def test_log_groups_with_retention(synth: Synthesized) -> None:
    settings = synth.settings
    for name in (settings.worker_log_group, settings.application_log_group):
        synth.template.has_resource_properties(
            "AWS::Logs::LogGroup", {"LogGroupName": name, "RetentionInDays": settings.logs.retention_days}
        )


def _metric_arrays(widget: dict[str, Any]) -> list[list[Any]]:
    return [m for m in widget["properties"]["metrics"]]


def test_every_dashboard_widget_shows_its_metrics(synth: Synthesized) -> None:
    body = dashboard_body(synth.raw)
    by_title = {w["properties"].get("title"): w for w in body["widgets"]}
    for spec in dashboard_widgets(synth.settings):
        if not spec.metrics and not spec.formulas:
            continue  # off in this environment: a text panel says so (test_dashboard_parity)
        widget = by_title[spec.title]
        assert widget["properties"]["yAxis"]["left"]["label"] == spec.y_label
        rendered = [m[0]["expression"] for m in _metric_arrays(widget) if isinstance(m[0], dict)]
        for metric in spec.metrics:
            if metric.per is not None:
                search = metric.search_expression(60)
                assert any(search in text for text in rendered), (spec.title, search)
                continue
            dims = [part for pair in metric.dimensions for part in pair]
            matches = [
                m
                for m in _metric_arrays(widget)
                if isinstance(m[0], str)
                and m[:2] == [metric.namespace, metric.name]
                and all(d in m for d in dims)
            ]
            assert matches, (spec.title, metric.name)
            assert matches[0][-1].get("stat", "Average") == metric.statistic  # dashboards default to Average
        for line in spec.lines:
            values = [a["value"] for a in widget["properties"]["annotations"]["horizontal"]]
            assert line.value in values


def test_dashboard_counters_are_rates_per_second_with_zero_for_empty_periods(synth: Synthesized) -> None:
    """Every counter (a Sum) is FILL(x, 0) / period, as the local dashboard draws it: the same panel
    reads the same at 60 s and at 5 s periods, and a quiet period shows as zero, not as a line."""
    body = dashboard_body(synth.raw)
    by_title = {w["properties"].get("title"): w for w in body["widgets"]}
    counters = 0
    for spec in dashboard_widgets(synth.settings):
        if not spec.metrics:
            continue
        arrays = _metric_arrays(by_title[spec.title])
        expressions = [m[0]["expression"] for m in arrays if isinstance(m[0], dict)]
        # The metrics a PERIOD-based rate divides: id -> [namespace, name, ...].
        by_id = {m[-1].get("id"): m for m in arrays if isinstance(m[0], str)}
        rated = {
            tuple(by_id[match.group(1)][:2])
            for e in expressions
            if (match := re.fullmatch(r"FILL\((m\d+), 0\) / PERIOD\(\1\)", e))
        }
        for metric in spec.metrics:
            if metric.statistic != "Sum":
                continue
            counters += 1
            assert metric.per_second, (spec.title, metric.name)
            assert spec.unit == "Count/Second" and "/s" in spec.y_label, spec.title
            if metric.per is not None:
                inner = metric.search_expression(60)
                inner = f"{metric.across}({inner})" if metric.across else inner
                assert f"FILL({inner}, 0) / 60" in expressions, (spec.title, metric.name)
            else:
                assert (metric.namespace, metric.name) in rated, (spec.title, metric.name)
    # processed, writes x2, RCU and WCU x2, throttles x3, retries, dead letters, trimmed
    assert counters >= 12


def test_dashboard_leases_widget_against_config(synth: Synthesized) -> None:
    body = dashboard_body(synth.raw)
    (widget,) = [w for w in body["widgets"] if w["properties"].get("title", "").startswith("Leases total")]
    (metric,) = [m for m in widget["properties"]["metrics"] if m[:2] == ["AWS/DynamoDB", "ReturnedItemCount"]]
    assert metric[:6] == [
        "AWS/DynamoDB",
        "ReturnedItemCount",
        "Operation",
        "Scan",
        "TableName",
        synth.settings.leases_table_name,
    ]
    n = synth.settings.table.expected_partitions()[0]
    values = {a["value"] for a in widget["properties"]["annotations"]["horizontal"]}
    assert synth.settings.scaling.returned_item_count_multiplier * n in values
    # The dashboard's 2N line is the scale-out alarm's threshold, not a second computation of it.
    assert scaling_thresholds(synth.settings).scale_out_at in values
    titles = {w["properties"].get("title") for w in body["widgets"]}
    for expected in (
        "Records processed vs table writes",
        "Current leases per worker",
        "Leases table: consumed vs provisioned capacity",
        "Leases table throttles",
        "CPU per instance",
        "Memory and disk per instance",
        "CPU per worker",
        "Memory per worker",
        "MillisBehindLatest per worker",
        "Retries and dead letters",
        "Records lost to trimming",
    ):
        assert expected in titles


def test_pipeline_resources_only_when_enabled(synthesized: dict[str, Synthesized]) -> None:
    synthesized["prod"].template.resource_count_is("AWS::EMRServerless::Application", 1)
    synthesized["prod"].template.has_resource_properties(
        "AWS::S3::Bucket", {"BucketName": f"orders-stream-consumer-prod-{FIXTURE_ACCOUNT}-{FIXTURE_REGION}"}
    )
    synthesized["dev"].template.resource_count_is("AWS::EMRServerless::Application", 0)


def test_cdk_nag_ran_and_reported_no_unacknowledged_error(synth: Synthesized) -> None:
    # app.synth() raised in the fixture on an unacknowledged error; the report proves the pack ran.
    report = json.loads((synth.assembly_dir / "validation-report.json").read_text())
    # One report per stack (the stateful and the stateless one).
    reports = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert len(reports) == len(synth.stacks) == 2
    for nag in reports:
        assert nag["conclusion"] == "success"
        assert nag["violations"] == []
        for accepted in nag["suppressedViolations"]:
            assert len(accepted["reason"]) > 40, accepted["acknowledgedId"]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]
