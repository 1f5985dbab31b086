"""Following an alarm's action to whoever it reaches, read from a synthesized template: a scaling
policy of the group, or a topic, the topic's policy and its key (test_alarms_reach_people.py, and
the several-stream environment's per-stream alarms in test_several_streams.py)."""

from __future__ import annotations

from typing import Any

from tests.infra.conftest import Synthesized, resources_of
from tests.infra.policy_model import Request, decide, resolve

CLOUDWATCH = "cloudwatch.amazonaws.com"


def alarms_of(synth: Synthesized) -> dict[str, dict[str, Any]]:
    prefix = f"{synth.settings.application_name}-{synth.settings.env}-"
    return {a["AlarmName"].removeprefix(prefix): a for a in resources_of(synth.raw, "AWS::CloudWatch::Alarm")}


def resolved(synth: Synthesized, value: Any) -> Any:
    return resolve(value, synth.raw, str(synth.settings.account), synth.settings.region)


def alarm_arn(synth: Synthesized, name: str, account: str | None = None) -> str:
    return f"arn:aws:cloudwatch:{synth.settings.region}:{account or synth.settings.account}:alarm:{name}"


def publish_request(synth: Synthesized, topic_arn: str, alarm: str, **context: str) -> Request:
    values = {
        "aws:SourceAccount": str(synth.settings.account),
        "aws:SourceArn": alarm_arn(synth, alarm),
        "aws:SecureTransport": "true",
        **context,
    }
    return Request(CLOUDWATCH, None, "SNS:Publish", topic_arn, values)


def topic_policy(synth: Synthesized, topic_logical: str) -> dict[str, Any]:
    found = [
        p["PolicyDocument"]
        for p in resources_of(synth.raw, "AWS::SNS::TopicPolicy")
        if {"Ref": topic_logical} in p["Topics"]
    ]
    assert len(found) == 1, f"topic {topic_logical} has {len(found)} policies"
    return dict(resolved(synth, found[0]))


def topic_of(synth: Synthesized, action: Any) -> str:
    """The logical id of the topic an alarm action names: by reference in its own stack, or by
    the ARN of a topic another stack of the environment creates (the data stack's, by its name)."""
    if isinstance(action, dict) and set(action) == {"Ref"}:
        return str(action["Ref"])
    arn = resolved(synth, action)
    found = [
        logical
        for logical, resource in synth.raw["Resources"].items()
        if resource["Type"] == "AWS::SNS::Topic" and resolved(synth, {"Ref": logical}) == arn
    ]
    assert len(found) == 1, f"{arn}: no topic of the environment has this ARN"
    return found[0]


def walk_alarm_actions(synth: Synthesized) -> list[str]:
    """Follow every alarm action of ``synth`` (and every INSUFFICIENT_DATA action): a scaling policy
    must act on the group; a topic's policy must let CloudWatch publish for this alarm (and refuse
    plain text, another account's and another application's alarms), and its key, if any, must let
    CloudWatch use it for this alarm only. Returns the names of the alarms that page (one entry per
    topic alarm action)."""
    resources = synth.raw["Resources"]
    paged: list[str] = []
    for name, alarm in alarms_of(synth).items():
        actions = [(a, True) for a in alarm.get("AlarmActions", [])]
        actions += [(a, False) for a in alarm.get("InsufficientDataActions", [])]
        for action, on_alarm in actions:
            if "Fn::GetAtt" in action:
                policy = resources[action["Fn::GetAtt"][0]]
                assert policy["Type"] == "AWS::AutoScaling::ScalingPolicy", name
                group = policy["Properties"]["AutoScalingGroupName"]["Ref"]
                assert resources[group]["Type"] == "AWS::AutoScaling::AutoScalingGroup", name
                continue
            topic_logical = topic_of(synth, action)
            topic = resources[topic_logical]
            assert topic["Type"] == "AWS::SNS::Topic", name
            topic_arn = resolved(synth, {"Ref": topic_logical})
            document = topic_policy(synth, topic_logical)
            full_name = alarm["AlarmName"]
            assert decide(document, publish_request(synth, topic_arn, full_name)) == "allowed", name
            # Still refused: plain-text publishes, and CloudWatch acting for anybody else's alarms.
            plain = publish_request(synth, topic_arn, full_name, **{"aws:SecureTransport": "false"})
            assert decide(document, plain) == "denied", name
            other_account = publish_request(
                synth,
                topic_arn,
                full_name,
                **{
                    "aws:SourceAccount": "999999999999",
                    "aws:SourceArn": alarm_arn(synth, full_name, "999999999999"),
                },
            )
            assert decide(document, other_account) == "no allow", name
            other_app = publish_request(synth, topic_arn, "someone-elses-alarm")
            assert decide(document, other_app) == "no allow", name
            key_ref = topic["Properties"].get("KmsMasterKeyId")
            if key_ref is not None:
                key = resources[key_ref["Fn::GetAtt"][0]]
                assert key["Type"] == "AWS::KMS::Key", name
                key_policy = resolved(synth, key["Properties"]["KeyPolicy"])
                key_arn = resolved(synth, key_ref)
                for kms_action in ("kms:GenerateDataKey", "kms:Decrypt"):
                    use = Request(
                        CLOUDWATCH, None, kms_action, key_arn, publish_request(synth, "", full_name).context
                    )
                    assert decide(key_policy, use) == "allowed", (name, kms_action)
                    assert (
                        decide(key_policy, Request(CLOUDWATCH, None, kms_action, key_arn, {})) == "no allow"
                    )
            if on_alarm:
                paged.append(name)
    return paged
