"""The README's examples run, and work as configured processors."""

from __future__ import annotations

import pytest

from consumer.records import ShardInfo
from consumer.runtime.processors import build_processor_factory
from examples import class_form, function_form
from tests.unit.processing.test_factory import make_settings


def test_function_form_example_totals_and_checkpoints(capsys: pytest.CaptureFixture[str]) -> None:
    function_form.totals.clear()
    function_form.main()
    out = capsys.readouterr().out
    assert "customer#0: 120.75" in out and "customer#1: 90.75" in out
    assert "checkpoint: 000000000000000001006" in out


def test_class_form_example_checkpoints_every_n_and_at_shutdown(capsys: pytest.CaptureFixture[str]) -> None:
    class_form.main()
    out = capsys.readouterr().out
    assert "checkpoints: ['000000000000000001004', '000000000000000001006']" in out


def test_examples_load_as_configured_processors() -> None:
    for path, options in (
        ("examples.function_form:handle", {}),
        ("examples.class_form:AuditTrail", {"checkpoint_every": 5}),
    ):
        factory = build_processor_factory(make_settings(processor=path, options=options))
        assert factory(ShardInfo("s")) is not None


def test_windowed_counter_example_counts_per_window_and_closes_at_shard_end(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from examples import windowed_counter

    windowed_counter.main()
    out = capsys.readouterr().out
    assert "window 1763798400: 3 changes {'INSERT': 3}" in out
    assert "window 1763798404: 3 changes {'INSERT': 3}" in out
    assert "checkpoint: SHARD_END" in out


def test_parallel_indexer_example_applies_every_document_in_order_with_ten_lanes() -> None:
    from examples import parallel_indexer

    index, checkpoint, _ = parallel_indexer.run(10, count=120, keys=30, delay_millis=1)
    assert index.out_of_order == 0 and len(index.documents) == 30
    assert all(
        version == 1000 + n for n, (version, _) in enumerate(sorted(index.documents.values())[-30:], 90)
    )
    assert checkpoint == "000000000000000001119"
