"""``consumer new processor NAME``: the files of a first processor, ready to run locally.

Three files, each small enough to read in a minute, and nothing else:

* ``processors/NAME.py`` — a function-form processor class: ``handle(batch)`` appends one JSON line
  per record to a file (its ``output`` option), so "my records arrived" is something to look at;
  with ``--lambda``, an AWS Lambda handler ``lambda_handler(event, context)`` that does the same
  from Lambda's DynamoDB Streams event and answers with ``batchItemFailures`` (the Lambda form);
* ``tests/test_NAME.py`` — a test of it on a hand-made batch (the Lambda handler: on the event the
  fleet builds), no AWS and no emulator;
* ``config/NAME.yaml`` — an environment on the local emulator that uses it, with the processor's
  options in their own block (the Lambda form's: the function settings its context reports). It has a table and an
  emulator port of its own (:func:`choose_port`), so it never shares an emulator, a table or leases
  with ``local`` (the demo's) or another scaffold.

Existing files are never overwritten: the scaffold refuses and names them.
"""

from __future__ import annotations

import keyword
import re
import socket
import zlib
from dataclasses import dataclass
from pathlib import Path

NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_]{1,40}$")
# Scaffolded environments' emulators listen in this range (config/local.yaml's 4599 is below it).
PORT_RANGE = range(4600, 5000)
_PORT_IN_CONFIG = re.compile(r"(?:127\.0\.0\.1|localhost):(\d+)|^\s*port:\s*(\d+)", re.M)


class ScaffoldError(Exception):
    """The scaffold cannot write its files; the message says why and what to do."""


@dataclass(frozen=True)
class ScaffoldFile:
    path: Path
    text: str
    what: str


def check_name(name: str) -> None:
    if not NAME_PATTERN.match(name) or keyword.iskeyword(name):
        raise ScaffoldError(
            f"processor name {name!r}: use 2 to 41 lower-case letters, digits and _, starting with a "
            "letter (it becomes a Python module and an environment name)"
        )


def processor_module(name: str) -> str:
    return f'''"""{name}: processes the records of the source table's stream.

Written by `consumer new processor {name}`; replace the body of ``handle`` with your own work.
`consumer run --env {name}` creates one ``Processor`` per shard (with ``processing.options`` from
config/{name}.yaml as keyword arguments) and calls ``handle`` with each batch of that shard's
records, in stream order. A normal return checkpoints the batch; an exception delivers it again
(``processing.retry``), so ``handle`` must be safe to repeat for the same records.
"""

from __future__ import annotations

import json
from pathlib import Path

from consumer.processing import Batch


class Processor:
    def __init__(self, output: str = "var/{name}.jsonl") -> None:
        self.output = Path(output)
        self.output.parent.mkdir(parents=True, exist_ok=True)

    def handle(self, batch: Batch) -> None:
        lines = [
            json.dumps(
                {{
                    "event": record.event_name,
                    "keys": record.keys,
                    "new_image": record.new_image,
                    "shard": batch.shard_id,
                    "sequence_number": record.sequence_number,
                }},
                default=str,  # numbers arrive as Decimal
            )
            for record in batch.records
        ]
        if lines:
            with self.output.open("a", encoding="utf-8") as out:
                out.write("\\n".join(lines) + "\\n")  # one write per batch
'''


def processor_test(name: str) -> str:
    return f'''"""The {name} processor on a hand-made batch: no AWS, no emulator."""

from __future__ import annotations

import json
from pathlib import Path

from consumer.processing import Batch
from consumer.records import ShardInfo, StreamRecord
from processors.{name} import Processor


def test_each_record_becomes_one_line(tmp_path: Path) -> None:
    output = tmp_path / "out.jsonl"
    record = StreamRecord(
        {{
            "eventID": "1",
            "eventName": "INSERT",
            "dynamodb": {{
                "Keys": {{"pk": {{"S": "item-1"}}, "sk": {{"S": "v1"}}}},
                "NewImage": {{"pk": {{"S": "item-1"}}, "sk": {{"S": "v1"}}, "quantity": {{"N": "3"}}}},
                "SequenceNumber": "100",
                "SizeBytes": 30,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            }},
        }},
        "shardId-1",
    )
    Processor(output=str(output)).handle(Batch(ShardInfo("shardId-1"), (record,)))
    (line,) = output.read_text().splitlines()
    assert json.loads(line)["keys"] == {{"pk": "item-1", "sk": "v1"}}
    assert json.loads(line)["new_image"]["quantity"] == "3"
'''


def lambda_module(name: str) -> str:
    return f'''"""{name}: an AWS Lambda handler for the source table's DynamoDB Streams events.

Written by `consumer new processor --lambda {name}`, exactly as for Lambda: an existing handler can
replace this file unchanged (config/{name}.yaml names it ``lambda:processors.{name}.lambda_handler``).
The fleet calls it with Lambda's event (one shard's records, in stream order, images in DynamoDB
JSON) and a context, and reads its answer as Lambda's ReportBatchItemFailures: the records from the
lowest ``itemIdentifier`` on are delivered again (``processing.retry``), an exception delivers the
whole batch again, so the handler must be safe to repeat for the same records.
docs/migrating-from-lambda.md maps an event source mapping's settings to config/{name}.yaml.
"""

import json
import os
from pathlib import Path


def lambda_handler(event, context):
    output = Path(os.environ.get("{name.upper()}_OUTPUT", "var/{name}.jsonl"))
    output.parent.mkdir(parents=True, exist_ok=True)
    for record in event["Records"]:
        change = record["dynamodb"]
        try:
            line = {{
                "event": record["eventName"],
                "keys": change["Keys"],
                "new_image": change.get("NewImage"),
                "sequence_number": change["SequenceNumber"],
                "source": record["eventSourceARN"],
            }}
            with output.open("a", encoding="utf-8") as out:
                out.write(json.dumps(line) + "\\n")
        except Exception:
            # Everything before this record is done; it and the ones after it come again.
            return {{"batchItemFailures": [{{"itemIdentifier": change["SequenceNumber"]}}]}}
    return {{"batchItemFailures": []}}
'''


def lambda_test(name: str) -> str:
    return f'''"""The {name} Lambda handler on the event the fleet builds: no AWS, no emulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from consumer.processing import streams_event
from consumer.records import StreamRecord
from processors.{name} import lambda_handler

STREAM = "arn:aws:dynamodb:us-east-1:123456789012:table/orders/stream/2026-01-01T00:00:00.000"


def test_each_record_becomes_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    output = tmp_path / "out.jsonl"
    monkeypatch.setenv("{name.upper()}_OUTPUT", str(output))
    record = StreamRecord(
        {{
            "eventID": "1",
            "eventName": "INSERT",
            "eventVersion": "1.1",
            "eventSource": "aws:dynamodb",
            "awsRegion": "us-east-1",
            "dynamodb": {{
                "ApproximateCreationDateTime": 1767225600.0,
                "Keys": {{"pk": {{"S": "item-1"}}, "sk": {{"S": "v1"}}}},
                "NewImage": {{"pk": {{"S": "item-1"}}, "sk": {{"S": "v1"}}, "quantity": {{"N": "3"}}}},
                "SequenceNumber": "100",
                "SizeBytes": 30,
                "StreamViewType": "NEW_AND_OLD_IMAGES",
            }},
        }},
        "shardId-1",
    )
    assert lambda_handler(streams_event([record], STREAM), None) == {{"batchItemFailures": []}}
    (line,) = output.read_text().splitlines()
    assert json.loads(line)["keys"] == {{"pk": {{"S": "item-1"}}, "sk": {{"S": "v1"}}}}
    assert json.loads(line)["source"] == STREAM
'''


def _class_processing(name: str) -> str:
    return f"""  processor: processors.{name}:Processor
  # The options of processors.{name}:Processor (its constructor's keyword arguments). Options
  # belong to the processor named beside them: naming another processor elsewhere starts from none.
  options:
    output: var/{name}.jsonl
"""


def _lambda_processing(name: str) -> str:
    return f"""  # An AWS Lambda handler, named as Lambda names it (module.function). Its options are the
  # function settings its context reports; timeout_seconds also bounds every invocation. An event
  # source mapping's settings map to processing.* keys: docs/migrating-from-lambda.md.
  processor: lambda:processors.{name}.lambda_handler
  options:
    function_name: {name.replace("_", "-")}
    memory_limit_in_mb: 128
    timeout_seconds: 60
  # A record the handler can never process must not hold up its shard: a failing batch is retried
  # (split to find the one record), and a record still failing after 3 retries goes to the dead
  # letter below, with its error, before the checkpoint moves past it. Without a dead letter it would
  # be retried until someone acts (Lambda would drop it: MaximumRetryAttempts).
  retry:
    max_retry_attempts: 3
    base_backoff_millis: 100
    max_backoff_millis: 2000
  dead_letter:
    type: local
    uri: var/{name}-dead-letter
"""


def ports_in_use(config: Path) -> set[int]:
    """The emulator ports the project's environment files already name (endpoint_url, emulator.port)."""
    ports: set[int] = set()
    for path in config.glob("*.yaml") if config.is_dir() else ():
        for match in _PORT_IN_CONFIG.finditer(path.read_text(encoding="utf-8")):
            ports.add(int(match.group(1) or match.group(2)))
    return ports


def _bindable(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def choose_port(name: str, config: Path) -> int:
    """A port for environment ``name``'s emulator: the same for the same name (from its CRC), moved
    on past ports another environment of the project names or something already listens on."""
    taken = ports_in_use(config)
    start = zlib.crc32(name.encode()) % len(PORT_RANGE)
    for step in range(len(PORT_RANGE)):
        port = PORT_RANGE[(start + step) % len(PORT_RANGE)]
        if port not in taken and _bindable(port):
            return port
    raise ScaffoldError(
        f"no free port in {PORT_RANGE.start}..{PORT_RANGE.stop - 1} for env {name}'s emulator"
    )


def environment_file(name: str, port: int, *, lambda_form: bool = False) -> str:
    processing = _lambda_processing(name) if lambda_form else _class_processing(name)
    return f"""# Environment `{name}`: the processor processors/{name}.py on the local emulator.
# Written by `consumer new processor {name}`. `consumer local up --env {name}` starts the emulator
# and creates the table below; `consumer run --env {name}` runs a worker with the processor.
# The table, the port and the application name (which names the leases table) are this
# environment's own: it never shares an emulator with another environment of the project.
application_name: {name}-consumer
region: us-east-1
endpoint_url: http://127.0.0.1:{port}

table:
  name: orders-{name}
  partition_key: {{name: pk, type: S}}
  sort_key: {{name: sk, type: S}}
  stream_view_type: NEW_AND_OLD_IMAGES

worker:
  # Short timers, so shards change hands within seconds on one machine.
  failover_time_millis: 3000
  shard_sync_interval_millis: 5000
  idle_time_between_reads_millis: 200
  # A quiet shard backs off to this (default 10 s): short here, so a record written while the
  # worker idles arrives within a second.
  max_idle_time_between_reads_millis: 1000
  parent_shard_poll_interval_millis: 500
  max_clock_skew_millis: 100
  task_backoff_time_millis: 100
  initial_position: TRIM_HORIZON

metrics:
  destination: logs
  flush_interval_seconds: 5

logs:
  retention_days: 1

processing:
{processing}  # Imported from the directory `consumer run` is started in.
  import_paths: ["."]

emulator:
  port: {port}
  partitions: 2
  rollover_seconds: 60
"""


def scaffold_files(name: str, project: Path, *, lambda_form: bool = False) -> list[ScaffoldFile]:
    check_name(name)
    module, test = (lambda_module, lambda_test) if lambda_form else (processor_module, processor_test)
    files = [
        ScaffoldFile(project / "processors" / f"{name}.py", module(name), "the processor"),
        ScaffoldFile(project / "tests" / f"test_{name}.py", test(name), "its test"),
        ScaffoldFile(
            project / "config" / f"{name}.yaml",
            environment_file(name, choose_port(name, project / "config"), lambda_form=lambda_form),
            "an environment that uses it",
        ),
    ]
    package = project / "processors" / "__init__.py"
    if not package.exists():
        files.insert(0, ScaffoldFile(package, '"""Stream processors of this project."""\n', "the package"))
    return files


def write_scaffold(name: str, project: Path, *, lambda_form: bool = False) -> list[ScaffoldFile]:
    """Write the files, or none of them if any already exists."""
    files = scaffold_files(name, project, lambda_form=lambda_form)
    existing = [str(f.path) for f in files if f.path.exists()]
    if existing:
        raise ScaffoldError(f"not overwriting {', '.join(existing)}: choose another name or remove them")
    for file in files:
        file.path.parent.mkdir(parents=True, exist_ok=True)
        file.path.write_text(file.text, encoding="utf-8")
    return files
