"""A key written twice in config/<env>.yaml is refused with its file, line and column: PyYAML alone
would keep the later value without a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from ground.settings import ConfigError, load_settings
from tools.cli import main
from tools.commands import ExitCode

REPO = Path(__file__).resolve().parents[3]


def test_a_nested_key_written_twice_is_refused_at_the_second(tmp_path: Path) -> None:
    (tmp_path / "twice.yaml").write_text(
        "region: us-east-1\nworker:\n  failover_time_millis: 3000\n  failover_time_millis: 9000\n"
    )
    with pytest.raises(ConfigError) as raised:
        load_settings("twice", tmp_path)
    [problem] = raised.value.problems
    assert (problem.line, problem.column) == (4, 3)
    assert "'failover_time_millis' is written twice (first at line 3, column 3)" in str(problem)
    assert str(problem).startswith(f"{tmp_path / 'twice.yaml'}:4:3")


def test_a_top_level_section_written_twice_is_refused_by_every_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "twice.yaml").write_text(
        "worker:\n  failover_time_millis: 3000\nregion: us-east-1\nworker:\n  max_leases_for_worker: 4\n"
    )
    code = main(["config", "validate", "--env", "twice", "--config-dir", str(tmp_path)])
    assert code == ExitCode.CONFIG
    err = capsys.readouterr().err
    assert f"{tmp_path / 'twice.yaml'}:4:1: key 'worker' is written twice (first at line 1, column 1)" in err


def test_the_same_key_in_two_mappings_is_no_duplicate() -> None:
    """Every shipped environment has keys of the same name in different sections (name, partitions)."""
    for env in ("local", "dev", "prod"):
        assert load_settings(env, REPO / "config").env == env
