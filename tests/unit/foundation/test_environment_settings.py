"""Settings that let environments coexist: scoped names, a pinned account, import-or-create."""

from __future__ import annotations

from typing import Any

import pytest

from ground.settings import ConfigError, Settings, load_settings
from tests.unit.foundation.test_settings import REPO_CONFIG


def _settings(**overrides: Any) -> Settings:
    data: dict[str, Any] = {
        "application_name": "shop",
        "env": "stage",
        "table": {"name": "orders", "partition_key": {"name": "pk"}},
    }
    data.update(overrides)
    return Settings.model_validate(data)


def test_names_are_the_application_name_unless_scoped() -> None:
    plain = _settings()
    assert (plain.leases_table_name, plain.workers_table_name) == ("shop", "shop-workers")
    assert (plain.metrics_namespace, plain.metrics_log_group) == ("shop", "/shop/metrics")
    scoped = _settings(scope_names_by_env=True)
    assert (scoped.leases_table_name, scoped.workers_table_name) == ("shop-stage", "shop-stage-workers")
    assert scoped.metrics_namespace == "shop-stage"
    assert (scoped.worker_log_group, scoped.application_log_group, scoped.metrics_log_group) == (
        "/shop-stage/lease-worker",
        "/shop-stage/application",
        "/shop-stage/metrics",
    )
    # A name given explicitly is used as given.
    named = _settings(scope_names_by_env=True, worker={"lease_table_name": "kcl-table"})
    assert (named.leases_table_name, named.workers_table_name) == ("kcl-table", "kcl-table-workers")


def test_shipped_environments_scope_their_names_except_local() -> None:
    names = {env: load_settings(env, REPO_CONFIG).leases_table_name for env in ("local", "dev", "prod")}
    assert names == {
        "local": "orders-stream-consumer",
        "dev": "orders-stream-consumer-dev",
        "prod": "orders-stream-consumer-prod",
    }


@pytest.mark.parametrize("account", ["12345", "abcdefghijkl", "1234567890123"])
def test_an_account_is_twelve_digits(account: str) -> None:
    with pytest.raises(ConfigError, match=r"account"):
        load_settings("prod", REPO_CONFIG, environ={"CONSUMER_ACCOUNT": account})


def test_an_account_given_as_a_number_is_read_as_text() -> None:
    assert load_settings("prod", REPO_CONFIG, environ={"CONSUMER_ACCOUNT": "210987654321"}).account == (
        "210987654321"
    )


def test_a_region_must_look_like_one() -> None:
    with pytest.raises(ConfigError, match=r"region"):
        load_settings("prod", REPO_CONFIG, environ={"CONSUMER_REGION": "Ireland"})


def test_the_table_is_imported_unless_creating_is_asked_for() -> None:
    assert _settings().table.create is False
    assert _settings().table.source_table_name == "orders"
    imported = _settings(
        table={
            "name": "orders",
            "partition_key": {"name": "pk"},
            "existing_table_name": "legacy-orders",
            "existing_stream_arn": "arn:aws:dynamodb:eu-west-1:123456789012:table/legacy-orders/stream/x",
        }
    )
    assert imported.table.source_table_name == "legacy-orders"
    with pytest.raises(ValueError, match=r"create: true and existing_table_name"):
        _settings(
            table={
                "name": "orders",
                "partition_key": {"name": "pk"},
                "create": True,
                "existing_table_name": "legacy-orders",
                "existing_stream_arn": "arn:aws:dynamodb:eu-west-1:123456789012:table/legacy-orders/stream/x",
            }
        )


def test_a_malformed_agent_endpoint_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"metrics\.agent_endpoint"):
        load_settings("prod", REPO_CONFIG, environ={"CONSUMER_METRICS__AGENT_ENDPOINT": "127.0.0.1:25888"})


def _locations(account: object, region: str | None = "eu-west-1") -> Settings:
    data: dict[str, Any] = {
        "application_name": "shop",
        "env": "prod",
        "account": account,
        "table": {"name": "orders", "partition_key": {"name": "pk"}},
        "processing": {
            "processor": "changelog",
            "options": {"destination": "s3://shop-{account}-{region}/changes"},
            "dead_letter": {"type": "s3", "uri": "s3://shop-{account}-{region}/dead"},
        },
        "pipeline": {"snapshot_uri": "s3://shop-{account}-{region}/snapshot", "spark_master": "local[1]"},
    }
    if region is not None:
        data["region"] = region
    return Settings.model_validate(data)


def test_account_and_region_fill_the_s3_locations_bucket_names_are_global() -> None:
    filled = _locations("246813579135")
    assert filled.processing.options["destination"] == "s3://shop-246813579135-eu-west-1/changes"
    assert filled.processing.dead_letter.uri == "s3://shop-246813579135-eu-west-1/dead"
    assert filled.pipeline.snapshot_uri == "s3://shop-246813579135-eu-west-1/snapshot"
    assert filled.pipeline.spark_master == "local[1]"  # only the locations are filled in
    assert filled.unfilled_locations() == [] and not [w for w in filled.warnings() if "{account}" in w]
    # An unquoted account (YAML reads a number) fills them in as the account it is.
    assert _locations(246813579135).processing.options["destination"].startswith("s3://shop-246813579135-")


def test_without_an_account_the_locations_keep_their_braces_and_say_so() -> None:
    unset = _locations(None)
    assert unset.processing.options["destination"] == "s3://shop-{account}-{region}/changes"
    assert unset.unfilled_locations() == [
        "processing.options.destination",
        "processing.dead_letter.uri",
        "pipeline.snapshot_uri",
    ]
    (warning,) = [w for w in unset.warnings() if "{account}" in w]
    assert warning.startswith(
        "processing.options.destination, processing.dead_letter.uri, pipeline.snapshot_uri"
    )


def test_a_worker_refuses_to_start_on_a_location_without_its_account(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from tools.cli import main

    monkeypatch.delenv("CONSUMER_ACCOUNT", raising=False)
    assert main(["run", "--env", "prod", "--config-dir", str(REPO_CONFIG)]) == 1
    err = capsys.readouterr().err
    assert "processing.options.destination, processing.dead_letter.uri" in err
    assert (
        "name {account}: set account (the 12-digit AWS account) in config/prod.yaml, or CONSUMER_ACCOUNT"
        in err
    )
