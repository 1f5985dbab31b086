"""The workers' metrics arrive: the log group each EMF document names is the one the stack creates,
the instance role may write it, and the agent listens where the workers send.

The runtime half (a real ``consumer run`` shipping to a listener on the agent's port) is
tests/e2e/test_metrics_reach_agent.py; this half checks that the synthesized stack agrees with it.
"""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import urlsplit

import pytest

from consumer.telemetry.emf import MetricValues, build_documents
from consumer.telemetry.transports import AgentTransport, transport_from_settings
from tests.infra.conftest import (
    ENVIRONMENTS,
    Synthesized,
    boot_plan_of,
    resolve_join,
    resources_of,
    user_data_of,
)

pytestmark = pytest.mark.infra


@pytest.fixture(params=ENVIRONMENTS)
def synth(request: pytest.FixtureRequest, synthesized: dict[str, Synthesized]) -> Synthesized:
    return synthesized[request.param]


def _user_data(raw: dict[str, Any]) -> str:
    return user_data_of(raw)


def _agent_config(raw: dict[str, Any]) -> dict[str, Any]:
    """What the bootstrap writes as the agent's configuration: the boot plan's."""
    config: dict[str, Any] = boot_plan_of(raw).agent_config
    return config


def _statements(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for p in resources_of(raw, "AWS::IAM::Policy") for s in p["PolicyDocument"]["Statement"]]


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def test_the_log_group_in_each_document_is_created_and_writable(synth: Synthesized) -> None:
    settings = synth.settings.model_copy(
        update={"metrics": synth.settings.metrics.model_copy(update={"destination": "agent"})}
    )
    transport = transport_from_settings(settings, "host:123:abc")
    assert isinstance(transport, AgentTransport)
    (document,) = build_documents(
        settings.metrics_namespace,
        [{"Operation": "ProcessTask", "WorkerIdentifier": "host:123:abc"}],
        [MetricValues("RecordsProcessed", "Count", (3.0,))],
        1_700_000_000_000,
    )
    meta = json.loads(transport.addressed(document))["_aws"]
    group = meta["LogGroupName"]
    assert meta["LogStreamName"] == "host_123_abc"
    assert group == settings.metrics_log_group != "emf/logs/default"

    # The stack creates that group ...
    groups = {g["LogGroupName"]: g for g in resources_of(synth.raw, "AWS::Logs::LogGroup")}
    assert group in groups
    # ... and the instance role (which the agent runs with) may create streams in it and write them.
    arn = re.compile(
        rf"^arn:<TOKEN>:logs:{settings.region}:[^:]+:log-group:{re.escape(group)}:log-stream:\*$"
    )
    writers = [
        s
        for s in _statements(synth.raw)
        if {"logs:CreateLogStream", "logs:PutLogEvents"} <= set(_as_list(s["Action"]))
        and any(arn.match(resolve_join(r)) for r in _as_list(s["Resource"]))
    ]
    assert writers, f"no grant to write streams of {group}"


def test_the_agent_listens_where_the_workers_send(synth: Synthesized) -> None:
    settings = synth.settings
    user_data = _user_data(synth.raw)
    agent = _agent_config(synth.raw)
    listener = urlsplit(agent["logs"]["metrics_collected"]["emf"]["service_address"])
    sent_to = urlsplit(settings.metrics.agent_endpoint)
    assert (listener.scheme, listener.hostname, listener.port) == ("tcp", "127.0.0.1", sent_to.port)
    # The agent's own metrics go to the namespace the role may publish to, as the workers' do.
    assert agent["metrics"]["namespace"] == settings.metrics_namespace
    # (prod's EMR job role has one too, for the pipeline's freshness: the same namespace only.)
    put_metrics = [s for s in _statements(synth.raw) if s["Action"] == "cloudwatch:PutMetricData"]
    assert put_metrics
    for put_metric in put_metrics:
        assert put_metric["Condition"]["StringEquals"]["cloudwatch:namespace"] == settings.metrics_namespace
    # Nothing reads these variables; the documents themselves carry group and namespace.
    assert "AWS_EMF_LOG_GROUP_NAME" not in user_data and "AWS_EMF_NAMESPACE" not in user_data


def test_aws_environments_send_to_the_agent(synthesized: dict[str, Synthesized]) -> None:
    for env in ("dev", "prod"):
        assert synthesized[env].settings.metrics.destination == "agent"


def test_an_agent_endpoint_off_the_instance_is_refused(synthesized: dict[str, Synthesized]) -> None:
    from infra.errors import InfraConfigError
    from infra.user_data import agent_listener

    settings = synthesized["prod"].settings
    elsewhere = settings.model_copy(
        update={"metrics": settings.metrics.model_copy(update={"agent_endpoint": "tcp://10.0.0.5:25888"})}
    )
    with pytest.raises(InfraConfigError, match=r"metrics\.agent_endpoint"):
        agent_listener(elsewhere)
    udp = settings.model_copy(
        update={"metrics": settings.metrics.model_copy(update={"agent_endpoint": "udp://127.0.0.1:25999"})}
    )
    assert agent_listener(udp) == "udp://127.0.0.1:25999"
