"""The code each benchmark measures: what makes its rows in bench/RESULTS.md true or stale.

A row holds for the commit it was measured on (bench/provenance.py records it). It stays true only
while the code it measures is unchanged since that commit, so every benchmark declares here the
product code on the path it measures (:data:`PRODUCT`: files or folders, from the repository root,
dependencies' pins included); its own module and the ``bench/`` modules it imports are added by
:func:`measured_paths` from their import statements, so a helper cannot be forgotten.
tests/unit/bench/test_results_current.py fails, naming the benchmark to re-run, when any of these
paths changed after the row's commit, committed or not (``git diff --name-only <commit> HEAD --
<paths>`` and ``git status`` of them).

A declaration errs on the side of too much: a comment in a measured file also asks for a re-run,
since the check cannot tell a comment from a change of behaviour.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_NAMED = re.compile(r"bench\.(\w+)(?::\w+)?")

_PINS = "requirements.txt"  # orjson, botocore, PySpark...: a figure is true for the versions it ran
_SETTINGS = "ground/"  # settings defaults, clocks, positions: every bench runs on them
_FACE = "consumer/api/"  # every bench reaches the worker through consumer's public face
# The lease coordinator and its stores as the lease benches drive them: the coordinator paces its
# rounds on the stream's fleet position and records its metrics.
_LEASES = ("consumer/leases/", "consumer/streams/pacing.py", "consumer/telemetry/", _FACE)
# The worker as ``consumer run`` assembles it on the canned transport (bench/canned_worker.py):
# records, streams, lifecycle, processing, runtime, the lease coordinator behind the checkpoint
# and the metrics recorder.
_RECORD_PATH = (
    "consumer/__init__.py",
    "consumer/records/",
    "consumer/lease_keys.py",
    "consumer/streams/",
    "consumer/lifecycle/",
    "consumer/processing/",
    "consumer/runtime/",
    "consumer/leases/",
    "consumer/telemetry/",
    _FACE,
    _SETTINGS,
    _PINS,
)
# Whole ``consumer run`` processes on the emulator, started by the demo's fleet: of tools/demo/, the
# benches run LocalFleet (fleet.py) and create_source_table (stage.py, imported through run.py and
# called without a prefill); they write with bench/fleet_load.py, not the demo's load generator.
_FLEET = (
    "consumer/",
    "emulator/",
    "tools/demo/fleet.py",
    "tools/demo/stage.py",
    "tools/cli.py",
    "tools/commands/",
    "tools/local_aws.py",
    _SETTINGS,
    _PINS,
)
# The instances' watchdog, health judge and boot plan (deploy/), run beside the fleet.
_INSTANCES = (*_FLEET, "deploy/")
_PIPELINE = ("pipeline/", _SETTINGS, _PINS)
# The lake benches land the change log as the worker's sink writes it.
_LAKE = (*_PIPELINE, "consumer/sinks/changelog.py")
# The deployed fleet's model (simulation/fleet_ops/) reads the synthesized templates (infra/, app.py,
# cdk.json, config/, tools/emr/, the CDK command-line tool's pin) and runs the instances' own code
# (deploy/), the worker's serializers and, in its data-path slices, the real worker in the
# simulation kernel (simulation/).
_OPERATIONS = (
    "simulation/",
    "consumer/",
    "deploy/",
    "infra/",
    "app.py",
    "cdk.json",
    "config/",
    "tools/emr/",
    "package-lock.json",
    _SETTINGS,
    _PINS,
)

PRODUCT: dict[str, tuple[str, ...]] = {
    "lease_cost": (*_LEASES, _SETTINGS, _PINS),
    "discovery_scale": (
        "consumer/lifecycle/shard_sync.py",
        "consumer/lifecycle/ports.py",
        "consumer/streams/",
        "consumer/records/",  # the stream port's records, imported by consumer/streams/
        *_LEASES,
        _SETTINGS,
        _PINS,
    ),
    "brownout": _INSTANCES,
    "rolling_deploy": _INSTANCES,
    "taker_scale": (*_LEASES, "consumer/runtime/clients.py", _SETTINGS, _PINS),
    "whole_worker": ("consumer/", "simulation/", _SETTINGS, _PINS),
    "operations": _OPERATIONS,
    "spark_snapshot": _PIPELINE,
    "pipeline_table": _PIPELINE,
    "lake_freshness": _LAKE,
    "lake_maintenance": _LAKE,
    "record_cpu": _RECORD_PATH,
    "throughput": _RECORD_PATH,
    "memory": _RECORD_PATH,
    "failover": _FLEET,
    "child_pickup": _FLEET,
    "stall_move": _FLEET,
    "rebalance": _FLEET,
    "latency": _FLEET,
    "worker_cpu": _RECORD_PATH,
    "parallel": _FLEET,
    "poison_key": _FLEET,
    # A real `consumer run` on the emulator's Kinesis (its read limits), started by the demo's fleet.
    "kinesis_throughput": _FLEET,
}


def bench_modules(name: str) -> list[str]:
    """``bench/<name>.py`` and every ``bench/`` module it uses, directly or through another: imported
    (at module level or in a function) or named in a string (run in a fresh process, or a
    processor's ``module:function``), as paths from the repository root."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        module = todo.pop()
        path = ROOT / "bench" / f"{module}.py"
        if module in seen or not path.exists():
            continue
        seen.add(module)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
                if node.module == "bench":  # from bench import canned, canned_worker
                    todo += [alias.name for alias in node.names]
                elif node.module.startswith("bench."):
                    todo.append(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                todo += [a.name.split(".")[1] for a in node.names if a.name.startswith("bench.")]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # a module run in a fresh process ("bench.fresh_orjson") or named as a processor
                # ("bench.canned_worker:noop")
                named = _NAMED.fullmatch(node.value)
                if named:
                    todo.append(named.group(1))
    return sorted(f"bench/{module}.py" for module in seen)


def measured_paths(name: str) -> list[str]:
    """Everything a row of benchmark ``name`` is true for: its bench modules and its product code.
    Raises KeyError for a benchmark with no declaration (a new benchmark must declare its code)."""
    return bench_modules(name) + sorted(PRODUCT[name])
