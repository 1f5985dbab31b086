"""Settings: layering, overrides, and errors that name the file and the key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from ground.settings import ConfigError, Settings, WorkerSettings, load_settings
from tools.cli import main
from tools.commands import ExitCode

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.fixture
def config_copy(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, target)
    return target


@pytest.mark.parametrize("env", ["local", "dev", "prod"])
def test_shipped_environments_validate(env: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--env", env, "--config-dir", str(REPO_CONFIG)]) == 0
    assert f"config/{env}.yaml is valid" in capsys.readouterr().out


def test_environment_file_overrides_base() -> None:
    base_only = load_settings("dev", REPO_CONFIG)
    prod = load_settings("prod", REPO_CONFIG)
    assert base_only.table.billing_mode == "PAY_PER_REQUEST"
    assert prod.table.billing_mode == "PROVISIONED"
    assert prod.worker.max_leases_for_worker == 8
    # Keys the environment does not set come from base.yaml.
    assert prod.table.partition_key.name == "pk"
    assert prod.env == "prod"


def test_kcl_defaults_hold_where_nothing_overrides() -> None:
    s = load_settings("dev", REPO_CONFIG)
    w = s.worker
    assert (w.failover_time_millis, w.max_leases_to_steal_at_one_time, w.max_records) == (10_000, 1, None)
    assert (
        w.records_per_read(s.source.max_records_per_read) == 1000
    )  # max_records unset: the table's stream's most
    assert w.call_process_records_even_for_empty_record_list is False
    assert w.renewal_interval_millis == 10_000 // 3 - 25
    # KCL's rule (the application name names the leases table and the namespace), scoped by env.
    assert s.leases_table_name == s.metrics_namespace == f"{s.application_name}-dev"


def test_environment_variables_override_files() -> None:
    environ = {"CONSUMER_WORKER__FAILOVER_TIME_MILLIS": "20000", "CONSUMER_FLEET__MAX_INSTANCES": "9"}
    s = load_settings("prod", REPO_CONFIG, environ=environ)
    assert s.worker.failover_time_millis == 20_000
    assert s.fleet.max_instances == 9


def test_config_dir_from_environment_variable(config_copy: Path) -> None:
    (config_copy / "staging.yaml").write_text("fleet: {max_instances: 3}\n")
    s = load_settings("staging", environ={"CONSUMER_CONFIG_DIR": str(config_copy)})
    assert s.fleet.max_instances == 3


def test_schema_lists_worker_properties(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "schema"]) == 0
    schema = json.loads(capsys.readouterr().out)
    worker = schema["$defs"]["WorkerSettings"]["properties"]
    assert "failover_time_millis" in worker and worker["max_records"]["anyOf"][0]["maximum"] == 10_000


def test_fleet_too_small_for_partitions_warns() -> None:
    s = load_settings("prod", REPO_CONFIG, environ={"CONSUMER_WORKER__MAX_LEASES_FOR_WORKER": "1"})
    assert any("cannot hold every active shard" in w for w in s.warnings())


# Each case: (file to write, its text, key path expected in the message, words expected).
MALFORMED = [
    (
        "prod.yaml",
        "worker:\n  failover_time_milis: 5000\n",
        "worker.failover_time_milis",
        "did you mean 'failover_time_millis'",
    ),
    ("prod.yaml", "workr:\n  max_records: 10\n", "workr", "did you mean 'worker'"),
    (
        "prod.yaml",
        "worker:\n  max_records: 1500\n",
        "worker.max_records",
        "DynamoDB Streams serves at most 1000",
    ),
    ("prod.yaml", "worker:\n  max_records: 10001\n", "worker.max_records", "less than or equal to 10000"),
    ("prod.yaml", "worker:\n  initial_position: EARLIEST\n", "worker.initial_position", "TRIM_HORIZON"),
    ("prod.yaml", "worker:\n  max_records: [\n", "prod.yaml:3:1:", "not valid YAML"),
    (
        "prod.yaml",
        "worker:\n  zzz_not_a_key: 1\n",
        "prod.yaml:2:3: worker.zzz_not_a_key",
        f"the {len(WorkerSettings.model_fields)} keys of worker",
    ),
    ("prod.yaml", "- a\n- b\n", "(top level)", "must be a mapping"),
    (
        "prod.yaml",
        "worker:\n  lease_renewal_interval_millis: 20000\n",
        "worker",
        "leaves no room for a retried heartbeat",
    ),
    (
        "prod.yaml",
        "logs:\n  retention_days: 10\n",
        "logs.retention_days",
        "not a CloudWatch Logs retention value",
    ),
    ("prod.yaml", "fleet:\n  min_instances: 5\n", "fleet", "min_instances <= desired_instances"),
    (
        "base.yaml",
        "application_name: ab\ntable:\n  partition_key: {name: pk}\n",
        "table.name",
        "required key is missing",
    ),
    (
        "prod.yaml",
        "processing:\n  dead_letter: {type: s3, uri: null}\n",
        "processing.dead_letter",
        "needs dead_letter.uri",
    ),
    ("prod.yaml", "load:\n  put_ratio: 0.9\n", "load", "must be 1"),
    ("prod.yaml", "scaling:\n  period_seconds: 90\n", "scaling.period_seconds", "multiple of 60"),
    (
        "prod.yaml",
        "table:\n  partition_key: {name: pk, type: X}\n",
        "table.partition_key.type",
        "'S', 'N' or 'B'",
    ),
]


@pytest.mark.parametrize(
    ("filename", "text", "key", "words"), MALFORMED, ids=[m[2] + ":" + m[3][:20] for m in MALFORMED]
)
def test_malformed_configuration_names_file_and_key(
    config_copy: Path, capsys: pytest.CaptureFixture[str], filename: str, text: str, key: str, words: str
) -> None:
    (config_copy / filename).write_text(text)
    code = main(["config", "validate", "--env", "prod", "--config-dir", str(config_copy)])
    err = capsys.readouterr().err
    assert code == ExitCode.CONFIG
    assert "Traceback" not in err
    # One line per problem, short enough to read: a file, a key, what to do.
    for line in err.splitlines():
        assert line.startswith("error: ") and len(line.replace(str(config_copy), "")) < 300, line
    assert str(config_copy / filename) in err
    assert key in err
    assert words in err


def test_bad_environment_variable_is_named(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONSUMER_WORKER__MAX_RECORDS", "lots")
    assert main(["config", "validate", "--env", "prod", "--config-dir", str(REPO_CONFIG)]) == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert "environment variable CONSUMER_WORKER__MAX_RECORDS" in err and "worker.max_records" in err


def test_unknown_environment_suggests_nearest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--env", "prd", "--config-dir", str(REPO_CONFIG)]) == ExitCode.CONFIG
    assert "did you mean 'prod'" in capsys.readouterr().err


def test_config_error_lists_every_problem(config_copy: Path) -> None:
    (config_copy / "prod.yaml").write_text("worker:\n  max_records: 0\n  max_leases_for_worker: 0\n")
    with pytest.raises(ConfigError) as info:
        load_settings("prod", config_copy)
    paths = {p.path for p in info.value.problems}
    assert {"worker.max_records", "worker.max_leases_for_worker"} <= paths


def test_settings_are_immutable() -> None:
    s: Settings = load_settings("local", REPO_CONFIG)
    with pytest.raises(Exception, match="frozen"):
        s.worker.max_records = 5  # type: ignore[misc]


# ------------------------------------------------------------ options belong to their processor


def test_naming_another_processor_drops_the_options_of_the_one_below() -> None:
    """local.yaml gives the changelog sink a destination; a variable naming a function processor
    must not hand it that destination (it used to: "cannot be passed to the function")."""
    local = load_settings("local", REPO_CONFIG, environ={})
    assert local.processing.options == {"destination": "var/changelog"}
    mine = load_settings(
        "local", REPO_CONFIG, environ={"CONSUMER_PROCESSING__PROCESSOR": "examples.function_form:handle"}
    )
    assert mine.processing.processor == "examples.function_form:handle"
    assert mine.processing.options == {}


def test_options_stay_with_the_processor_they_were_written_for(config_copy: Path) -> None:
    # Naming the same processor again keeps its options.
    same = load_settings("local", config_copy, environ={"CONSUMER_PROCESSING__PROCESSOR": "changelog"})
    assert same.processing.options == {"destination": "var/changelog"}
    # A file that names another processor with its own options gets only those.
    local = yaml.safe_load((config_copy / "local.yaml").read_text())
    local["processing"] = {"processor": "examples.class_form:AuditTrail", "options": {"checkpoint_every": 10}}
    (config_copy / "mine.yaml").write_text(yaml.safe_dump(local))
    (config_copy / "base.yaml").write_text(
        (config_copy / "base.yaml")
        .read_text()
        .replace("processor: changelog", "processor: changelog\n  options: {format: jsonl}")
    )
    mine = load_settings("mine", config_copy, environ={})
    assert mine.processing.options == {"checkpoint_every": 10}
    # Options set by a variable for the processor of the file below are merged as before.
    more = load_settings("local", config_copy, environ={"CONSUMER_PROCESSING__OPTIONS__FORMAT": "parquet"})
    assert more.processing.options == {"destination": "var/changelog", "format": "parquet"}


def test_an_empty_mapping_clears_what_the_files_set() -> None:
    cleared = load_settings("local", REPO_CONFIG, environ={"CONSUMER_PROCESSING__OPTIONS": "{}"})
    assert cleared.processing.options == {}


def test_user_code_is_imported_from_the_working_directory_by_default() -> None:
    assert load_settings("local", REPO_CONFIG, environ={}).processing.import_paths == ["."]


def test_loaded_sources_name_files_and_variables() -> None:
    from ground.settings import loaded_sources

    sources = loaded_sources(
        "prod", REPO_CONFIG, environ={"CONSUMER_FLEET__MAX_INSTANCES": "9", "HOME": "/x"}
    )
    assert sources == [
        str(REPO_CONFIG / "base.yaml"),
        str(REPO_CONFIG / "prod.yaml"),
        "CONSUMER_FLEET__MAX_INSTANCES",
    ]


def test_commands_say_which_environment_they_loaded(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "validate", "--config-dir", str(REPO_CONFIG)]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first.startswith("env local (the default: pass --env to choose) from ")
    assert str(REPO_CONFIG / "local.yaml") in first


def test_variables_naming_a_processor_and_its_options_together_keep_them() -> None:
    # OPTIONS__TABLE sorts before PROCESSOR; it is still an option of the processor the variables name.
    environ = {
        "CONSUMER_PROCESSING__PROCESSOR": "dynamodb_replica",
        "CONSUMER_PROCESSING__OPTIONS__TABLE": "orders-replica",
    }
    replica = load_settings("local", REPO_CONFIG, environ=environ)
    assert replica.processing.options == {"table": "orders-replica"}


def test_reload_on_trimmed_data_is_refused_with_tumbling_windows() -> None:
    """A reload hands the table's items as plain batches; a window's state cannot take them in."""
    base = {"application_name": "orders-app", "table": {"name": "orders", "partition_key": {"name": "pk"}}}
    Settings.model_validate({**base, "worker": {"on_trimmed": "reload"}})
    with pytest.raises(
        ValueError, match="on_trimmed: reload cannot go with processing.tumbling_window_seconds"
    ):
        Settings.model_validate(
            {**base, "worker": {"on_trimmed": "reload"}, "processing": {"tumbling_window_seconds": 60}}
        )
