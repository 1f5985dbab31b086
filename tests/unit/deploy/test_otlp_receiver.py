"""With ``metrics.backend: otel | both`` the CloudWatch agent on each instance is the collector the
workers export to: its configuration opens an OTLP/HTTP receiver exactly where
``metrics.otlp_endpoint`` points, on the loopback interface; on ``emf`` it opens none."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import pytest

from infra.errors import InfraConfigError
from infra.user_data import agent_config
from tests.unit.telemetry.helpers import settings_with


def collected(**metrics: Any) -> dict[str, Any]:
    config: dict[str, Any] = agent_config(settings_with(**metrics))
    found: dict[str, Any] = config["metrics"]["metrics_collected"]
    return found


@pytest.mark.parametrize("backend", ["otel", "both"])
def test_the_agent_receives_otlp_where_the_workers_export(backend: str) -> None:
    endpoint = "http://127.0.0.1:4400"
    receiver = collected(backend=backend, otlp_endpoint=endpoint)["otlp"]
    assert receiver == {"http_endpoint": f"127.0.0.1:{urlsplit(endpoint).port}"}
    assert {"cpu", "mem", "disk"} <= set(collected(backend=backend))


def test_on_emf_the_agent_opens_no_otlp_receiver() -> None:
    assert "otlp" not in collected(backend="emf")


@pytest.mark.parametrize("endpoint", ["http://10.0.0.5:4318", "https://127.0.0.1:4318"])
def test_an_otlp_endpoint_the_agent_cannot_serve_is_refused_naming_the_key(endpoint: str) -> None:
    with pytest.raises(InfraConfigError, match=r"metrics\.otlp_endpoint"):
        collected(backend="both", otlp_endpoint=endpoint)
