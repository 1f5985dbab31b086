"""The worker's collector settings: the start-up heap frozen, the young threshold raised."""

from __future__ import annotations

import gc

from consumer.runtime.clients import stream_client_config, user_agent
from consumer.runtime.gc_tuning import OLDER_THRESHOLDS, YOUNG_THRESHOLD, tune_for_long_running


def test_tuning_freezes_what_lives_and_raises_the_thresholds() -> None:
    kept = [object() for _ in range(1000)]  # noqa: F841 - alive during the call, so frozen by it
    before = gc.get_threshold()
    try:
        replaced = tune_for_long_running()
        assert replaced == before
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
        assert gc.get_freeze_count() > 1000
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_clients_send_a_fixed_user_agent_naming_the_product() -> None:
    agent = user_agent()
    assert agent.startswith("dynamodb-stream-consumer/") and " botocore/" in agent and " Python/" in agent
    assert stream_client_config().user_agent == agent
