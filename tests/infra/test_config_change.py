"""Editing config/prod.yaml (a copy) changes the synthesized template accordingly."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.infra.conftest import (
    Synthesized,
    boot_plan_of,
    deployable_config,
    instance_units,
    resources_of,
    synthesize,
)

pytestmark = pytest.mark.infra


def test_worker_and_capacity_edits_reach_the_template(
    tmp_path: Path, synthesized: dict[str, Synthesized]
) -> None:
    config = deployable_config(tmp_path)
    prod_file = config / "prod.yaml"
    prod = yaml.safe_load(prod_file.read_text())
    prod["worker"]["initial_lease_table_read_capacity"] = 250
    prod["worker"]["initial_lease_table_write_capacity"] = 300
    prod["fleet"].update(
        min_instances=4, desired_instances=7, max_instances=20, worker_processes_per_instance=6
    )
    prod["fleet"]["lifecycle_hook_timeout_seconds"] = 300
    prod["scaling"]["returned_item_count_multiplier"] = 3
    prod_file.write_text(yaml.safe_dump(prod))

    edited = synthesize("prod", tmp_path / "out", config_dir=config)
    before = synthesized["prod"]
    name = edited.settings.leases_table_name
    (leases,) = [t for t in resources_of(edited.raw, "AWS::DynamoDB::Table") if t["TableName"] == name]
    assert leases["ProvisionedThroughput"] == {"ReadCapacityUnits": 250, "WriteCapacityUnits": 300}
    (group,) = resources_of(edited.raw, "AWS::AutoScaling::AutoScalingGroup")
    assert (group["MinSize"], group["MaxSize"]) == ("4", "20")
    # Not desired_instances (a planning figure): the size the group runs at, read at each deploy.
    assert (
        set(group["DesiredCapacity"]) == {"Fn::GetAtt"}
        and group["DesiredCapacity"]["Fn::GetAtt"][1] == "Size"
    )
    assert group["LifecycleHookSpecificationList"][0]["HeartbeatTimeout"] == 300
    (alarm,) = [
        a for a in resources_of(edited.raw, "AWS::CloudWatch::Alarm") if a["AlarmName"].endswith("-3N")
    ]
    assert alarm["Threshold"] == 3  # leases per open shard
    plan = boot_plan_of(edited.raw)
    assert plan.unit_names()[-1] == "consumer-worker@6" and len(plan.unit_names()) == 6
    # The hook's 300 s less the agent's flush wait (2 x 5 s) and 15 s to complete the action.
    assert "TimeoutStopSec=275" in instance_units(edited.raw)["consumer-worker@.service"]
    # Creation waits for the new minimum's signals.
    (group_resource,) = [
        r for r in edited.raw["Resources"].values() if r["Type"] == "AWS::AutoScaling::AutoScalingGroup"
    ]
    assert group_resource["CreationPolicy"]["ResourceSignal"]["Count"] == 4
    assert edited.raw != before.raw
