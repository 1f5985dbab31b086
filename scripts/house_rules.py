"""The house rule, as data: the repository's packages, the floor each stands on, the rooms of the
packages built as rooms, consumer's public face, and the size a module stays under.

The rule, in words:

* **Floors.** A module imports only its own package and packages on lower floors: nothing sideways,
  so no two packages can import each other. Inside the packages built as rooms (``consumer``,
  ``tools``, ``ground``) the same holds between their rooms.
* **No loop**, between packages or between modules, type-only imports included: a module that
  needs a type of a module importing it asks for a protocol of its own instead.
* **consumer's face.** Outside consumer, a module imports only the modules named in :data:`FACE`
  (the processor API, the records, ``consumer.api``), so that consumer's rooms can change behind
  it; :data:`REACH_INSIDE` names the packages that drive consumer's parts themselves, and why.
* **Tests stay in tests.** Nothing outside ``tests/`` imports ``tests``: what a benchmark or a
  script shares with the tests lives in ``simulation/`` (or in the product).
* **Size.** No module (tests included) is longer than :data:`LONG_MODULE_LINES` lines; there is no
  list of exceptions.

scripts/house.py reads the imports and checks them against this data; the test
(tests/unit/foundation/test_house.py) and ``python scripts/house.py --write`` (the pictures in
docs/design.md) load both files by path, before anything is installed: standard library only.
"""

from __future__ import annotations

Floors = tuple[tuple[str, dict[str, str]], ...]


# The repository, floor by floor, bottom first: (floor name, {package: what it owns}). A package is a
# top-level directory with Python in it, or a top-level module (``app``).
PACKAGES: Floors = (
    (
        "ground",
        {
            "ground": "The settings of config/<env>.yaml, time and threads passed in, the checkpoint "
            "positions: what two packages or more read; it imports nothing of ours.",
        },
    ),
    (
        "fleet",
        {
            "consumer": "The lease worker: what runs on a worker instance and nothing else.",
        },
    ),
    (
        "beside",
        {
            "emulator": "Local AWS: moto plus a multi-shard DynamoDB Streams engine and its control API.",
            "pipeline": "PySpark: the change log becomes the table's current state; stats; verify.",
            "deploy": "What an instance boots with: bootstrap, watchdog, health, systemd units.",
            "examples": "Processors written as a user would, on the processor API.",
        },
    ),
    (
        "tools",
        {
            "tools": "The `consumer` command and what it drives: demo, EMR, planner, scaffold, docs.",
        },
    ),
    (
        "top",
        {
            "infra": "The CDK stacks per environment.",
        },
    ),
    (
        "models",
        {
            "simulation": "Seeded models of the outside world (leases table, stream, sinks, simulated time "
            "and threads; the deployed fleet: its group, instances, tables, alarms and bill) that run the "
            "product's own code, and the checkers of its promises.",
        },
    ),
    (
        "measure",
        {
            "bench": "`make bench`: ratios measured in one run, written to bench/RESULTS.md.",
            "scripts": "Repository chores: this rule, the revert check, the README's generated parts.",
        },
    ),
    (
        "entry",
        {
            "app": "The CDK app (app.py): one environment's stacks.",
        },
    ),
)

# Packages built as rooms on floors of their own: (floor name, {room: what it owns}), bottom first. A
# room is a sub-package or a top-level module of the package.
ROOMS: dict[str, Floors] = {
    "ground": (
        (
            "words",
            {
                "clock": "Time, passed in: the Clock protocol, the system clock and the fake one tests "
                "drive.",
                "files": "Writing a local file so that no reader sees half of it.",
                "positions": "The checkpoint sentinels (TRIM_HORIZON, LATEST, SHARD_END) every layer speaks, "
                "the settings included.",
                "threads": "Threads passed in like time: the pools, events and locks a worker runs on "
                "(a simulation runs its own).",
            },
        ),
        (
            "settings",
            {
                "settings": "The settings of config/<env>.yaml as pydantic models, one module per part.",
            },
        ),
    ),
    "consumer": (
        (
            "values",
            {
                "records": "StreamRecord and ShardInfo: a change as the stream delivered it, parsed on "
                "access.",
                "lease_keys": "A shard's lease key when one leases table serves several streams: its "
                "form, and the stream and shard it names.",
            },
        ),
        (
            "adapters",
            {
                "streams": "DynamoDB Streams: the source port, its adapter with the fast parser, the one "
                "read-error tree, the shard graph, shard-sync planning, the stream target check.",
                "telemetry": "Metrics (EMF) and their transports, logs, health: what a worker publishes.",
            },
        ),
        (
            "leases",
            {
                "leases": "The leases table: model, pure decisions, the store port with its DynamoDB "
                "and in-memory adapters, the lease machine (renew, take, steal, release, checkpoint; "
                "no I/O), its driver and the coordinator.",
            },
        ),
        (
            "processing",
            {
                "processing": "The processor API (class and function forms, one Checkpointer protocol), "
                "the failure policy, dead letters, filters, batching and the redelivery rule.",
            },
        ),
        (
            "sinks",
            {
                "sinks": "The built-in processors (changelog, dynamodb_replica), written on the "
                "processor API.",
            },
        ),
        (
            "lifecycle",
            {
                "lifecycle": "One shard's state machine, the scheduler that steps them, shard sync's "
                "loop; written against small ports (LeaseOps, StreamReader) and the processor API.",
            },
        ),
        (
            "runtime",
            {
                "runtime": "The composition root: settings and ports in, a running worker out; the "
                "AWS clients, the processor registry with the built-in sinks. Nothing below imports it.",
            },
        ),
        (
            "face",
            {
                "api": "What code outside consumer imports besides the processor API: a worker "
                "assembled and run, the leases tables read, the AWS clients, the metric catalogue, the "
                "built-in sinks; one small module per audience, none imported eagerly.",
            },
        ),
    ),
    "tools": (
        (
            "views",
            {
                "dashboard": "The dashboard's one widget list (CloudWatch's too), drawn from EMF documents "
                "read back: the PNG, its page and the live page `consumer dashboard --serve` serves.",
            },
        ),
        (
            "drivers",
            {
                "demo": "`consumer demo`: a local fleet on the emulator, chaos, the verdict.",
                "emr": "Packaging and submitting the pipeline to EMR Serverless.",
                "local_aws": "Finding and checking a local endpoint (the emulator).",
                "planning": "`consumer plan`'s figures from the settings.",
                "scaffold": "`consumer new`: a processor project's first files.",
                "settings_doc": "docs/settings.md, generated from the settings models.",
            },
        ),
        (
            "commands",
            {
                "commands": "One module per sub-command: argument parsing, exit codes, messages.",
            },
        ),
        (
            "entry",
            {
                "cli": "`consumer`: assembles the sub-commands.",
            },
        ),
    ),
}


FACE_OF = "consumer"
"""The package with a public face: outside it, only :data:`FACE` is imported."""

# Outside consumer, these modules only (dotted name: what outside code finds there). A name not
# re-exported here is consumer's own business.
FACE: dict[str, str] = {
    "consumer": "The package itself: `__version__`.",
    "consumer.processing": "The processor API a user's processor is written on: the inputs, the "
    "class and function forms, the errors, the in-memory checkpointer and Lambda's event for its tests.",
    "consumer.records": "StreamRecord, KinesisStreamRecord and ShardInfo: what a processor receives.",
    "consumer.api.worker": "A worker assembled from its ports and run: WorkerProcess, assemble, the "
    "ports' pieces and the parts it returns (`consumer run`, the benchmarks' workers).",
    "consumer.api.leases": "The leases and workers tables read from outside: the model, the DynamoDB "
    "store, liveness, the errors.",
    "consumer.api.aws": "The AWS clients of an environment, configured as the worker's are.",
    "consumer.api.metrics": "The metric catalogue (names, units, aggregation) and the recorder.",
    "consumer.api.sinks": "The built-in processors, for a processor that wraps one.",
}

# Packages that import consumer's rooms directly, and why (tests/ does too: tests import anything).
REACH_INSIDE: dict[str, str] = {
    "simulation": "It runs the worker's own parts (the lease store, the coordinator's loops, the "
    "scheduler) against faulty models of AWS, as the tests do: its point is to reach inside.",
}

TESTS = "tests"
"""The test tree: it may import anything, and nothing outside it imports it."""

SIZED_ONLY = (TESTS,)
"""Directories whose modules the size rule reads besides the packages."""

LONG_MODULE_LINES = 400
"""A module past this many lines no longer reads in one sitting: split it where the split names an
idea."""
