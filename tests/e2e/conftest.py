"""End-to-end fixtures: a moto server on a free loopback port and a config directory pointing at it.
Everything a test starts is stopped in ``finally`` blocks, whatever the outcome."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.fast_settings import FAST_WORKER_YAML, TELEMETRY_TO_LOGS_YAML
from tests.support import moto_server


@pytest.fixture
def moto_endpoint() -> Iterator[str]:
    with moto_server() as endpoint:
        yield endpoint


@pytest.fixture
def config_dir(tmp_path: Path, moto_endpoint: str) -> Path:
    directory = tmp_path / "config"
    directory.mkdir()
    (directory / "e2e.yaml").write_text(
        f"""
application_name: e2e-fleet
region: us-east-1
endpoint_url: {moto_endpoint}
table:
  name: orders
  partition_key: {{name: pk, type: S}}
  sort_key: {{name: sk, type: S}}
{FAST_WORKER_YAML}
{TELEMETRY_TO_LOGS_YAML}
processing:
  processor: changelog
  options:
    destination: {tmp_path / "changelog"}
load:
  writes_per_second: 200
  keys: 40
  # moto emits two records (INSERT of the keys, then MODIFY) for an UpdateItem that creates an
  # item; DynamoDB emits one INSERT. Updates are left to the emulator's tests.
  put_ratio: 0.8
  update_ratio: 0
  delete_ratio: 0.2
"""
    )
    return directory
