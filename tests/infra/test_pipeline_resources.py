"""The pipeline's AWS side as synthesized: the change-log bucket exists wherever the workers write
an s3:// change log (dev has no EMR and still gets it), the workers may write it, prod's pipeline
reads and writes inside it, and the EMR job role can do what the three jobs do and nothing more.
Its lifecycle: noncurrent versions expire; dev's bucket is emptied and removed with the stack,
prod's retained."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.pipeline_resources import NONCURRENT_VERSION_DAYS
from tests.infra.conftest import FIXTURE_ACCOUNT, FIXTURE_REGION, Synthesized, resolve_join, resources_of

pytestmark = pytest.mark.infra


def _bucket_names(synth: Synthesized) -> list[str]:
    return [str(b.get("BucketName")) for b in resources_of(synth.raw, "AWS::S3::Bucket")]


def _job_role_statements(synth: Synthesized) -> list[dict[str, Any]]:
    (role_id,) = [
        k
        for k, r in synth.raw["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
        and "emr-serverless.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    statements: list[dict[str, Any]] = []
    for policy in resources_of(synth.raw, "AWS::IAM::Policy"):
        if {"Ref": role_id} in policy.get("Roles", []):
            statements += policy["PolicyDocument"]["Statement"]
    assert statements
    return statements


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def _worker_statements(synth: Synthesized) -> list[dict[str, Any]]:
    (policy,) = [
        r["Properties"]
        for k, r in synth.raw["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and k.startswith("WorkerPolicy")
    ]
    return list(policy["PolicyDocument"]["Statement"])


def test_dev_gets_its_change_log_bucket_without_emr(synthesized: dict[str, Synthesized]) -> None:
    dev = synthesized["dev"]
    assert not dev.settings.pipeline.emr_serverless
    bucket = f"orders-stream-consumer-dev-{FIXTURE_ACCOUNT}-{FIXTURE_REGION}"
    assert _bucket_names(dev) == [bucket]
    assert not resources_of(dev.raw, "AWS::EMRServerless::Application")
    # ... in the stateful stack, and the workers may write their prefix of it.
    data = dev.stacks["orders-stream-consumer-dev-data"]
    assert any(r["Type"] == "AWS::S3::Bucket" for r in data["Resources"].values())
    writes = [
        resolve_join(resource)
        for s in _worker_statements(dev)
        if "s3:PutObject" in _as_list(s["Action"])
        for resource in _as_list(s["Resource"])
    ]
    assert f"arn:<TOKEN>:s3:::{bucket}/changes/*" in writes


def test_local_writes_its_change_log_to_disk_and_has_no_bucket(synthesized: dict[str, Synthesized]) -> None:
    assert _bucket_names(synthesized["local"]) == []


def test_prods_pipeline_reads_and_writes_inside_the_change_log_bucket(
    synthesized: dict[str, Synthesized],
) -> None:
    prod = synthesized["prod"]
    (bucket,) = _bucket_names(prod)
    pipeline = prod.settings.pipeline
    assert pipeline.emr_serverless
    for uri in (
        pipeline.changelog_uri,
        pipeline.snapshot_uri,
        pipeline.stats_uri,
        pipeline.emr_work_location,
    ):
        assert str(uri).startswith(f"s3://{bucket}/")
    assert pipeline.changelog_uri == prod.settings.processing.options["destination"]


def test_the_job_role_scans_only_the_source_table(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    statements = _job_role_statements(prod)
    dynamodb = [s for s in statements if any(a.startswith("dynamodb:") for a in _as_list(s["Action"]))]
    assert len(dynamodb) == 1
    assert sorted(_as_list(dynamodb[0]["Action"])) == ["dynamodb:DescribeTable", "dynamodb:Scan"]
    table = prod.settings.table.source_table_name
    region, account = prod.settings.region, prod.settings.account
    assert [resolve_join(r) for r in _as_list(dynamodb[0]["Resource"])] == [
        f"arn:<TOKEN>:dynamodb:{region}:{account}:table/{table}"
    ]


def test_the_job_role_uses_the_buckets_prefixes_and_nothing_else(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    (bucket,) = _bucket_names(prod)
    statements = _job_role_statements(prod)
    actions = {a for s in statements for a in _as_list(s["Action"]) if not a.startswith("glue:")}
    assert actions == {
        "s3:GetObject",
        "s3:PutObject",
        "s3:DeleteObject",
        "s3:ListBucket",
        "dynamodb:DescribeTable",
        "dynamodb:Scan",
        "cloudwatch:PutMetricData",
    }  # fmt: skip  (the Glue catalog grant: test_the_job_role_reaches_only_its_own_glue_database)
    objects: dict[str, set[str]] = {}
    for statement in statements:
        if statement["Action"] == "cloudwatch:PutMetricData":  # follow's freshness: no resource ARN exists
            assert statement["Condition"] == {
                "StringEquals": {"cloudwatch:namespace": prod.settings.metrics_namespace}
            }
            continue
        assert statement["Effect"] == "Allow" and statement.get("Resource") != "*"
        for resource in _as_list(statement["Resource"]):
            arn = resolve_join(resource)
            if arn.startswith(f"arn:<TOKEN>:s3:::{bucket}/"):
                for action in _as_list(statement["Action"]):
                    objects.setdefault(arn.split(":::", 1)[1], set()).add(action)
    readonly = {"s3:GetObject"}
    readwrite = {"s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    assert objects == {
        f"{bucket}/changes/*": readonly,  # the change log is never written by a job
        f"{bucket}/changes_$folder$": readonly,
        **{f"{bucket}/{p}/*": readwrite for p in ("snapshot", "stats", "emr")},
        **{f"{bucket}/{p}_$folder$": readwrite for p in ("snapshot", "stats", "emr")},
    }
    (listing,) = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert resolve_join(listing["Resource"]) == f"arn:<TOKEN>:s3:::{bucket}"
    assert sorted(listing["Condition"]["StringLike"]["s3:prefix"]) == sorted(
        [p for name in ("changes", "snapshot", "stats", "emr") for p in (name, f"{name}/*")]
    )


def test_the_fleet_stack_names_the_application_and_its_role(synthesized: dict[str, Synthesized]) -> None:
    prod = synthesized["prod"]
    outputs = prod.stacks["orders-stream-consumer-prod"]["Outputs"]
    (app,) = resources_of(prod.raw, "AWS::EMRServerless::Application")
    assert app["Name"] == "orders-stream-consumer-prod-pipeline" and app["Architecture"] == "X86_64"
    assert "Fn::GetAtt" in outputs["EmrJobRoleArn"]["Value"]
    assert outputs["EmrJobRoleArn"]["Value"]["Fn::GetAtt"][1] == "Arn"


def test_the_job_role_reaches_only_its_own_glue_database(synthesized: dict[str, Synthesized]) -> None:
    """The snapshot job commits Iceberg tables in the Glue Data Catalog (pipeline/table.py): it may
    create and update its own database's tables, and nothing else in the catalog."""
    from pipeline.catalog import namespace_for

    prod = synthesized["prod"]
    glue = [
        s for s in _job_role_statements(prod) if any(a.startswith("glue:") for a in _as_list(s["Action"]))
    ]
    assert len(glue) == 1
    assert "glue:UpdateTable" in _as_list(glue[0]["Action"])
    assert not any(a.startswith("glue:Delete") for a in _as_list(glue[0]["Action"]))
    database = namespace_for(prod.settings.application_name, prod.settings.env)
    resources = sorted(resolve_join(r) for r in _as_list(glue[0]["Resource"]))
    assert all(r.startswith("arn:<TOKEN>:glue:") for r in resources), resources
    assert [r.split(":", 5)[5] for r in resources] == [
        "catalog",
        f"database/{database}",
        f"table/{database}/*",
    ]


def test_prod_keeps_follow_running_on_emr_and_alarms_on_its_freshness(
    synthesized: dict[str, Synthesized],
) -> None:
    """The schedule starts `consumer pipeline follow` on the application, as the role it may start
    jobs with, from the release submit uploads; the alarm watches the metric follow sends."""
    from infra.pipeline_follow import FRESHNESS_METRIC, START_JOB_RUN_ACTION
    from pipeline.freshness import METRIC
    from tools.emr.request import FOLLOW_SCHEDULE_MINUTES, release_uploaded

    prod = synthesized["prod"]
    assert FRESHNESS_METRIC == METRIC
    (schedule,) = resources_of(prod.raw, "AWS::Scheduler::Schedule")
    assert schedule["ScheduleExpression"] == f"rate({FOLLOW_SCHEDULE_MINUTES} minutes)"
    target = schedule["Target"]
    assert resolve_join(target["Arn"]) == f"arn:<TOKEN>:{START_JOB_RUN_ACTION}"
    request = json.loads(resolve_join(target["Input"]))
    arguments = request["jobDriver"]["sparkSubmit"]["entryPointArguments"]
    assert arguments[:3] == ["follow", "--env", "prod"] and "--minutes" in arguments
    released = release_uploaded(prod.settings.pipeline.emr_work_location or "")
    assert request["jobDriver"]["sparkSubmit"]["entryPoint"] == released.entry_point
    assert request["clientToken"] == "<aws.scheduler.execution-id>"
    assert request["executionTimeoutMinutes"] > FOLLOW_SCHEDULE_MINUTES
    (role_id,) = [
        k
        for k, r in prod.raw["Resources"].items()
        if r["Type"] == "AWS::IAM::Role"
        and "scheduler.amazonaws.com" in json.dumps(r["Properties"]["AssumeRolePolicyDocument"])
    ]
    assert target["RoleArn"]["Fn::GetAtt"][0] == role_id
    granted = {
        a
        for policy in resources_of(prod.raw, "AWS::IAM::Policy")
        if {"Ref": role_id} in policy.get("Roles", [])
        for statement in policy["PolicyDocument"]["Statement"]
        for a in _as_list(statement["Action"])
    }
    assert granted == {"emr-serverless:StartJobRun", "iam:PassRole"}
    (alarm,) = [a for a in resources_of(prod.raw, "AWS::CloudWatch::Alarm") if a.get("MetricName") == METRIC]
    assert alarm["Threshold"] == prod.settings.pipeline.freshness_seconds
    # Missing data is INSUFFICIENT_DATA, which pages as ALARM does: a follow that stopped pages, a new
    # stack whose first follow has not run yet stays in the state it starts in (no page).
    assert alarm["TreatMissingData"] == "missing" and alarm["Statistic"] == "Maximum"
    assert alarm["InsufficientDataActions"] == alarm["AlarmActions"] and len(alarm["AlarmActions"]) == 1
    assert alarm["Namespace"] == prod.settings.metrics_namespace
    dev = synthesized["dev"]
    assert not resources_of(dev.raw, "AWS::Scheduler::Schedule")  # no EMR there, nothing to schedule


def _bucket(synth: Synthesized) -> tuple[str, dict[str, Any]]:
    (found,) = [(k, r) for k, r in synth.raw["Resources"].items() if r["Type"] == "AWS::S3::Bucket"]
    return found


@pytest.mark.parametrize("env", ["dev", "prod"])
def test_noncurrent_versions_expire(env: str, synthesized: dict[str, Synthesized]) -> None:
    _, bucket = _bucket(synthesized[env])
    assert bucket["Properties"]["VersioningConfiguration"] == {"Status": "Enabled"}
    (rule,) = bucket["Properties"]["LifecycleConfiguration"]["Rules"]
    assert rule["Status"] == "Enabled"
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": NONCURRENT_VERSION_DAYS}
    assert rule["ExpiredObjectDeleteMarker"] is True
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_devs_bucket_is_emptied_and_removed_on_destroy_and_prods_retained(
    synthesized: dict[str, Synthesized],
) -> None:
    dev, prod = synthesized["dev"], synthesized["prod"]
    bucket_id, bucket = _bucket(dev)
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("Delete", "Delete")
    # Emptied first (every version): a non-empty bucket cannot be deleted, which failed cdk destroy.
    (emptying,) = resources_of(dev.raw, "Custom::S3AutoDeleteObjects")
    assert emptying["BucketName"] == {"Ref": bucket_id}
    _, kept = _bucket(prod)
    assert (kept["DeletionPolicy"], kept["UpdateReplacePolicy"]) == ("Retain", "Retain")
    assert resources_of(prod.raw, "Custom::S3AutoDeleteObjects") == []
    data_stack = prod.stacks[f"{prod.settings.application_name}-prod-data"]
    assert not [r for r in data_stack["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    # dev's stacks carry no termination protection (destroy may proceed); prod's both do.
    for synth, protected in ((dev, False), (prod, True)):
        manifest = json.loads((synth.assembly_dir / "manifest.json").read_text())
        for name in synth.stacks:
            properties = manifest["artifacts"][name]["properties"]
            assert bool(properties.get("terminationProtection")) is protected, name


def test_the_change_log_expires_only_when_configured(synthesized: dict[str, Synthesized]) -> None:
    """``pipeline.changelog_expiration_days``: a rule on the change log's prefix only (the snapshot,
    stats and dead letters beside it are kept); none by default (docs/deploy.md prices the growth)."""
    from infra.pipeline_resources import changelog_expiration

    prod = synthesized["prod"]
    assert changelog_expiration(prod.settings) == []
    pipeline = prod.settings.pipeline.model_copy(update={"changelog_expiration_days": 90})
    (rule,) = changelog_expiration(prod.settings.model_copy(update={"pipeline": pipeline}))
    assert (rule.id, rule.prefix, rule.expiration.to_days()) == ("expire-change-log", "changes/", 90)
