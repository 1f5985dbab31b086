"""docs/migrating-from-lambda.md's steps, run as written: the commands and the processor name are
read from the page (the blocks between its ``lambda-steps``, ``lambda-name`` and ``lambda-run``
markers), so this test fails when the page and the product drift apart.

"Your" function is a plain Lambda handler (``lambda_function.py`` beside the project, as the page
says) that can never process the item ``item-3``. The scaffold's retry and local dead letter must
catch it: ``local write`` of five items returns once the worker checkpointed past all five, four
are processed, and the fifth is in ``var/orders_fn-dead-letter`` with the handler's error. As in
the README's test, the one change made is the emulator port of the generated environment (a free
one), and the commands get no credentials, no PYTHONPATH and no CONSUMER_* variables.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from tests.e2e.test_first_processor import PORT_IN_CONFIG, argv, clean_environment, cleanup, free_port

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "migrating-from-lambda.md"

YOUR_FUNCTION = '''"""An orders function as deployed on Lambda: one line per processed order; item-3 never works."""

import json


def lambda_handler(event, context):
    with open("var/orders.jsonl", "a") as out:
        for record in event["Records"]:
            keys = record["dynamodb"]["Keys"]
            if keys["pk"]["S"] == "item-3":
                raise ValueError("order item-3 cannot be priced")
            out.write(json.dumps({"pk": keys["pk"]["S"], "event": record["eventName"]}) + "\\n")
    return {"batchItemFailures": []}
'''


def block(name: str, language: str) -> str:
    text = GUIDE.read_text(encoding="utf-8")
    start, end = f"<!-- {name}:start -->", f"<!-- {name}:end -->"
    fenced = re.search(rf"```{language}\n(.*?)```", text[text.index(start) : text.index(end)], re.S)
    assert fenced, f"the {name} block of {GUIDE.name} holds no ```{language} fence"
    return fenced.group(1)


def commands(name: str) -> list[str]:
    return [line.strip() for line in block(name, "sh").splitlines() if line.strip()]


def test_the_lambda_guide_steps_work_as_written_and_a_poison_goes_to_the_dead_letter(tmp_path: Path) -> None:
    project = tmp_path / "project"
    (project / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "base.yaml", project / "config" / "base.yaml")
    (project / "lambda_function.py").write_text(YOUR_FUNCTION)
    env = clean_environment()
    background: list[subprocess.Popen[bytes]] = []
    name_line = next(line for line in block("lambda-name", "yaml").splitlines() if "processor:" in line)
    steps = [*commands("lambda-steps"), "(name it)", *commands("lambda-run")]
    env_name = ""
    with cleanup(project, env, background):
        for command in steps:
            if command == "(name it)":  # step 2: the processor line the page shows, in the scaffold's file
                config = project / "config" / f"{env_name}.yaml"
                text = re.sub(
                    r"^  processor: .*$", name_line.rstrip(), config.read_text(), count=1, flags=re.M
                )
                config.write_text(text)
                continue
            words = shlex.split(command, comments=True)
            if command.endswith("&"):
                log = (tmp_path / "worker.log").open("wb")
                background.append(
                    subprocess.Popen(
                        argv(command.rstrip("&").strip()),
                        cwd=project,
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )
                log.close()
                continue
            if words == ["kill", "%1"]:
                background[0].send_signal(signal.SIGTERM)
                assert background[0].wait(timeout=60) == 0, (tmp_path / "worker.log").read_text()
                continue
            result = subprocess.run(
                argv(command), check=False, cwd=project, env=env, capture_output=True, text=True, timeout=180
            )
            assert result.returncode == 0, f"{command}\n{result.stdout}\n{result.stderr}"
            assert "Traceback" not in result.stderr, f"{command}\n{result.stderr}"
            if words[1:4] == ["new", "processor", "--lambda"]:
                env_name = words[4]
                config = project / "config" / f"{env_name}.yaml"
                text = config.read_text()
                match = PORT_IN_CONFIG.search(text)
                assert match, text
                config.write_text(text.replace(match.group(1), str(free_port())))
            if words[1:3] == ["local", "write"]:
                assert "processed: a worker checkpointed them" in result.stdout, result.stdout
    processed = [json.loads(line) for line in (project / "var" / "orders.jsonl").read_text().splitlines()]
    assert {p["pk"] for p in processed} == {"item-1", "item-2", "item-4", "item-5"}
    letters = [
        json.loads(p.read_text()) for p in (project / "var" / f"{env_name}-dead-letter").rglob("*.json")
    ]
    assert len(letters) == 1, letters
    text = json.dumps(letters[0])
    assert "item-3" in text and "order item-3 cannot be priced" in text and "ValueError" in text
