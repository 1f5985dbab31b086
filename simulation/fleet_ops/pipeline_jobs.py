"""The scheduled EMR Serverless ``follow`` jobs and the alarm topic's path to a person.

**Follow.** The template's schedule (``rate(N minutes)``, no start date: EventBridge Scheduler
invokes it at once, then every N minutes) starts a job that runs the ``--minutes`` its request
names, bounded by ``executionTimeoutMinutes``. A job needs the release ``consumer pipeline submit
--release`` uploads: one started before the release exists fails at start (docs/pipeline.md:
"until a release exists the scheduled jobs fail"). A running job reports ``LakeFreshnessSeconds``
after every run, about once a minute; the values are the model's (a fraction of
``pipeline.freshness_seconds``: not measured at prod's rates). EMR Serverless's start-up before the
first run is drawn from 1 to 3 minutes (not measured). Capacity billed while a job runs: the
driver's 4 vCPU / 16 GB and 0-3 executors of 4 vCPU / 16 GB (EMR Serverless's defaults; the
request sets none), within the application's maximum.

**Pages.** An alarm's topic action reaches a person only through a confirmed subscription: the
topic the stack creates subscribes the on-call address, which stays PendingConfirmation until the
recipient confirms (the model: within 20 minutes of the first deploy). A stack that is deleted and
created again (docs/deploy.md calls the fleet stack replaceable) creates its topic and
subscription again, pending until someone notices: pages published meanwhile reach nobody.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

from simulation.fleet_ops.templates import Templates, _join

DRIVER = (4, 16)  # vCPU, GB
EXECUTOR = (4, 16)


@dataclass
class Job:
    start: float
    ready: float  # first run done (freshness reported from here)
    end: float
    fails: bool
    executors: int


@dataclass
class Follow:
    rate: float  # seconds between schedule invocations
    minutes: float  # a job's own run time
    timeout: float
    goal: float  # pipeline.freshness_seconds
    namespace: str
    table: str
    max_vcpu: int
    rng: random.Random
    release_at: float = 0.0
    failing: list[tuple[float, float]] = field(default_factory=list)  # jobs started here fail
    jobs: list[Job] = field(default_factory=list)
    next_start: float | None = None

    @classmethod
    def from_templates(
        cls, templates: Templates, goal: float, namespace: str, table: str, rng: random.Random
    ) -> Follow | None:
        schedules = templates.of_type("AWS::Scheduler::Schedule")
        if not schedules:
            return None
        (schedule,) = schedules.values()
        props = schedule["Properties"]
        every = re.fullmatch(r"rate\((\d+) minutes?\)", props["ScheduleExpression"])
        if every is None:
            raise NotImplementedError(f"schedule {props['ScheduleExpression']}")
        request: dict[str, Any] = json.loads(_join(props["Target"]["Input"]))
        arguments = request["jobDriver"]["sparkSubmit"]["entryPointArguments"]
        minutes = float(arguments[arguments.index("--minutes") + 1])
        (application,) = templates.of_type("AWS::EMRServerless::Application").values()
        vcpu = int(str(application["Properties"]["MaximumCapacity"]["Cpu"]).split()[0])
        return cls(
            int(every.group(1)) * 60.0,
            minutes * 60,
            float(request.get("executionTimeoutMinutes", minutes + 15)) * 60,
            goal,
            namespace,
            table,
            vcpu,
            rng,
        )

    def created(self, now: float) -> None:
        self.next_start = now

    def tick(self, now: float) -> None:
        while self.next_start is not None and self.next_start <= now:
            start = self.next_start
            ready = start + self.rng.uniform(60.0, 180.0)
            fails = start < self.release_at or any(a <= start < b for a, b in self.failing)
            executors = self.rng.randint(0, max(0, (self.max_vcpu - DRIVER[0]) // EXECUTOR[0]))
            end = ready if fails else start + min(self.minutes, self.timeout)
            self.jobs.append(Job(start, ready, end, fails, executors))
            self.next_start = start + self.rate

    def freshness(self, now: float) -> float | None:
        """The LakeFreshnessSeconds reported in the minute before ``now``, if any job reported."""
        running = [j for j in self.jobs if not j.fails and j.ready <= now and j.end > now - 60]
        if not running:
            return None
        return self.goal * self.rng.uniform(0.1, 0.6)

    def billed(self, t0: float, t1: float) -> tuple[float, float]:
        """(vCPU-hours, GB-hours) the jobs ran between t0 and t1."""
        vcpu = gb = 0.0
        for job in self.jobs:
            overlap = max(0.0, min(t1, job.end) - max(t0, job.start)) / 3600
            vcpu += overlap * (DRIVER[0] + job.executors * EXECUTOR[0])
            gb += overlap * (DRIVER[1] + job.executors * EXECUTOR[1])
        return vcpu, gb


@dataclass
class Page:
    at: float
    alarm: str
    delivered: bool
    why: str = ""
    names: str = ""  # what a multi-time-series alarm's notification names (its contributors)


@dataclass
class Subscription:
    topic: str
    endpoint: str
    confirmed_at: float | None = None


@dataclass
class Pager:
    """The topics the alarms notify, their subscriptions, and every page published."""

    topics: dict[str, str]  # logical id -> stack ("data" or "fleet")
    subscriptions: list[Subscription]
    publishable: dict[str, bool]  # the topic's policy lets CloudWatch publish
    rng: random.Random
    pages: list[Page] = field(default_factory=list)

    @classmethod
    def from_templates(cls, templates: Templates, rng: random.Random) -> Pager:
        topics = {k: r["Stack"] for k, r in templates.of_type("AWS::SNS::Topic").items()}
        subscriptions = [
            Subscription(r["Properties"]["TopicArn"]["Ref"], str(r["Properties"].get("Endpoint")))
            for r in templates.of_type("AWS::SNS::Subscription").values()
        ]
        publishable = {k: False for k in topics}
        for policy in templates.of_type("AWS::SNS::TopicPolicy").values():
            props = policy["Properties"]
            allows = any(
                s.get("Effect") == "Allow"
                and "cloudwatch.amazonaws.com" in json.dumps(s.get("Principal", {}))
                and "sns:Publish" in json.dumps(s.get("Action", ""))
                for s in props["PolicyDocument"]["Statement"]
            )
            for ref in props["Topics"]:
                if isinstance(ref, dict) and ref.get("Ref") in publishable:
                    publishable[ref["Ref"]] = publishable[ref["Ref"]] or allows
        return cls(topics, subscriptions, publishable, rng)

    def created(self, stack: str, now: float, confirm_within: float) -> None:
        """``stack`` created (again): its topics' subscriptions start pending."""
        for subscription in self.subscriptions:
            if self.topics.get(subscription.topic) == stack:
                subscription.confirmed_at = now + self.rng.uniform(0.1, 1.0) * confirm_within

    def publish(self, topic: str, alarm: str, now: float, names: str = "") -> None:
        if topic not in self.topics:  # a topic the stack imports (scaling.alarm_topic_arn): its owner's
            self.pages.append(Page(now, alarm, True, names=names))
            return
        if not self.publishable.get(topic, False):
            self.pages.append(Page(now, alarm, False, "the topic's policy refuses CloudWatch", names))
            return
        confirmed = [
            s
            for s in self.subscriptions
            if s.topic == topic and s.confirmed_at is not None and s.confirmed_at <= now
        ]
        why = "" if confirmed else "no confirmed subscription"
        self.pages.append(Page(now, alarm, bool(confirmed), why, names))
