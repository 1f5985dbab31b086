"""``cdk synth`` of an environment whose source is a Kinesis data stream (source.kind: kinesis): the
stream created by the data stack (or, imported, no stream resource), the workers granted exactly
what consumer/streams/kinesis.py calls on exactly that stream and nothing of DynamoDB Streams, the
dashboard's and alarms' Kinesis metrics, and cdk-nag and cfn-lint passing on both templates.

Two environments, each synthesized once for this module (about 12 CPU-s each): dev with the block
docs/deploy.md shows (a stream the stack creates, retention 7 days, provisioned, table: not
created), and dev reading an imported stream encrypted with a customer-managed key."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.permissions import KINESIS_ACTIONS, STREAM_ACTIONS
from tests.infra.alarm_walk import alarms_of, walk_alarm_actions
from tests.infra.conftest import (
    FIXTURE_ACCOUNT,
    FIXTURE_REGION,
    REPO,
    Synthesized,
    dashboard_body,
    deployable_config,
    resolve_join,
    resources_of,
    synthesize,
)
from tools.dashboard.widgets import widgets_for

pytestmark = pytest.mark.infra

CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
STREAM = "orders-events"
IMPORTED_STREAM = "payments-events"
IMPORTED_ARN = f"arn:aws:kinesis:{FIXTURE_REGION}:{FIXTURE_ACCOUNT}:stream/{IMPORTED_STREAM}"
KEY_ARN = f"arn:aws:kms:{FIXTURE_REGION}:{FIXTURE_ACCOUNT}:key/0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
# Partition as the stack writes it (AWS::Partition becomes <TOKEN>), account and region pinned.
CREATED_ARN = f"arn:<TOKEN>:kinesis:{FIXTURE_REGION}:{FIXTURE_ACCOUNT}:stream/{STREAM}"
RETENTION_HOURS = 168
SHARDS = 6


def _synthesize(tmp_path_factory: pytest.TempPathFactory, name: str, changes: dict[str, Any]) -> Synthesized:
    root = tmp_path_factory.mktemp(name)
    config = deployable_config(root)
    path = config / "dev.yaml"
    data = yaml.safe_load(path.read_text())
    for key, value in changes.items():
        data.setdefault(key, {}).update(value)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return synthesize("dev", root / "out", config_dir=config)


def documented_example() -> dict[str, Any]:
    """The Kinesis block docs/deploy.md shows (between its kinesis-example markers)."""
    text = (REPO / "docs" / "deploy.md").read_text()
    block = text.split("<!-- kinesis-example:start -->", 1)[1].split("<!-- kinesis-example:end -->", 1)[0]
    found: dict[str, Any] = yaml.safe_load(block.strip().removeprefix("```yaml").removesuffix("```"))
    return found


@pytest.fixture(scope="module")
def created(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    """dev with docs/deploy.md's block: a stream the stack creates, table: not created."""
    example = documented_example()
    source = example["source"]
    assert (source["stream_name"], source["shard_count"], source["retention_hours"]) == (
        STREAM,
        SHARDS,
        RETENTION_HOURS,
    )
    assert source["create"] is True and example["table"] == {"create": False}
    return _synthesize(tmp_path_factory, "kinesis-created", example)


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> Synthesized:
    return _synthesize(
        tmp_path_factory,
        "kinesis-imported",
        {
            "source": {
                "kind": "kinesis",
                "stream_arn": IMPORTED_ARN,
                "kms_key_arn": KEY_ARN,
                "shard_count": 3,
            },
            "scaling": {"alarm_topic_email": "oncall@orders-team.internal"},
        },
    )


@pytest.fixture(params=["created", "imported"])
def synth(request: pytest.FixtureRequest) -> Synthesized:
    found: Synthesized = request.getfixturevalue(request.param)
    return found


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _worker_statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        statement
        for logical_id, resource in raw["Resources"].items()
        if resource["Type"] == "AWS::IAM::Policy" and logical_id.startswith("WorkerPolicy")
        for statement in resource["Properties"]["PolicyDocument"]["Statement"]
    ]


def test_a_created_stream_has_its_shards_retention_and_the_managed_key(created: Synthesized) -> None:
    (stream,) = [r for r in created.raw["Resources"].values() if r["Type"] == "AWS::Kinesis::Stream"]
    assert stream["Properties"] | {"Tags": None} == {
        "Name": STREAM,
        "ShardCount": SHARDS,
        "RetentionPeriodHours": RETENTION_HOURS,
        "StreamModeDetails": {"StreamMode": "PROVISIONED"},
        # cdk-nag's KDS1 (encrypted) and KDS3 (with aws/kinesis, not a key billed per call).
        "StreamEncryption": {"EncryptionType": "KMS", "KeyId": "alias/aws/kinesis"},
        "Tags": None,
    }
    assert stream["DeletionPolicy"] == stream["UpdateReplacePolicy"] == "Retain"
    # It is the stateful stack's, beside the leases tables; table: (create: false) is not there.
    (data,) = [t for name, t in created.stacks.items() if name.endswith("-data")]
    assert any(r["Type"] == "AWS::Kinesis::Stream" for r in data["Resources"].values())
    tables = {t["TableName"] for t in resources_of(created.raw, "AWS::DynamoDB::Table")}
    assert tables == {created.settings.leases_table_name, created.settings.workers_table_name}
    assert resolve_join(created.raw["Outputs"]["StreamArn"]["Value"]) == "<TOKEN>"  # GetAtt of the stream
    assert created.raw["Outputs"]["SourceStreamName"]["Value"] == STREAM


def test_an_imported_stream_is_no_resource_of_the_stacks(imported: Synthesized) -> None:
    kinds = {r["Type"] for r in imported.raw["Resources"].values()}
    assert "AWS::Kinesis::Stream" not in kinds and "AWS::KMS::Key" not in kinds
    assert imported.raw["Outputs"]["StreamArn"]["Value"] == IMPORTED_ARN


def test_the_workers_may_read_exactly_the_stream_and_nothing_of_dynamodb_streams(synth: Synthesized) -> None:
    statements = _worker_statements(synth.raw)
    kinesis = [s for s in statements if any(a.startswith("kinesis:") for a in _as_list(s["Action"]))]
    assert len(kinesis) == 1
    (reads,) = kinesis
    assert (
        sorted(_as_list(reads["Action"]))
        == sorted(KINESIS_ACTIONS)
        == sorted(
            [
                "kinesis:DescribeStreamSummary",
                "kinesis:ListShards",
                "kinesis:GetShardIterator",
                "kinesis:GetRecords",
            ]
        )
    )
    expected = IMPORTED_ARN if synth.settings.source.stream_arn else CREATED_ARN
    assert [resolve_join(r) for r in _as_list(reads["Resource"])] == [expected]
    assert "Condition" not in reads
    actions = {a for s in statements for a in _as_list(s["Action"])}
    # Neither DynamoDB Streams' reads nor a DescribeTable of table: (which finds a table's stream).
    assert not actions & set(STREAM_ACTIONS)
    for statement in statements:
        names = {resolve_join(r) for r in _as_list(statement["Resource"])}
        assert not [n for n in names if "/stream/" in n and ":dynamodb:" in n], statement
        if "dynamodb:DescribeTable" in _as_list(statement["Action"]):  # the leases tables' own
            tables = {n.rsplit("/", 1)[-1] for n in names}
            assert tables == {synth.settings.leases_table_name, synth.settings.workers_table_name}


def test_kms_decrypt_only_on_the_configured_key_for_this_streams_records(
    created: Synthesized, imported: Synthesized
) -> None:
    decrypt = [s for s in _worker_statements(imported.raw) if "kms:Decrypt" in _as_list(s["Action"])]
    assert decrypt == [
        {
            "Action": "kms:Decrypt",
            "Condition": {"StringEquals": {"kms:EncryptionContext:aws:kinesis:arn": IMPORTED_ARN}},
            "Effect": "Allow",
            "Resource": KEY_ARN,
        }
    ]
    # aws/kinesis needs no grant: the created stream's workers get no KMS action at all.
    assert not [
        s for s in _worker_statements(created.raw) if any(a.startswith("kms:") for a in _as_list(s["Action"]))
    ]


def test_the_alarms_watch_the_streams_own_metrics(created: Synthesized) -> None:
    alarms = alarms_of(created)
    lag_millis = 0.25 * RETENTION_HOURS * 3_600_000
    assert (
        created.settings.scaling.lag_alarm_millis_over(created.settings.source.stream_retention_hours)
        == lag_millis
    )
    assert alarms["lag-near-retention"]["Threshold"] == lag_millis
    assert f"{RETENTION_HOURS} h retention" in alarms["lag-near-retention"]["AlarmDescription"]
    age = alarms["stream-iterator-age-near-retention"]
    assert (age["Namespace"], age["MetricName"], age["Statistic"]) == (
        "AWS/Kinesis",
        "GetRecords.IteratorAgeMilliseconds",
        "Maximum",
    )
    assert age["Dimensions"] == [{"Name": "StreamName", "Value": STREAM}]
    assert age["Threshold"] == lag_millis
    throttled = alarms["stream-reads-throttled"]
    assert (throttled["Namespace"], throttled["MetricName"], throttled["Statistic"]) == (
        "AWS/Kinesis",
        "ReadProvisionedThroughputExceeded",
        "Sum",
    )
    assert throttled["Dimensions"] == [{"Name": "StreamName", "Value": STREAM}]
    assert (throttled["EvaluationPeriods"], throttled["DatapointsToAlarm"]) == (5, 3)
    # Processing stopped: the stream was written to (IncomingRecords), not the table.
    stopped = alarms["processing-stopped"]
    writes = [m for m in stopped["Metrics"] if m["Id"] == "writes"]
    assert writes[0]["MetricStat"]["Metric"] == {
        "Namespace": "AWS/Kinesis",
        "MetricName": "IncomingRecords",
        "Dimensions": [{"Name": "StreamName", "Value": STREAM}],
    }
    # No alarm and no panel watches table: (orders-dev), which the fleet does not read.
    watched = json.dumps([list(alarms.values()), dashboard_body(created.raw)])
    assert created.settings.table.source_table_name not in watched.replace(
        created.settings.leases_table_name, ""
    )


def test_the_scale_out_alarm_is_the_seeds_with_n_the_streams_shards(created: Synthesized) -> None:
    scale_out = alarms_of(created)["leases-at-2N"]
    assert scale_out["Threshold"] == 2
    expressions = [m["Expression"] for m in scale_out["Metrics"] if "Expression" in m]
    assert expressions == [f"(items / scans) / FILL(FILL(openShards, REPEAT), {SHARDS})"]
    items = next(m for m in scale_out["Metrics"] if m["Id"] == "items")["MetricStat"]["Metric"]
    assert items["MetricName"] == "ReturnedItemCount"


def test_the_streams_alarms_page_through_the_topic(imported: Synthesized) -> None:
    paged = walk_alarm_actions(imported)  # every action: the group's policies, or the topic
    for name in ("stream-iterator-age-near-retention", "stream-reads-throttled", "processing-stopped"):
        assert paged.count(name) == 1, (name, sorted(paged))


def test_the_dashboard_draws_the_streams_metrics(synth: Synthesized) -> None:
    body = dashboard_body(synth.raw)
    titles = [
        w["properties"].get("title") or w["properties"].get("markdown", "").partition("\n")[0][4:]
        for w in body["widgets"]
    ]
    for widget in widgets_for(synth.settings):
        assert widget.title in titles
    assert "Records processed vs table writes" not in titles
    assert "Cost: stream reads per shard and the leases table" not in titles
    name = synth.settings.source.kinesis_stream_name
    drawn = {
        (m[0], m[1], m[3])
        for w in body["widgets"]
        for m in w["properties"].get("metrics", [])
        if isinstance(m, list) and len(m) >= 4 and m[0] == "AWS/Kinesis"
    }
    assert drawn == {
        ("AWS/Kinesis", metric, name)
        for metric in (
            "IncomingRecords",
            "GetRecords.Records",
            "GetRecords.IteratorAgeMilliseconds",
            "GetRecords.Bytes",
            "ReadProvisionedThroughputExceeded",
        )
    }
    (reads,) = [
        w for w in body["widgets"] if w["properties"].get("title") == "Stream reads vs the shards' limit"
    ]
    shards = synth.settings.source.shard_count
    assert [a["value"] for a in reads["properties"]["annotations"]["horizontal"]] == [shards * 2 * 2**20]


def test_cfn_lint_passes_on_both_stacks(created: Synthesized, imported: Synthesized) -> None:
    paths = [str(path) for synth in (created, imported) for path in synth.template_paths]
    lint = subprocess.run([CFN_LINT, *paths], capture_output=True, text=True, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_cdk_nag_ran_and_reported_no_unacknowledged_error(synth: Synthesized) -> None:
    # app.synth() raised in the fixture on an unacknowledged error; the report proves the pack ran.
    report = json.loads((synth.assembly_dir / "validation-report.json").read_text())
    reports = [r for r in report["pluginReports"] if r["pluginName"] == "AwsSolutions"]
    assert len(reports) == len(synth.stacks) == 2
    for nag in reports:
        assert nag["conclusion"] == "success"
        assert nag["violations"] == []


def test_both_dashboards_draw_the_kinesis_list_and_say_why_a_line_is_missing(
    synth: Synthesized, tmp_path: Path
) -> None:
    """The DynamoDB environments' dashboard checks (tests/infra/test_dashboard_parity.py), on these."""
    from tests.infra.test_dashboard_parity import (
        test_both_dashboards_draw_every_widget_of_the_one_list as draws_the_list,
    )
    from tests.infra.test_dashboard_parity import (
        test_no_cloudwatch_panel_is_empty_without_saying_why as says_why,
    )

    draws_the_list("dev", {"dev": synth}, tmp_path)
    says_why("dev", {"dev": synth})


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        (
            {"stream_mode": "ON_DEMAND"},
            {
                "StreamModeDetails": {"StreamMode": "ON_DEMAND"},
                "StreamEncryption": {"KeyId": "alias/aws/kinesis"},
            },
        ),
        (
            {"kms_key_arn": KEY_ARN},
            {"ShardCount": 4, "StreamEncryption": {"EncryptionType": "KMS", "KeyId": KEY_ARN}},
        ),
    ],
)
def test_a_created_stream_on_demand_or_under_a_customer_managed_key(
    source: dict[str, Any], expected: dict[str, Any]
) -> None:
    """The construct alone in a bare stack (no app, no nag: a second of jsii)."""
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Match, Template

    from ground.settings import SourceSettings
    from infra.source_stream import KinesisSource

    stack = Stack(App(), "Bare")
    settings = SourceSettings(kind="kinesis", stream_name=STREAM, create=True, **source)
    KinesisSource(stack, "SourceStream", settings=settings)
    template = Template.from_stack(stack)
    template.has_resource_properties("AWS::Kinesis::Stream", Match.object_like(expected))
    if "ON_DEMAND" in str(source):
        assert "ShardCount" not in template.find_resources("AWS::Kinesis::Stream").popitem()[1]["Properties"]
    template.resource_count_is("AWS::KMS::Key", 0)  # an imported key, or aws/kinesis: none created
