"""Nothing deploys with example values: every deployable environment's synth stops, with one line
naming the key and docs/deploy.md's section, when a per-account value is missing or an example;
a bucket the stack names must carry the account and the region."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from infra.application import build_app
from infra.errors import InfraConfigError
from infra.per_account import DOCS_SECTION, PerAccountValueError
from infra.pipeline_resources import NAMES_SECTION
from tests.infra.conftest import FIXTURE_VALUES, REPO, deployable_config, edit_yaml

pytestmark = pytest.mark.infra

# Every per-account value of each deployable environment, with example values that must be refused.
EXAMPLES: dict[str, list[Any]] = {
    "account": ["123456789012", "111122223333", "000000000000"],
    "region": [],
    "fleet.ami_id": ["ami-0123456789abcdef0", "ami-0abcdef1234567890", "ami-00000000"],
    "scaling.alarm_topic_email": ["oncall@example.com", "pager@team.example.org", "me@corp.test"],
}
CASES = [
    (env, key, value)
    for env, values in FIXTURE_VALUES.items()
    for key in values
    for value in [None, *EXAMPLES[key]]
]


def _refusal(config: Path, env: str, tmp_path: Path) -> str:
    with pytest.raises(PerAccountValueError) as refused:
        build_app(env, config_dir=config, outdir=tmp_path / "out")
    return str(refused.value)


@pytest.mark.parametrize(("env", "key", "value"), CASES, ids=[f"{e}-{k}-{v}" for e, k, v in CASES])
def test_a_missing_or_example_value_stops_the_synth_naming_the_key(
    env: str, key: str, value: Any, tmp_path: Path
) -> None:
    config = deployable_config(tmp_path)
    edit_yaml(config / f"{env}.yaml", {key: value})
    message = _refusal(config, env, tmp_path)
    assert "\n" not in message
    assert key in message and DOCS_SECTION in message and f"config/{env}.yaml" in message
    assert ("missing" if value is None else f"{value} is an example") in message


def test_the_alarm_topic_by_arn_of_an_example_account_is_refused(tmp_path: Path) -> None:
    config = deployable_config(tmp_path)
    edit_yaml(
        config / "prod.yaml",
        {
            "scaling.alarm_topic_email": None,
            "scaling.alarm_topic_arn": "arn:aws:sns:eu-west-1:123456789012:pager",
        },
    )
    assert "scaling.alarm_topic_arn arn:aws:sns:eu-west-1:123456789012:pager is an example" in _refusal(
        config, "prod", tmp_path
    )
    # Dropping the flag does not make prod silent: outside local and dev a topic is required.
    edit_yaml(config / "prod.yaml", {"scaling.alarm_topic_arn": None, "scaling.require_alarm_topic": None})
    assert "scaling.alarm_topic_arn or scaling.alarm_topic_email is missing" in _refusal(
        config, "prod", tmp_path
    )
    # dev may go without one unless it asks for one.
    edit_yaml(config / "dev.yaml", {"scaling.require_alarm_topic": True})
    assert "scaling.alarm_topic_arn or scaling.alarm_topic_email is missing" in _refusal(
        config, "dev", tmp_path
    )


def test_every_missing_value_is_named_at_once(tmp_path: Path) -> None:
    message = _refusal(REPO / "config", "prod", tmp_path)  # the shipped configuration: none is set
    assert message == (
        "env prod cannot deploy: account is missing; region is missing; fleet.ami_id is missing; "
        "scaling.alarm_topic_arn or scaling.alarm_topic_email is missing. Set them in config/prod.yaml "
        f"(or as CONSUMER_* variables): {DOCS_SECTION}"
    )


def test_the_app_says_it_in_one_line(tmp_path: Path) -> None:
    """``app.py`` as the CDK CLI runs it, on the shipped configuration: one line on stderr, exit 2."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CONSUMER_")}
    environ.update(CDK_CONTEXT_JSON=json.dumps({"env": "dev"}), CDK_OUTDIR=str(tmp_path / "out"))
    result = subprocess.run(
        [sys.executable, "app.py"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        "error: env dev cannot deploy: account is missing; region is missing; fleet.ami_id is missing. "
        f"Set them in config/dev.yaml (or as CONSUMER_* variables): {DOCS_SECTION}"
    ]


def test_a_bucket_the_stack_names_carries_the_account_and_the_region(tmp_path: Path) -> None:
    config = deployable_config(tmp_path)
    edit_yaml(config / "dev.yaml", {"processing.options": {"destination": "s3://orders-changelog/changes"}})
    with pytest.raises(InfraConfigError) as refused:
        build_app("dev", config_dir=config, outdir=tmp_path / "out")
    message = str(refused.value)
    assert "processing.options.destination" in message and "{account} and {region}" in message
    assert NAMES_SECTION in message and "\n" not in message
    edit_yaml(
        config / "dev.yaml",
        {
            "processing.options": {
                "destination": "s3://a-very-long-application-name-for-a-bucket-{account}-{region}/x"
            }
        },
    )
    with pytest.raises(InfraConfigError, match=r"is not an S3 bucket name"):
        build_app("dev", config_dir=config, outdir=tmp_path / "out")


def test_an_example_set_by_a_variable_names_the_variable_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = deployable_config(tmp_path)
    monkeypatch.setenv("CONSUMER_ACCOUNT", "123456789012")
    message = _refusal(config, "prod", tmp_path)
    assert message == (
        "env prod cannot deploy: account 123456789012 is an example (set by CONSUMER_ACCOUNT). "
        f"Change those variables (they override the files): {DOCS_SECTION}"
    )
    assert "config/prod.yaml" not in message
    # Beside a value missing from the file: both places are named.
    edit_yaml(config / "prod.yaml", {"fleet.ami_id": None})
    message = _refusal(config, "prod", tmp_path)
    assert "account 123456789012 is an example (set by CONSUMER_ACCOUNT); fleet.ami_id is missing" in message
    assert "Set them in config/prod.yaml" in message and "change the variable" in message
