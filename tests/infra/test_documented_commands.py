"""The deployment commands of the README and docs/deploy.md, run as written.

Read from the documents themselves (every line of their shell blocks that runs ``make synth`` or
the project's CDK CLI), in a copy of the repository (its own ``cdk.out``; ``.venv``,
``node_modules`` and the wheel cache linked), offline and without credentials, with the test's own
per-account values given as the ``CONSUMER_*`` variables docs/deploy.md names. ``make synth`` must
succeed (and its templates pass cfn-lint); every ``cdk`` command must get as far as the CDK CLI's
"no credentials have been configured" for the account the environment is pinned to, where a
user's credentials would take over, and any other error fails the test. ``cdk destroy`` asks for a
confirmation: it gets a terminal and the answer ``y``. AWS CLI lines (``aws ssm get-parameter``)
are AWS's own tool, not this project's, and are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.infra.cdk_cli import CDK, NO_CREDENTIALS, offline_environment, run
from tests.infra.conftest import FIXTURE_ACCOUNT, REPO, fixture_variables

pytestmark = [pytest.mark.infra, pytest.mark.slow]

DOCUMENTS = ("README.md", "docs/deploy.md")
PROJECT_COMMANDS = ("make synth", "node_modules/.bin/cdk ")
CFN_LINT = str(Path(sys.executable).parent / "cfn-lint")
# Built artefacts the commands use, linked into the copy rather than copied or rebuilt.
LINKED = (".venv", "node_modules", "var")


def documented_commands() -> list[tuple[str, str]]:
    """(document, command line without its comment) for each project command in a shell block."""
    found: list[tuple[str, str]] = []
    fence = re.compile(r"^```(?:sh|bash)\n(.*?)^```", re.DOTALL | re.MULTILINE)
    for name in DOCUMENTS:
        for block in fence.findall((REPO / name).read_text()):
            for line in block.replace("\\\n", " ").splitlines():
                if line.strip().startswith((*PROJECT_COMMANDS, "cdk ")):
                    found.append((name, shlex.join(shlex.split(line, comments=True))))
    return found


def test_the_documents_hold_the_first_deployment() -> None:
    commands = documented_commands()
    readme = [c for d, c in commands if d == "README.md"]
    assert readme == [
        "make synth ENV=prod",
        "node_modules/.bin/cdk bootstrap -c env=prod",
        "node_modules/.bin/cdk deploy -c env=prod --all",
    ]
    verbs = {c.split()[1] for _, c in commands if c.startswith("node_modules/.bin/cdk")}
    assert {"bootstrap", "deploy", "destroy"} <= verbs
    # A bare `cdk` is not on anybody's PATH: every block names the project's own CLI.
    assert not [c for _, c in commands if c.startswith("cdk ")]


def _user_clone(tmp_path: Path) -> Path:
    """The repository's files (tracked and new, not ignored) with their times, so make's stamps
    stay fresh, and the built artefacts linked."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO,
        capture_output=True,
        check=True,
    ).stdout.decode()
    clone = tmp_path / "clone"
    for relative in filter(None, listed.split("\0")):
        source = REPO / relative
        if source.is_file() and not relative.startswith(LINKED):
            (clone / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / relative)
    for name in LINKED:
        if (REPO / name).exists():
            (clone / name).symlink_to(REPO / name)
    return clone


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The clone links this checkout's .venv: were it older than the files make installs from, the
    # clone's `make synth` would reinstall it, editable, from the clone, and the checkout's own
    # .venv/bin/consumer would then run the clone's code from a temporary directory.
    stamp = REPO / ".venv" / ".installed"
    stale = [
        n
        for n in ("requirements.txt", "pyproject.toml")
        if not stamp.exists() or stamp.stat().st_mtime < (REPO / n).stat().st_mtime
    ]
    if stale:
        pytest.fail(f".venv is older than {', '.join(stale)}: run `make setup` first (make test does)")
    return _user_clone(tmp_path_factory.mktemp("documented"))


COMMANDS = list(dict.fromkeys(command for _, command in documented_commands()))


@pytest.mark.skipif(not CDK.exists(), reason="project-local CDK CLI missing (make setup installs it)")
@pytest.mark.parametrize("command", COMMANDS)
def test_every_documented_deployment_command_runs_as_written(command: str, clone: Path) -> None:
    environ = offline_environment(fixture_variables("prod"))
    environ["PATH"] = os.environ["PATH"]
    argv = shlex.split(command)
    answer = "y" if argv[1:2] == ["destroy"] else None
    status, output = run(argv, clone, environ, answer=answer)
    if argv[0] == "make":
        assert status == 0, f"{command}:\n{output[-4000:]}"
        assert "feature flags are not configured" not in output, f"{command}:\n{output[-4000:]}"
        templates = sorted((clone / "cdk.out").glob("*.template.json"))
        assert len(templates) == 2, f"{command}: {templates}"
        lint = subprocess.run([CFN_LINT, *map(str, templates)], capture_output=True, text=True, check=False)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        return
    # The app built the environment's stacks, and the CLI stopped only for want of credentials for
    # the account the environment is pinned to.
    assert status != 0, f"{command}: ran to the end without credentials?\n{output[-4000:]}"
    assert f"calls for account {FIXTURE_ACCOUNT}, {NO_CREDENTIALS}" in output, f"{command}:\n{output[-4000:]}"
    assert "Subprocess exited with error" not in output, f"{command}:\n{output[-4000:]}"
