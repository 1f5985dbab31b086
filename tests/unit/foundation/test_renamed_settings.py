"""processing.batching.batch_size was processing.batching.max_records (a name worker.max_records, the
GetRecords Limit, also has): the old name still works for one release, says which file to change and
to what, and giving both names is an error that names them."""

from __future__ import annotations

import shutil
import warnings
from pathlib import Path

import pytest
import yaml

from ground.settings import BatchingSettings, ConfigError, RenamedKeyWarning, load_settings
from tools.cli import main

REPO_CONFIG = Path(__file__).resolve().parents[3] / "config"


@pytest.fixture
def config_copy(tmp_path: Path) -> Path:
    target = tmp_path / "config"
    shutil.copytree(REPO_CONFIG, target)
    return target


def _batching(config: Path, **keys: int) -> Path:
    """Set ``processing.batching`` keys in the copied dev.yaml (the rest of the file unchanged)."""
    path = config / "dev.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data.setdefault("processing", {}).setdefault("batching", {}).update(keys)
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_the_old_name_is_honoured_with_a_deprecation_warning_naming_the_file_and_the_new_key(
    config_copy: Path,
) -> None:
    _batching(config_copy, max_records=250)
    with pytest.warns(DeprecationWarning) as caught:
        settings = load_settings("dev", config_copy)
    assert settings.processing.batching.batch_size == 250
    assert settings.processing.options  # the rest of the section is still dev.yaml's
    (notice,) = [str(w.message) for w in caught if issubclass(w.category, RenamedKeyWarning)]
    assert notice.startswith(f"{config_copy / 'dev.yaml'}: processing.batching.max_records is deprecated")
    assert "rename it processing.batching.batch_size" in notice
    # Operators do not see DeprecationWarning: the notice is also one of the settings' warnings.
    assert notice in settings.warnings()


def test_the_old_name_from_an_environment_variable_names_the_variable() -> None:
    environ = {"CONSUMER_PROCESSING__BATCHING__MAX_RECORDS": "40"}
    with pytest.warns(RenamedKeyWarning, match="^environment variable CONSUMER_PROCESSING__BATCHING__MAX"):
        settings = load_settings("dev", REPO_CONFIG, environ=environ)
    assert settings.processing.batching.batch_size == 40


def test_config_validate_prints_the_notice(config_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _batching(config_copy, max_records=250)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        assert main(["config", "validate", "--env", "dev", "--config-dir", str(config_copy)]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "rename it processing.batching.batch_size" in err


def test_giving_both_names_is_an_error_naming_both(config_copy: Path) -> None:
    _batching(config_copy, max_records=250, batch_size=300)
    with pytest.raises(ConfigError) as raised:
        load_settings("dev", config_copy)
    (problem,) = raised.value.problems
    assert problem.source == str(config_copy / "dev.yaml") and problem.path == "processing.batching"
    assert (
        "processing.batching.max_records and processing.batching.batch_size are both set" in problem.message
    )
    assert "keep only batch_size" in problem.message


def test_the_new_name_alone_says_nothing(config_copy: Path) -> None:
    _batching(config_copy, batch_size=300)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        settings = load_settings("dev", config_copy)
    assert settings.processing.batching.batch_size == 300
    assert not any("deprecated" in w for w in settings.warnings())


def test_the_model_itself_accepts_the_old_name_with_the_warning() -> None:
    with pytest.warns(RenamedKeyWarning, match="rename it processing.batching.batch_size"):
        assert BatchingSettings.model_validate({"max_records": 7}).batch_size == 7
    with pytest.raises(ValueError, match="max_records and processing.batching.batch_size are both set"):
        BatchingSettings.model_validate({"max_records": 7, "batch_size": 8})
