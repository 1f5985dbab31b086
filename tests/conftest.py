"""Test-wide safety: no test may reach real AWS, whatever the machine's environment holds."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

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

# Every Spark JVM the tests start (the session fixture's, the CLI's and the demo's subprocesses, the
# PySpark 3.5 run) works on a few rows, lives for minutes and shares two cores with the other pytest
# workers. Three settings cut its CPU without changing any result:
# - C1 only and the serial collector: HotSpot's optimising compiler costs such a JVM more than it
#   saves (test_commits.py took 73 CPU s instead of 120).
# - A heartbeat every 60 s instead of 10 (still under spark.network.timeout, 120 s): a session
#   fixture's JVM idles while its worker runs other tests, and its two local heartbeat threads were
#   most of its idle CPU (3.8 CPU s in 40 s; 2.1 with the slower heartbeat). A `spark.*` system
#   property goes into the SparkConf.
# - PySpark 4's DataFrame debugging off: it wraps every Column and function call to send the Python
#   call site to the JVM (a stack walk and about four py4j calls each; `F.col(c) + F.lit(i)` took
#   7 to 8 ms with it, 2.6 without). Only Spark's error messages lose that context; no test reads it.
# A developer's own SPARK_SUBMIT_OPTS wins.
os.environ.setdefault(
    "SPARK_SUBMIT_OPTS",
    "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -Dspark.executor.heartbeatInterval=60s "
    "-Dspark.python.sql.dataFrameDebugging.enabled=false",
)

# Node.js for jsii runs with V8's background threads off (tests/jsii_node.sh says why); a
# developer's own JSII_NODE wins. The CDK synths of the tests and of the commands they run inherit it.
os.environ.setdefault("JSII_NODE", str(Path(__file__).resolve().parent / "jsii_node.sh"))


@pytest.fixture(autouse=True)
def _no_consumer_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings overrides from the developer's shell must not leak into tests."""
    for name in list(os.environ):
        if name.startswith("CONSUMER_"):
            monkeypatch.delenv(name, raising=False)


# How `make test`'s pytest-xdist workers share the tests (`--dist loadgroup`): tests that share a
# fixture wider than one test run on one worker, so the fixture is built once rather than once per
# worker. The CDK synth of every environment is shared by all of tests/infra; a module-scoped fixture
# (an emulator fleet run, a table written once) by its module; the local Spark session by every test
# that uses it, with the other tests of their modules. Everything else is spread test by test.
# One Spark session, not one per worker: its JVM's start and warm-up are paid once. All of
# tests/pipeline in one process cost its session's JVM 179 CPU s; spread over make test's three
# workers, their three sessions cost 237 (108, 72 and 57) on the same slow hour of this machine.
_FOLDER_GROUPS = {"infra": "cdk"}
_SHARED_SCOPES = {"module", "package", "class"}
_SESSION_GROUPS = {"spark": "spark"}  # session fixture -> the group of the tests using it


def _fixtures_of(item: pytest.Item) -> list[Any]:
    # pytest keeps the fixtures a test uses in its (private) fixture info; no public API lists scopes.
    info = getattr(item, "_fixtureinfo", None)
    return [d for defs in info.name2fixturedefs.values() for d in defs] if info is not None else []


def _session_group(item: pytest.Item) -> str | None:
    return next(
        (_SESSION_GROUPS[d.argname] for d in _fixtures_of(item) if d.argname in _SESSION_GROUPS), None
    )


def _group_of(item: pytest.Item, module_groups: dict[Path, str]) -> str | None:
    parts = item.path.parts
    if "tests" in parts and parts.index("tests") + 1 < len(parts):
        group = _FOLDER_GROUPS.get(parts[parts.index("tests") + 1])
        if group is not None:
            return group
    group = module_groups.get(item.path)  # the item's own session's group, or its module's
    if group is not None:
        return group
    if any(d.scope in _SHARED_SCOPES for d in _fixtures_of(item)):
        return str(item.path)
    return None


# First: pytest-xdist's worker-side hook of the same name turns the marks into the groups' names.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A module whose tests use a shared session joins its group whole, module-scoped fixtures and all.
    module_groups: dict[Path, str] = {}
    for item in items:
        group = _session_group(item)
        if group is not None:
            module_groups.setdefault(item.path, group)
    for item in items:
        group = _group_of(item, module_groups)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
