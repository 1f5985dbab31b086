"""``cdk synth`` of an environment whose fleet serves three tables (``streams:``): each table
created or imported as its entry says, the instance role granted each stream's reads on that
stream only, one leases table for all, a dashboard row and the alarms of each stream."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from infra.permissions import STREAM_ACTIONS
from tests.infra.alarm_walk import walk_alarm_actions
from tests.infra.conftest import (
    FIXTURE_ACCOUNT,
    FIXTURE_REGION,
    Synthesized,
    dashboard_body,
    deployable_config,
    resolve_join,
    resources_of,
    synthesize,
)

pytestmark = pytest.mark.infra

PAYMENTS_STREAM = (
    f"arn:aws:dynamodb:{FIXTURE_REGION}:{FIXTURE_ACCOUNT}:table/payments-v2/stream/2026-01-02T03:04:05.678"
)


def _own(env: str, name: str, **processing: Any) -> dict[str, Any]:
    """An entry's processing: its own change log and dead letter, under a prefix of its own in the
    environment's bucket (the stack creates the first stream's; the top level's are the env's)."""
    bucket = f"orders-stream-consumer-{env}-{{account}}-{{region}}"
    return {
        "options": {"destination": f"s3://{bucket}/{name}"},
        "dead_letter": {"type": "s3", "uri": f"s3://{bucket}/dead-{name}"},
        **processing,
    }


def streams(env: str) -> list[dict[str, Any]]:
    return [
        # The first is the env's own table as its config file has it (created, orders-<env>), layered
        # over; in prod, where the pipeline reads it, at the change log the pipeline is given.
        {"processing": _own(env, "changes" if env == "prod" else "orders")},
        {
            "table": {"name": "customers", "partition_key": {"name": "id", "type": "N"}, "sort_key": None},
            "processing": _own(env, "customers"),
        },
        {
            "table": {
                "name": "payments",
                "create": False,
                "existing_table_name": "payments-v2",
                "existing_stream_arn": PAYMENTS_STREAM,
            },
            "processing": _own(
                env, "payments", processor="dynamodb_replica", options={"table": "payments-replica"}
            ),
        },
    ]


def _synthesize_three(tmp_path_factory: pytest.TempPathFactory, env: str) -> Synthesized:
    root = tmp_path_factory.mktemp(f"streams-{env}")
    config = deployable_config(root)
    path = config / f"{env}.yaml"
    data = yaml.safe_load(path.read_text())
    data["streams"] = streams(env)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return synthesize(env, root / "out", config_dir=config)


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize_three(tmp_path_factory, "dev")


def _fleet_statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for logical_id, resource in raw["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith(("Fleet", "WorkerPolicy"))
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_each_table_is_created_or_imported_as_its_entry_says(three: Synthesized) -> None:
    assert [view.table.source_table_name for view in three.settings.per_stream()] == [
        "orders-dev",
        "customers",
        "payments-v2",
    ]
    tables = {t["TableName"]: t for t in resources_of(three.raw, "AWS::DynamoDB::Table")}
    # dev's table and customers are created (each with its own keys and a stream), payments imported.
    assert "payments-v2" not in tables and "payments" not in tables
    assert tables["orders-dev"]["KeySchema"] == [
        {"AttributeName": "pk", "KeyType": "HASH"},
        {"AttributeName": "sk", "KeyType": "RANGE"},
    ]
    customers = tables["customers"]
    assert customers["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    assert customers["StreamSpecification"] == {"StreamViewType": "NEW_AND_OLD_IMAGES"}
    # One leases table (and its workers table) serves the three.
    assert three.settings.leases_table_name in tables and three.settings.workers_table_name in tables
    outputs = three.raw["Outputs"]
    assert {"SourceTableName", "SourceTableName1", "SourceTableName2", "StreamArn2"} <= set(outputs)


def test_the_role_reads_each_stream_and_nothing_account_wide(three: Synthesized) -> None:
    statements = _fleet_statements(three.raw)
    (streams,) = [s for s in statements if sorted(_listed(s["Action"])) == sorted(STREAM_ACTIONS)]
    resources = [resolve_join(r) for r in _listed(streams["Resource"])]
    assert resources[2] == PAYMENTS_STREAM
    assert [r.rsplit(":", 1)[-1] for r in resources[:2]] == [
        "table/orders-dev/stream/*",
        "table/customers/stream/*",
    ]
    (describe,) = [s for s in statements if _listed(s["Action"]) == ["dynamodb:DescribeTable"]]
    tables = [resolve_join(r).rsplit(":", 1)[-1] for r in _listed(describe["Resource"])]
    assert tables == ["table/orders-dev", "table/customers", "table/payments-v2"]
    # Each stream's own destination: both change logs' prefixes, and the replica table.
    puts = {
        resolve_join(r)
        for s in statements
        if "s3:PutObject" in _listed(s["Action"])
        for r in _listed(s["Resource"])
    }
    bucket = f"orders-stream-consumer-dev-{FIXTURE_ACCOUNT}-{FIXTURE_REGION}"  # dev's
    written = ("orders", "customers", "dead-orders", "dead-customers", "dead-payments")
    assert {f"arn:<TOKEN>:s3:::{bucket}/{prefix}/*" for prefix in written} <= puts
    assert not any(
        r == "*"
        for s in statements
        if str(s["Action"]).startswith(("dynamodb", "['dynamodb"))
        for r in _listed(s["Resource"])
    )


def test_a_dashboard_row_and_alarms_per_stream(three: Synthesized) -> None:
    body = dashboard_body(three.raw)
    titles = [w["properties"].get("title") for w in body["widgets"] if w["type"] == "metric"]
    for table in ("orders-dev", "customers", "payments-v2"):
        assert f"Stream {table}: records processed and lag" in titles
    alarms = {a["AlarmName"]: a for a in resources_of(three.raw, "AWS::CloudWatch::Alarm")}
    prefix = f"{three.settings.name_prefix}"
    for table in ("orders-dev", "customers", "payments-v2"):
        for kind in ("lag-near-retention", "records-lost-to-trimming", "dead-letters"):
            alarm = alarms[f"{prefix}-{table}-{kind}"]
            (query,) = [m["Expression"] for m in alarm["Metrics"] if "Expression" in m]
            assert f"Stream = '{table}'" in query and "Stream, WorkerIdentifier" in query
            # They page whom the fleet-wide alarms page (dev names no topic: nobody).
            assert alarm.get("AlarmActions") == alarms[f"{prefix}-dead-letters"].get("AlarmActions")
    # The fleet-wide alarms stay, adding every stream up.
    assert f"{prefix}-lag-near-retention" in alarms and f"{prefix}-dead-letters" in alarms


def test_in_prod_every_stream_alarm_pages_through_a_topic_cloudwatch_may_publish_to(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Prod names an encrypted topic: each stream's alarms are walked to it, its policy and its key."""
    prod = _synthesize_three(tmp_path_factory, "prod")
    paged = walk_alarm_actions(prod)
    for table in ("orders", "customers", "payments-v2"):  # prod imports its table `orders`
        for kind in ("lag-near-retention", "records-lost-to-trimming", "dead-letters"):
            assert paged.count(f"{table}-{kind}") == 1, (table, kind, sorted(paged))
    assert prod.settings.scaling.alarm_topic_encrypted
