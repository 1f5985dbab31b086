"""Test-wide safety: no test may reach real AWS, whatever the machine's environment holds."""

from __future__ import annotations

import os

import pytest

_FAKE_AWS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
for _name, _value in _FAKE_AWS.items():
    os.environ[_name] = _value
for _name in ("AWS_PROFILE", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
    os.environ.pop(_name, None)
os.environ["AWS_CONFIG_FILE"] = os.devnull
os.environ["AWS_SHARED_CREDENTIALS_FILE"] = os.devnull


@pytest.fixture(autouse=True)
def _no_consumer_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings overrides from the developer's shell must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("CONSUMER_"):
            monkeypatch.delenv(name, raising=False)


# What shares one expensive session-wide resource runs on one pytest-xdist worker (`make test` runs
# two): the CDK synth of every environment. Everything else is spread; the Spark tests are too long
# together for one worker, and each worker starts its own local session once.
_GROUPS = {"infra": "cdk"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.parts
        if "tests" in parts:
            folder = parts[parts.index("tests") + 1] if parts.index("tests") + 1 < len(parts) else ""
            group = _GROUPS.get(folder)
            if group is not None:
                item.add_marker(pytest.mark.xdist_group(group))
