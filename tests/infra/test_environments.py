"""Environments that coexist: dev and prod in one account share no physical name, and no name of a
global resource (buckets; dashboards and IAM across regions) repeats for another account or region;
each pins its account and region; prod imports its table unless told to create one; a deploy must
name its environment, while `cdk bootstrap aws://ACCOUNT/REGION` works without one; local keeps the
names the emulator, the demo and its dashboard use."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from ground.settings import load_settings
from infra.errors import InfraConfigError
from tests.infra.cdk_cli import CDK, NO_CREDENTIALS, offline_environment, run
from tests.infra.conftest import (
    FIXTURE_ACCOUNT,
    FIXTURE_REGION,
    REPO,
    Synthesized,
    deployable_config,
    edit_yaml,
    resolve_join,
    resources_of,
    synthesize,
)

pytestmark = pytest.mark.infra

# Top-level resource properties that are names in the account (two stacks must not share one).
PHYSICAL_NAMES = {
    "AlarmName",
    "AutoScalingGroupName",
    "BucketName",
    "DashboardName",
    "LifecycleHookName",
    "LogGroupName",
    "Name",  # AWS::EMRServerless::Application
    "RoleName",
    "TableName",
    "TopicName",
    "QueueName",
}
# Other top-level ...Name properties: references to a name above, or names local to their parent.
NOT_PHYSICAL = {
    ("AWS::AutoScaling::LifecycleHook", "AutoScalingGroupName"),
    ("AWS::AutoScaling::ScalingPolicy", "AutoScalingGroupName"),
    ("AWS::CloudWatch::Alarm", "MetricName"),
    ("AWS::EC2::VPCEndpoint", "ServiceName"),  # the AWS service it reaches
    ("AWS::SNS::Topic", "DisplayName"),  # shown in notifications, not unique
    ("AWS::IAM::Policy", "PolicyName"),  # inline policy: its name is scoped to the role
    # Unique per scalable target (the leases table's read or write capacity).
    ("AWS::ApplicationAutoScaling::ScalingPolicy", "PolicyName"),
    ("Custom::FleetSize", "StackName"),  # the stack it reads the group of
    ("Custom::FleetSizeCarried", "StackName"),
    ("Custom::FleetSizeCarried", "GroupName"),  # the group it sets (a Ref)
}


def physical_names(raw: dict[str, Any]) -> set[tuple[str, str]]:
    """(resource type, name) of every explicit physical name; fails on an unclassified ...Name."""
    names: set[tuple[str, str]] = set()
    for resource in raw["Resources"].values():
        kind = resource["Type"]
        for key, value in resource.get("Properties", {}).items():
            if not key.endswith("Name") or (kind, key) in NOT_PHYSICAL:
                continue
            assert key in PHYSICAL_NAMES, f"classify {kind}.{key} in this test"
            names.add((kind, resolve_join(value)))
    return names


def metric_namespaces(raw: dict[str, Any]) -> set[str]:
    """Every CloudWatch namespace the stack publishes to or reads, except AWS's own (AWS/...)."""
    text = json.dumps(raw)
    found = set(re.findall(r'SCHEMA\(\\+"([^"\\]+)', text))
    found |= set(re.findall(r'\\+"namespace\\+": \\+"([^"\\]+)', text))  # agent config in user data
    found |= set(re.findall(r'"Namespace": "([^"]+)"', text))
    for body in resources_of(raw, "AWS::CloudWatch::Dashboard"):
        found |= set(re.findall(r'\\?"namespace\\?":\s*\\?"([^"\\]+)', resolve_join(body["DashboardBody"])))
    return {n for n in found if not n.startswith("AWS/")}


def test_dev_and_prod_in_one_account_share_no_physical_name(synthesized: dict[str, Synthesized]) -> None:
    dev, prod = synthesized["dev"], synthesized["prod"]
    # The configuration puts both in one account and region: exactly the case that must work.
    assert (dev.settings.account, dev.settings.region) == (prod.settings.account, prod.settings.region)
    dev_names, prod_names = physical_names(dev.raw), physical_names(prod.raw)
    kinds = {kind for kind, _ in dev_names}
    assert {"AWS::DynamoDB::Table", "AWS::Logs::LogGroup", "AWS::CloudWatch::Alarm"} <= kinds
    assert "AWS::CloudWatch::Dashboard" in kinds
    assert {name for _, name in dev_names} & {name for _, name in prod_names} == set()
    # The tables each fleet reads and writes, whether the stack creates them or imports them.
    assert dev.settings.table.source_table_name != prod.settings.table.source_table_name
    assert dev.settings.leases_table_name != prod.settings.leases_table_name
    assert dev.settings.workers_table_name != prod.settings.workers_table_name


def test_metric_namespaces_are_scoped_by_environment(synthesized: dict[str, Synthesized]) -> None:
    for env in ("dev", "prod"):
        synth = synthesized[env]
        assert synth.settings.metrics_namespace == f"{synth.settings.application_name}-{env}"
        # Alarms, dashboard and the agent's own metrics all use this environment's namespace only.
        assert metric_namespaces(synth.raw) == {synth.settings.metrics_namespace}, env
    assert metric_namespaces(synthesized["dev"].raw).isdisjoint(metric_namespaces(synthesized["prod"].raw))


def test_log_groups_and_tables_carry_the_environment(synthesized: dict[str, Synthesized]) -> None:
    for env in ("dev", "prod"):
        synth = synthesized[env]
        prefix = f"{synth.settings.application_name}-{env}"
        groups = {g["LogGroupName"] for g in resources_of(synth.raw, "AWS::Logs::LogGroup")}
        assert groups == {f"/{prefix}/lease-worker", f"/{prefix}/application", f"/{prefix}/metrics"}
        tables = {t["TableName"] for t in resources_of(synth.raw, "AWS::DynamoDB::Table")}
        assert {prefix, f"{prefix}-workers"} <= tables


def test_local_keeps_the_names_the_emulator_and_the_demo_use(synthesized: dict[str, Synthesized]) -> None:
    local = load_settings("local", REPO / "config")
    app = local.application_name
    assert local.leases_table_name == local.metrics_namespace == app
    assert local.metrics_log_group == f"/{app}/metrics"
    assert local.workers_table_name == f"{app}-workers"
    assert metric_namespaces(synthesized["local"].raw) == {app}


def test_each_environment_pins_its_account_and_region(synthesized: dict[str, Synthesized]) -> None:
    for env in ("dev", "prod"):
        synth = synthesized[env]
        manifest = json.loads((synth.assembly_dir / "manifest.json").read_text())
        stack = manifest["artifacts"][f"{synth.settings.application_name}-{env}"]
        assert stack["environment"] == f"aws://{synth.settings.account}/{synth.settings.region}"
        # Pinned, yet synthesized offline: no context look-up was left for the CLI to make.
        assert "missing" not in manifest


# Where a physical name must be unique: across every account of the partition, across the regions
# of one account, or only within one account and region. Every resource type with a name of its own
# is classified here, so a new one is a decision, not an accident.
GLOBAL = {"AWS::S3::Bucket"}
ACCOUNT_WIDE = {
    "AWS::CloudWatch::Dashboard",
    "AWS::IAM::Role",
    "AWS::IAM::ManagedPolicy",
    "AWS::IAM::InstanceProfile",
}
REGIONAL = {
    "AWS::AutoScaling::AutoScalingGroup",
    "AWS::CloudWatch::Alarm",
    "AWS::DynamoDB::Table",
    "AWS::EMRServerless::Application",
    "AWS::Logs::LogGroup",
    "AWS::Scheduler::Schedule",  # unique within its schedule group, in one account and region
    "AWS::SNS::Topic",
    "AWS::SQS::Queue",
}


def test_no_global_name_is_shared_by_two_accounts_or_two_regions(
    synthesized: dict[str, Synthesized], tmp_path: Path
) -> None:
    prod = synthesized["prod"]
    config = deployable_config(tmp_path)
    other_account = "135792468024"
    edit_yaml(config / "prod.yaml", {"account": other_account})
    elsewhere = synthesize("prod", tmp_path / "account", config_dir=config)
    edit_yaml(config / "prod.yaml", {"account": FIXTURE_ACCOUNT, "region": "us-east-2"})
    away = synthesize("prod", tmp_path / "region", config_dir=config)
    assert (elsewhere.settings.account, away.settings.region) == (other_account, "us-east-2")
    names = {
        label: physical_names(s.raw)
        for label, s in (("here", prod), ("account", elsewhere), ("region", away))
    }
    kinds = {kind for found in names.values() for kind, _ in found}
    assert kinds <= GLOBAL | ACCOUNT_WIDE | REGIONAL, kinds - (GLOBAL | ACCOUNT_WIDE | REGIONAL)
    assert {"AWS::S3::Bucket", "AWS::CloudWatch::Dashboard"} <= kinds

    def of(label: str, scope: set[str]) -> set[str]:
        return {name for kind, name in names[label] if kind in scope}

    # Another account: no bucket name repeats. Another region of the same account: no bucket,
    # dashboard or IAM name repeats.
    assert of("here", GLOBAL) and of("here", GLOBAL).isdisjoint(of("account", GLOBAL))
    wide = GLOBAL | ACCOUNT_WIDE
    assert of("here", wide).isdisjoint(of("region", wide)), of("here", wide) & of("region", wide)
    # IAM names are CloudFormation's (unique per stack), never given.
    assert not [kind for kind, _ in names["here"] if kind.startswith("AWS::IAM::")]
    # The bucket carries both, as the configuration writes it ({account} and {region} filled in).
    (bucket,) = of("here", GLOBAL)
    assert bucket == f"orders-stream-consumer-prod-{FIXTURE_ACCOUNT}-{FIXTURE_REGION}"


def test_an_aws_environment_without_an_account_is_refused(tmp_path: Path) -> None:
    from infra.application import build_app

    config = deployable_config(tmp_path)
    edit_yaml(config / "dev.yaml", {"account": None})
    with pytest.raises(InfraConfigError, match=r"env dev cannot deploy: account is missing"):
        build_app("dev", config_dir=config, outdir=tmp_path / "out")
    edit_yaml(config / "dev.yaml", {"account": "12345"})
    with pytest.raises(InfraConfigError, match=r"account"):
        build_app("dev", config_dir=config, outdir=tmp_path / "out")


def test_prod_imports_its_table_by_default(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    table = prod.settings.table
    assert table.create is False and table.existing_table_name is None
    created = {t["TableName"] for t in resources_of(prod.raw, "AWS::DynamoDB::Table")}
    assert table.name not in created  # only the leases and workers tables are created
    statements = [
        s for p in resources_of(prod.raw, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]
    ]
    account, region = prod.settings.account, prod.settings.region
    reads = [s for s in statements if "dynamodb:GetRecords" in s["Action"]]
    assert [resolve_join(s["Resource"]) for s in reads] == [
        f"arn:<TOKEN>:dynamodb:{region}:{account}:table/{table.name}/stream/*"
    ]
    describe = [s for s in statements if s["Action"] == "dynamodb:DescribeTable"]
    assert [resolve_join(s["Resource"]) for s in describe] == [
        f"arn:<TOKEN>:dynamodb:{region}:{account}:table/{table.name}"
    ]


def test_creating_the_prod_table_is_an_explicit_opt_in(tmp_path: Path) -> None:
    config = deployable_config(tmp_path)
    edit_yaml(config / "prod.yaml", {"table.create": True})
    created = synthesize("prod", tmp_path / "out", config_dir=config)
    tables = {
        r["Properties"]["TableName"]: r
        for r in created.raw["Resources"].values()
        if r["Type"] == "AWS::DynamoDB::Table"
    }
    source = tables[created.settings.table.name]
    assert source["DeletionPolicy"] == "Retain"
    assert source["Properties"]["ProvisionedThroughput"] == {
        "ReadCapacityUnits": 12000,
        "WriteCapacityUnits": 40000,
    }
    # Both at once is a contradiction, refused with the keys to fix.
    edit_yaml(config / "prod.yaml", {"table.existing_table_name": "orders", "table.existing_stream_arn": "x"})
    with pytest.raises(InfraConfigError, match=r"create: true and existing_table_name"):
        synthesize("prod", tmp_path / "out2", config_dir=config)


def test_an_app_without_an_environment_is_refused() -> None:
    from aws_cdk import App

    from infra.application import BUNDLING_STACKS_CONTEXT, EnvironmentNotChosenError, build_app

    # app.py falls back to "local" when -c env is missing; given the CLI's app, that is refused.
    with pytest.raises(EnvironmentNotChosenError, match=r"cdk deploy -c env=<name>"):
        build_app("local", app=App())
    # A command that builds nothing (the CLI asks to bundle no stack) hears how to bootstrap.
    with pytest.raises(EnvironmentNotChosenError, match=r"`cdk bootstrap -c env=prod` bootstraps"):
        build_app("local", app=App(context={BUNDLING_STACKS_CONTEXT: []}))
    cdk_json = json.loads((REPO / "cdk.json").read_text())
    assert "env" not in cdk_json["context"]  # a context default would make every deploy "chosen"


@pytest.mark.skipif(not CDK.exists(), reason="project-local CDK CLI missing (make setup installs it)")
def test_cdk_without_an_environment_stops_with_a_message_for_the_command(tmp_path: Path) -> None:
    environ = offline_environment()
    output = tmp_path / "cdk.out"
    # `cdk deploy` synthesizes first, through the same app: a refused synth is a refused deploy.
    status, log = run([str(CDK), "synth", "--output", str(output), "--quiet", "--no-notices"], REPO, environ)
    assert status != 0
    assert "error: no environment chosen: run `cdk deploy -c env=<name> --all`" in log
    assert not list(output.glob("*.template.json"))
    # `cdk bootstrap aws://ACCOUNT/REGION`, as AWS documents it, runs the app too: it hears how to
    # bootstrap, not how to deploy.
    target = f"aws://{FIXTURE_ACCOUNT}/{FIXTURE_REGION}"
    status, log = run([str(CDK), "bootstrap", target, "--output", str(output), "--no-notices"], REPO, environ)
    assert status != 0
    assert (
        "error: no environment chosen: add -c env=<name> (config/<name>.yaml), e.g. `cdk bootstrap -c env=prod`"
        in log
    )
    assert NO_CREDENTIALS not in log


def test_a_kinesis_stream_entry_is_refused_rather_than_deployed_as_a_tables_stream(tmp_path: Path) -> None:
    """`consumer run` serves a streams: entry with its own Kinesis source:, but the stacks would grant,
    watch and alarm on the top-level table in its place: synth stops, naming the entry."""
    from infra.application import build_app

    config = deployable_config(tmp_path)
    kinesis = {"kind": "kinesis", "stream_name": "clicks", "shard_count": 2}
    clicks = {
        "source": kinesis,
        "processing": {
            "processor": "handlers.clicks:handle",
            "dead_letter": {"type": "none", "uri": "var/dead-letter/clicks"},
        },
    }
    edit_yaml(config / "dev.yaml", {"streams": [{"table": {"name": "orders"}}, clicks]})
    with pytest.raises(InfraConfigError, match=r"env dev: streams\[1\] \(clicks\): source.kind: kinesis"):
        build_app("dev", config_dir=config, outdir=tmp_path / "out")
