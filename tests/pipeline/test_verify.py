"""verify: snapshot vs a scan of the live table, against moto's server on a loopback port."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyspark.sql import SparkSession

from pipeline import jobs
from pipeline.errors import VerifyError
from pipeline.reports import run_verify
from pipeline.snapshot_run import run_snapshot
from tests.pipeline.fixtures import change, settings_for, write_object

pytestmark = pytest.mark.spark
P = "shardId-1"


RICH = {
    "price": {"N": "1.50"},
    "tags": {"SS": ["y", "x"]},
    "blob": {"B": "AAEC"},
    "doc": {"M": {"b": {"NS": ["2", "10"]}, "a": {"L": [{"BOOL": False}, {"NULL": True}]}}},
}


def test_counts_matching_missing_extra_and_stale(
    spark: SparkSession, tmp_path: Path, dynamodb: Any, endpoint: str
) -> None:
    settings = settings_for(tmp_path).model_copy(update={"endpoint_url": endpoint})
    write_object(
        tmp_path / "changelog",
        [
            change(P, 1, "INSERT", "same", image=RICH),
            change(P, 2, "INSERT", "plain", image={"n": {"N": "7"}}),
            change(P, 3, "INSERT", "old", image={"n": {"N": "1"}}),
            change(P, 4, "INSERT", "extra"),
        ],
    )
    run_snapshot(spark, settings)
    keys = lambda pk: {"pk": {"S": pk}, "sk": {"S": "a"}}  # noqa: E731
    # The table holds the same values in other spellings: 1.5, another set order, raw bytes.
    same = {
        **keys("same"),
        "price": {"N": "1.5"},
        "tags": {"SS": ["x", "y"]},
        "blob": {"B": b"\x00\x01\x02"},
        "doc": {"M": {"a": {"L": [{"BOOL": False}, {"NULL": True}]}, "b": {"NS": ["10", "2.0"]}}},
    }
    dynamodb.put_item(TableName="orders", Item=same)
    dynamodb.put_item(TableName="orders", Item={**keys("plain"), "n": {"N": "7"}})
    dynamodb.put_item(TableName="orders", Item={**keys("old"), "n": {"N": "2"}})
    dynamodb.put_item(TableName="orders", Item={**keys("missing")})

    result = run_verify(spark, settings, dynamodb)

    assert result.counts == {"match": 2, "missing": 1, "extra": 1, "stale": 1}
    assert result.examples == {
        "missing": ['{"pk":"missing","sk":"a"}'],
        "extra": ['{"pk":"extra","sk":"a"}'],
        "stale": ['{"pk":"old","sk":"a"}'],
    }
    assert result.differences == 3


def test_exit_code_is_zero_only_without_differences(
    spark: SparkSession, tmp_path: Path, dynamodb: Any, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = settings_for(tmp_path).model_copy(update={"endpoint_url": endpoint})
    write_object(tmp_path / "changelog", [change(P, 1, "INSERT", "a", image={"n": {"N": "1"}})])
    run_snapshot(spark, settings)
    args = argparse.Namespace(job="verify", full=False, tolerate_bad_lines=None)
    assert jobs._execute(spark, args, settings) == 1
    assert "0 match, 0 missing, 1 extra, 0 stale" in capsys.readouterr().out

    dynamodb.put_item(TableName="orders", Item={"pk": {"S": "a"}, "sk": {"S": "a"}, "n": {"N": "1"}})
    assert jobs._execute(spark, args, settings) == 0
    assert "1 match, 0 missing, 0 extra, 0 stale" in capsys.readouterr().out


def test_snapshot_with_verify_commits_then_answers_as_verify_would(
    spark: SparkSession, tmp_path: Path, dynamodb: Any, endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``snapshot --verify`` (the demo's one Spark step): the run commits first, then the exit status
    is verify's over what it committed."""
    settings = settings_for(tmp_path).model_copy(update={"endpoint_url": endpoint})
    args = argparse.Namespace(job="snapshot", full=False, tolerate_bad_lines=None, verify=True)
    write_object(tmp_path / "changelog", [change(P, 1, "INSERT", "a", image={"n": {"N": "1"}})])
    assert jobs._execute(spark, args, settings) == 1  # committed, and the table has no item "a"
    out = capsys.readouterr().out
    assert "[4/4] committed" in out and "0 match, 0 missing, 1 extra, 0 stale" in out

    dynamodb.put_item(TableName="orders", Item={"pk": {"S": "a"}, "sk": {"S": "a"}, "n": {"N": "2"}})
    write_object(tmp_path / "changelog", [change(P, 2, "MODIFY", "a", image={"n": {"N": "2"}})])
    assert jobs._execute(spark, args, settings) == 0
    assert "1 match, 0 missing, 0 extra, 0 stale" in capsys.readouterr().out


def test_a_missing_table_is_a_verify_error(spark: SparkSession, tmp_path: Path, endpoint: str) -> None:
    settings = settings_for(tmp_path)
    write_object(tmp_path / "changelog", [change(P, 1, "INSERT", "a")])
    run_snapshot(spark, settings)
    client = boto3.client("dynamodb", region_name="us-east-1", endpoint_url=endpoint)
    with pytest.raises(VerifyError, match="cannot scan table 'orders' \\(ResourceNotFoundException\\)"):
        run_verify(spark, settings, client)
