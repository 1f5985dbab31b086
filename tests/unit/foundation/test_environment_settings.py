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
