"""The checker of operational promises fails where it must: each test plants one broken promise in an
otherwise unchanged fleet history (a watchdog that blames its own instance for everything, a boot
that fails without a word, an alarm red from the start, one that pages on a single throttle,
alarms that page nobody, a group that never scales in or scales back and forth, a bill above the
table, records left until trimmed) and requires the checker to name it."""

from __future__ import annotations

import dataclasses
import logging
import random
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from deploy.health import HealthJudge, Judgement
from simulation.fleet_ops.alarms import AlarmSpec
from simulation.fleet_ops.clock import WALL0
from simulation.fleet_ops.cost import Bill
from simulation.fleet_ops.environment import Environment, Sample, environment
from simulation.fleet_ops.fleet import Fleet
from simulation.fleet_ops.promises import OpsVerdict, _scaling, check, real_failures
from simulation.fleet_ops.scenarios import directed
from simulation.fleet_ops.stream import Stream


@pytest.fixture(autouse=True)
def _quiet() -> Iterator[None]:
    logging.disable(logging.CRITICAL)
    yield
    logging.disable(logging.NOTSET)


def _run(env: Environment, name: str) -> OpsVerdict:
    return check(Fleet(env, directed(name)).run())


def _topic(env: Environment) -> str:
    return next(t for spec in env.alarms for t in spec.topics)


def _alarm(env: Environment, name: str, metric: str, dimensions: dict[str, str], missing: str) -> AlarmSpec:
    properties = {
        "AlarmName": name,
        "Namespace": "AWS/DynamoDB" if "Throttle" in metric else "planted",
        "MetricName": metric,
        "Dimensions": [{"Name": k, "Value": v} for k, v in dimensions.items()],
        "Statistic": "Sum",
        "Period": 60,
        "EvaluationPeriods": 1,
        "Threshold": 1,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "TreatMissingData": missing,
    }
    return AlarmSpec(
        name, name, properties, frozenset({(properties["Namespace"], metric)}), 60, (_topic(env),), ()
    )


def test_an_instance_replaced_while_healthy_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    real = HealthJudge.observe

    def blames_itself(self: HealthJudge, now: float, *args: Any, **kwargs: Any) -> Judgement:
        real(self, now, *args, **kwargs)
        return Judgement("planted: every instance blames itself") if now - self.started > 700 else Judgement()

    monkeypatch.setattr(HealthJudge, "observe", blames_itself)
    verdict = _run(environment(), "fresh-deploy-at-rest")
    assert verdict.healthy_replaced and "while not broken" in verdict.healthy_replaced[0]


def test_a_boot_that_fails_without_a_word_is_named() -> None:
    env = environment()
    silent = dataclasses.replace(env.outcomes["packages"], unhealthy=False)
    verdict = _run(
        dataclasses.replace(env, outcomes={**env.outcomes, "packages": silent}), "boot-fails-at-packages"
    )
    assert any("boot failed at packages" in v for v in verdict.broken_not_replaced)
    assert verdict.replaced_over_stated > 1


def test_an_alarm_red_from_the_first_deploy_is_named() -> None:
    env = environment()
    red = _alarm(env, "planted-silence", "NeverPublished", {}, "breaching")
    verdict = _run(dataclasses.replace(env, alarms=[*env.alarms, red]), "one-throttled-request")
    assert any(v.startswith("planted-silence in ALARM at rest") for v in verdict.red_at_rest)


def test_a_page_on_one_throttled_request_is_named() -> None:
    env = environment()
    eager = _alarm(
        env,
        "planted-eager",
        "WriteThrottleEvents",
        {"TableName": env.settings.leases_table_name},
        "notBreaching",
    )
    verdict = _run(dataclasses.replace(env, alarms=[*env.alarms, eager]), "one-throttled-request")
    assert any("planted-eager paged" in v for v in verdict.single_event_pages)


def test_a_failure_nobody_hears_of_is_named() -> None:
    env = environment()
    mute = [dataclasses.replace(spec, topics=()) for spec in env.alarms]
    verdict = _run(dataclasses.replace(env, alarms=mute), "leases-table-refusing")
    assert any("no page within" in v for v in verdict.unpaged_failures)


def _walk(desired: list[int], load: list[float]) -> Any:
    samples = [
        Sample(WALL0 + 60 * i, d, d, x, x, 0.0, 44, 0.0)
        for i, (d, x) in enumerate(zip(desired, load, strict=True))
    ]
    changes = [(60.0 * i, x / load[0]) for i, x in enumerate(load) if i and x != load[i - 1]]
    env = environment()
    scale_in = next(s for s in env.alarms if any("ScaleIn" in p for p in s.policies))
    return SimpleNamespace(
        scenario=SimpleNamespace(profile=changes, kind="load" if changes else "rest"),
        samples=samples,
        alarms=SimpleNamespace(specs=[scale_in]),
        loop=SimpleNamespace(now=samples[-1].at),
        environment=env,
        group_props={"MinSize": "3", "MaxSize": "12"},
    )


def test_a_group_that_does_not_scale_back_in_is_named() -> None:
    minutes = 600
    desired = [3] * 30 + [min(12, 3 + i // 5) for i in range(90)] + [6] * (minutes - 120)
    load = [1.0] * 30 + [10.0] * 90 + [1.0] * (minutes - 120)
    verdict = OpsVerdict()
    _scaling(_walk(desired, load), verdict)
    assert verdict.back_to_min is False and verdict.not_back_to_min


def test_a_group_that_scales_back_and_forth_is_named() -> None:
    desired = (
        [8] * 20 + [3] * 5 + [4] * 5 + [5] * 5 + [6] * 30
    )  # a deploy back to the minimum, scaled out again
    verdict = OpsVerdict()
    _scaling(_walk(desired, [1.0] * len(desired)), verdict)
    assert verdict.scaling_flaps


def test_an_hour_above_the_cost_table_is_named() -> None:
    env = environment()
    bill = Bill(env.templates, "c7i.xlarge", 20, [(3, 100.0), (6, 200.0)])
    bill.accrue(3_600.0, 3, 12, 44, (0.0, 0.0))
    bill.close_hour(WALL0)
    assert bill.over_table()
    fair = Bill(env.templates, "c7i.xlarge", 20, env.totals)
    fair.accrue(3_600.0, 3, 12, 44, (0.0, 0.0))
    fair.close_hour(WALL0)
    assert not fair.over_table()


def test_records_left_until_the_stream_trims_them_are_lost() -> None:
    stream = Stream(44, 1_000.0, random.Random(1), WALL0, 30.0, 60.0)
    t = WALL0
    for _ in range(26 * 6):
        t += 600
        stream.step(t, 600, capacity=0.0, served_share=0.0)
    assert stream.lost > 0 and stream.lag(t) <= 24 * 3600 + 600


def _at_max(backlog: list[float], lag: list[float]) -> Any:
    samples = [
        Sample(WALL0 + 60 * i, 12, 12, 1_000.0, 60_000.0, g, 44, 0.0, b)
        for i, (b, g) in enumerate(zip(backlog, lag, strict=True))
    ]
    return SimpleNamespace(
        samples=samples,
        stack=SimpleNamespace(completed_at=lambda kind="create": WALL0),
        leases_table=SimpleNamespace(outages=[], read_timeout=2.0),
        workers_table=SimpleNamespace(outages=[]),
        follow=None,
        loop=SimpleNamespace(now=samples[-1].at),
        group_props={"MinSize": "3", "MaxSize": "12"},
    )


def test_a_group_at_its_maximum_is_behind_when_its_backlog_grows_not_its_oldest_records_age() -> None:
    minutes = 40
    ages = [3_000.0 + 40 * i for i in range(minutes)]  # the oldest record ages: a past peak drains
    draining = _at_max([1e9 - 5e6 * i for i in range(minutes)], ages)
    assert not [f for f in real_failures(draining) if "maximum" in f[2]]
    growing = _at_max([1e9 + 5e6 * i for i in range(minutes)], ages)
    assert [f for f in real_failures(growing) if "maximum" in f[2]]


def test_the_way_back_to_the_minimum_is_timed_from_when_the_peaks_backlog_is_drained() -> None:
    minutes = 600
    desired = [3] * 30 + [min(12, 3 + i // 5) for i in range(90)] + [12] * 120
    desired += [max(3, 12 - i // 31) for i in range(minutes - len(desired))]
    load = [1.0] * 30 + [10.0] * 90 + [1.0] * (minutes - 120)
    walk = _walk(desired, load)
    for i, sample in enumerate(walk.samples):  # two hours to drain the peak's backlog
        sample.lag = 2_000.0 if 120 <= i < 240 else 0.0
    verdict = OpsVerdict()
    _scaling(walk, verdict)
    assert verdict.back_to_min is True, verdict.not_back_to_min
    never = _walk(desired, load)
    for sample in never.samples[120:]:
        sample.lag = 2_000.0
    verdict = OpsVerdict()
    _scaling(never, verdict)
    assert verdict.back_to_min is False and "never caught up" in verdict.not_back_to_min[0]
