"""The synthesized alarms, evaluated every minute over what the fleet published, and their actions.

Each alarm is the template's own resource (statistic or metric math or Metrics Insights query,
period, evaluation periods, datapoints to alarm, threshold, comparison, missing data), evaluated by
:mod:`simulation.cloudwatch` over the datapoints of its last evaluation window. The window slides
with the evaluation minute (CloudWatch aligns periods; the model does not, which moves a breach by
less than a period). Actions as CloudWatch takes them: a topic is notified on the transition into
ALARM (``AlarmActions``) or into INSUFFICIENT_DATA (``InsufficientDataActions``), and, for a
multi-time-series alarm (GROUP BY), also whenever one of its contributors enters ALARM, naming it;
an alarm that depends on the group (``DependsOn``) exists once the group's creation completed; a new alarm starts
in INSUFFICIENT_DATA and notifies nobody for it; a scaling policy is invoked at every evaluation while
the alarm stays in ALARM (Auto Scaling actions are the one kind CloudWatch repeats), the group's
cooldown deciding whether it acts. ``OKActions`` (no template has them) would not page.
"""

from __future__ import annotations

import bisect
import re
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from simulation.cloudwatch import Datapoints, Key, alarm_contributors, alarm_state, is_grouped
from simulation.fleet_ops.templates import Templates, _join

KEEP_SECONDS = 3_600  # longer than any alarm's window (scale-in: 6 periods of 5 minutes)
_INSIGHTS_FROM = re.compile(r"SELECT \w+\((\w+)\) FROM SCHEMA\(\"([^\"]+)\"")


@dataclass(frozen=True)
class AlarmSpec:
    logical: str
    name: str  # without the environment's prefix: "workers-silent"
    properties: dict[str, Any]
    reads: frozenset[tuple[str, str]]  # (namespace, metric) its queries read
    window: int  # seconds: evaluation periods x period
    topics: tuple[str, ...]  # logical ids of the topics it notifies on entering ALARM
    policies: tuple[str, ...]  # logical ids of the scaling policies it invokes
    # Topics it notifies on entering INSUFFICIENT_DATA (its InsufficientDataActions): that state pages too.
    insufficient_topics: tuple[str, ...] = ()
    # It depends on the group (DependsOn): CloudFormation creates it once the group's creation
    # completed (its creation policy's signals arrived), not with the stack.
    after_group: bool = False
    # A Metrics Insights query with GROUP BY: each group is a contributor, notified by name.
    grouped: bool = False

    @property
    def pages(self) -> bool:
        return bool(self.topics or self.insufficient_topics)

    def paging(self, state: str) -> bool:
        """Whether entering ``state`` notifies somebody."""
        return (
            bool(self.topics)
            if state == "ALARM"
            else state == "INSUFFICIENT_DATA" and bool(self.insufficient_topics)
        )


def _period(properties: Mapping[str, Any]) -> int:
    if "Period" in properties:
        return int(properties["Period"])
    periods = {int(q["MetricStat"]["Period"]) for q in properties["Metrics"] if "MetricStat" in q}
    periods |= {int(q["Period"]) for q in properties["Metrics"] if "Period" in q}
    return periods.pop()


def _reads(properties: Mapping[str, Any]) -> frozenset[tuple[str, str]]:
    if "Metrics" not in properties:
        return frozenset({(properties["Namespace"], properties["MetricName"])})
    found: set[tuple[str, str]] = set()
    for query in properties["Metrics"]:
        if "MetricStat" in query:
            metric = query["MetricStat"]["Metric"]
            found.add((metric["Namespace"], metric["MetricName"]))
        elif "Expression" in query:
            match = _INSIGHTS_FROM.match(query["Expression"].strip())
            if match is not None:
                found.add((match.group(2), match.group(1)))
    return frozenset(found)


def _topics(actions: list[Any], templates: Templates) -> tuple[str, ...]:
    """The topics ``actions`` notify, by the logical id of the templates' topic they name (by
    ``Ref``, or by an ARN ending in its ``TopicName``: a topic of the other stack); an ARN no
    template's topic has (an imported topic, ``scaling.alarm_topic_arn``) stays the ARN's text."""
    by_name = {
        str(r["Properties"].get("TopicName")): k for k, r in templates.of_type("AWS::SNS::Topic").items()
    }
    found: list[str] = []
    for action in actions:
        if isinstance(action, dict) and "Ref" in action:
            found.append(action["Ref"])
            continue
        arn = _join(action)
        if ":sns:" in arn:
            found.append(by_name.get(arn.rsplit(":", 1)[-1], arn))
    return tuple(found)


def _depends(resource: Mapping[str, Any]) -> list[str]:
    depends = resource.get("DependsOn", [])
    return [depends] if isinstance(depends, str) else list(depends)


def alarm_specs(templates: Templates, prefix: str) -> list[AlarmSpec]:
    specs = []
    groups = set(templates.of_type("AWS::AutoScaling::AutoScalingGroup"))
    for logical, resource in sorted(templates.of_type("AWS::CloudWatch::Alarm").items()):
        props = resource["Properties"]
        actions = props.get("AlarmActions", [])
        insufficient = props.get("InsufficientDataActions", [])
        specs.append(
            AlarmSpec(
                logical,
                props["AlarmName"].removeprefix(prefix),
                props,
                _reads(props),
                int(props["EvaluationPeriods"]) * _period(props),
                _topics(actions, templates),
                tuple(a["Fn::GetAtt"][0] for a in actions if isinstance(a, dict) and "Fn::GetAtt" in a),
                _topics(insufficient, templates),
                bool(groups & set(_depends(resource))),
                is_grouped(props),
            )
        )
    return specs


class MetricStore:
    """Datapoints by series (in time order), the last hour of them, indexed by (namespace, metric)."""

    def __init__(self) -> None:
        self._times: dict[Key, list[float]] = {}
        self._points: dict[Key, list[tuple[float, float]]] = {}
        self._by_name: dict[tuple[str, str], list[Key]] = defaultdict(list)  # in order of first put
        self.published = 0

    def put(self, namespace: str, name: str, dimensions: Mapping[str, str], at: float, value: float) -> None:
        key = (namespace, name, frozenset(dimensions.items()))
        series = self._points.get(key)
        if series is None:
            series = self._points[key] = []
            self._times[key] = []
            self._by_name[(namespace, name)].append(key)
        times = self._times[key]
        index = bisect.bisect_right(times, at)
        times.insert(index, at)
        series.insert(index, (at, value))
        self.published += 1

    def prune(self, now: float) -> None:
        horizon = now - KEEP_SECONDS
        for key, times in self._times.items():
            cut = bisect.bisect_left(times, horizon)
            if cut:
                del times[:cut]
                del self._points[key][:cut]

    def view(self, reads: frozenset[tuple[str, str]], since: float) -> Datapoints:
        data = Datapoints()
        for pair in reads:
            for key in self._by_name.get(pair, ()):
                cut = bisect.bisect_left(self._times[key], since)
                if cut < len(self._times[key]):
                    data.points[key] = self._points[key][cut:]
        return data


@dataclass
class Transition:
    at: float
    alarm: str
    state: str


@dataclass
class AlarmBook:
    """Every alarm's state, evaluated each minute; what it notified and invoked."""

    specs: list[AlarmSpec]
    store: MetricStore
    # topic logical id, alarm, time, and the contributors the notification names ("" for none)
    notify: Callable[[str, AlarmSpec, float, str], None]
    invoke: Callable[[str, AlarmSpec, float], None]  # policy logical id, alarm, time
    states: dict[str, str] = field(default_factory=dict)
    contributors: dict[str, dict[str, str]] = field(default_factory=dict)  # grouped alarms' last states
    transitions: list[Transition] = field(default_factory=list)
    created_at: float | None = None

    def create(self, now: float) -> None:
        """The stack created (or re-created) its alarms: each starts in INSUFFICIENT_DATA. Those
        that depend on the group wait for :meth:`group_created` (the ones of a deleted stack are gone)."""
        self.created_at = now
        for spec in self.specs:
            if spec.after_group:
                self.states.pop(spec.name, None)
            else:
                self.states[spec.name] = "INSUFFICIENT_DATA"

    def group_created(self, now: float) -> None:
        """The stack's group completed its creation: the alarms that depend on it are created."""
        for spec in self.specs:
            if spec.after_group and spec.name not in self.states:
                self.states[spec.name] = "INSUFFICIENT_DATA"

    def evaluate(self, now: float) -> None:
        if self.created_at is None:
            return
        for spec in self.specs:
            if spec.name not in self.states:
                continue  # not created (yet)
            start = now - spec.window
            data = self.store.view(spec.reads, start)
            state = alarm_state(spec.properties, data, start, now)
            before = self.states.get(spec.name)
            named = ""
            if spec.grouped:
                now_in = alarm_contributors(spec.properties, data, start, now)
                was = self.contributors.get(spec.name, {})
                self.contributors[spec.name] = now_in
                entering = sorted(c for c, s in now_in.items() if s == "ALARM" and was.get(c) != "ALARM")
                named = "; ".join(sorted(c for c, s in now_in.items() if s == "ALARM"))
                for contributor in entering:  # contributor-level notifications, each named
                    for topic in spec.topics:
                        self.notify(topic, spec, now, contributor)
            if state != before:
                self.states[spec.name] = state
                self.transitions.append(Transition(now, spec.name, state))
                for topic in (
                    spec.topics
                    if state == "ALARM"
                    else spec.insufficient_topics
                    if state == "INSUFFICIENT_DATA"
                    else ()
                ):
                    self.notify(topic, spec, now, named if state == "ALARM" else "")
            if state == "ALARM":
                for policy in spec.policies:
                    self.invoke(policy, spec, now)

    def state_at(self, name: str, at: float) -> str:
        state = "INSUFFICIENT_DATA"
        for t in self.transitions:
            if t.alarm == name and t.at <= at:
                state = t.state
        return state

    def in_alarm(self) -> list[str]:
        return sorted(name for name, state in self.states.items() if state == "ALARM")

    def alarm_spans(self, spec: AlarmSpec, end: float) -> list[tuple[float, float]]:
        """(from, to) of each stretch ``spec`` spent in a state it pages in (entered by a transition:
        a new alarm starts in INSUFFICIENT_DATA without notifying anyone) up to ``end``."""
        spans: list[tuple[float, float]] = []
        began: float | None = None
        for t in self.transitions:
            if t.alarm != spec.name:
                continue
            if spec.paging(t.state) and began is None:
                began = t.at
            elif not spec.paging(t.state) and began is not None:
                spans.append((began, t.at))
                began = None
        if began is not None:
            spans.append((began, end))
        return spans
