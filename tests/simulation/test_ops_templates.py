"""The fleet model reads what prod's synthesized templates deploy, and does with it what AWS does.

* every health alarm notifies the alarm topic, which the data stack owns and the fleet stack names
  by its ARN; the scaling alarms invoke their policies;
* the group's DesiredCapacity is the answer of its ``Custom::FleetSize`` resource (the real handler
  of infra/fleet_size_handler.py): a first create starts at MinSize, a replacing update at the size
  the running group has;
* the leases table's capacity follows the templates' Application Auto Scaling target tracking, as
  DynamoDB documents it (up after two minutes above the target, down after fifteen 20 points below);
  unused capacity fills the burst bucket, also while nobody asks anything.
"""

from __future__ import annotations

import random
from pathlib import Path

from simulation.fleet_ops.environment import environment
from simulation.fleet_ops.group import Group
from simulation.fleet_ops.stack import Stack
from simulation.fleet_ops.tables import AutoScaling, Table, table_scaling
from simulation.fleet_ops.templates import REPO, SOURCES
from tools.emr.package import code_files


def test_the_cached_synth_is_keyed_on_every_module_the_app_imports() -> None:
    """A module the synth imports but the fingerprint leaves out would let the model judge a stale
    template (the dashboard's and the capacity planner's modules were left out once)."""
    ours = ("app", "ground", "consumer", "tools", "deploy", "infra", "pipeline", "emulator", "simulation")
    synth = code_files(REPO, "app", first_party=ours)  # imports inside functions included
    keyed = [Path(source) for source in SOURCES]
    missing = sorted(
        str(file) for file in synth if not any(file == key or key in file.parents for key in keyed)
    )
    assert not missing, f"add to simulation/fleet_ops/templates.py SOURCES: {missing}"


def test_every_health_alarm_pages_the_data_stacks_topic_and_scaling_alarms_act_on_the_group() -> None:
    env = environment()
    (topic,) = env.templates.of_type("AWS::SNS::Topic")
    assert env.templates.resources[topic]["Stack"] == "data"
    scaling = [spec for spec in env.alarms if spec.policies]
    paging = [spec for spec in env.alarms if not spec.policies]
    assert {s.name for s in scaling} == {"leases-at-2N", "leases-near-N"}
    assert paging and all(spec.topics == (topic,) for spec in paging), [
        (s.name, s.topics) for s in paging if s.topics != (topic,)
    ]
    freshness = next(s for s in env.alarms if s.name == "lake-freshness")
    assert freshness.insufficient_topics == (topic,)


def _stack() -> Stack:
    env = environment()
    rng = random.Random(1)

    def new_group(name: str, version: int) -> Group:
        return Group(
            name,
            3,
            12,
            120.0,
            rng,
            on_launch=lambda member: None,
            on_terminating=lambda member: None,
            on_terminated=lambda member: None,
            running_after=lambda: 30.0,
        )

    return Stack(env.templates, new_group, lambda now: None)


def test_a_replacing_update_starts_the_new_group_at_the_running_groups_size() -> None:
    stack = _stack()
    created = stack.create(0.0)
    assert created.group.desired == 3  # a first deploy finds no group: MinSize
    stack.current = created.group
    stack.operation = None
    created.group.desired = 9  # the scaling alarms grew it
    update = stack.deploy(60.0)
    assert update is not None and update.group.desired == 9
    assert len(update.group.serving()) == 9


def test_the_leases_table_scales_as_its_target_tracking_says() -> None:
    env = environment()
    reads, writes = table_scaling(env.templates, env.settings.leases_table_name)
    assert writes == AutoScaling(100.0, 461.0, 70.0)
    assert reads is not None and reads.minimum == reads.maximum == 100.0
    table = Table("leases", "leases", 100.0, 100.0, read_timeout=2.0, scaling=[reads, writes])
    for minute in range(1, 3):  # 90 % of 100 WCU for two minutes: up to 90 / 0.7
        table.plan_minute(minute, 0.0, 90 * 60)
    assert table.write_units == 129
    for minute in range(3, 17):  # 40 % of 129 for fourteen minutes: not yet
        table.plan_minute(minute, 0.0, 0.4 * 129 * 60)
    assert table.write_units == 129
    table.plan_minute(17, 0.0, 0.4 * 129 * 60)  # the fifteenth: down, never below the floor
    assert table.write_units == 100


def test_capacity_nobody_used_fills_the_burst_bucket() -> None:
    table = Table("leases", "leases", 100.0, 100.0, read_timeout=2.0)
    for minute in range(1, 6):
        table.plan_minute(minute, 0.0, 0.0)  # the fleet still booting
    for minute in range(6, 9):  # a catch-up asking 150 % for three minutes
        table.plan_minute(minute, 0.0, 150 * 60)
    assert not table.write_share
