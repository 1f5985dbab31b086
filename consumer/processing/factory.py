"""Turn a user's processor, or a built-in sink's handler, into per-shard RecordProcessors.

A user object ``package.module:Name`` (:func:`user_processor`) is:

* a class with the five RecordProcessor methods → class form, one instance per shard (``options``
  as keyword arguments); checkpoints are the class's business;
* a class with a ``handle(batch)`` method → function form, one instance per shard with ``options``;
* a plain function ``handle(batch)`` → function form (``options`` must be empty).

User code is imported from ``processing.import_paths`` (default: the working directory) before the
installed packages, so a processor in the project ``consumer run`` is started from just works.

The function form runs under the failure policy, over lanes or window by window: :func:`runner_chain`
builds that chain, the one place it is built. Which processor ``processing.processor`` names — a
built-in sink or a user object — and the clients and stores the chain needs are decided one layer
up, in :mod:`consumer.runtime.processors`, which knows the sinks and the settings; this module knows
neither. Every problem raises ProcessingConfigError, naming the key to fix.
"""

from __future__ import annotations

import importlib
import inspect
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.processing.api import BatchHandler, ProcessorFactory, RecordProcessor
from consumer.processing.dead_letter import DeadLetter
from consumer.processing.errors import ProcessingConfigError
from consumer.processing.failure_policy import FailurePolicyRunner
from consumer.processing.function_processor import FunctionProcessor
from consumer.processing.lanes import LaneRunner
from consumer.processing.retry import RetryPolicy
from consumer.processing.runner import BatchRunner
from consumer.processing.window_state import InMemoryWindowStateStore, WindowStateStore
from consumer.processing.windows import WindowedAdapter, WindowedHandler, WindowedRunner
from consumer.records import ShardInfo
from consumer.telemetry.metrics import Metrics
from ground.clock import Clock, SystemClock
from ground.settings import DEFAULT_BATCH_SIZE, DEFAULT_MAX_WINDOW_STATE_BYTES
from ground.threads import SYSTEM_THREADS, Threads

CLASS_METHODS = ("initialize", "process_records", "lease_lost", "shard_ended", "shutdown_requested")
HandlerFactory = Callable[[ShardInfo], BatchHandler]


def check_options(sink: str, options: dict[str, Any], allowed: tuple[str, ...]) -> None:
    """Refuse ``processing.options`` keys that ``sink`` does not take, naming the allowed ones."""
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ProcessingConfigError(
            f"processing.options for {sink}: unknown {', '.join(unknown)} (allowed: {', '.join(allowed)})"
        )


def _search_path(import_paths: Sequence[str]) -> list[str]:
    """``processing.import_paths`` as absolute directories, put ahead of the installed packages.

    The user's project is where ``consumer run`` is started (the working directory; on the fleet
    the systemd unit's WorkingDirectory), so ``myproc.counter:handle`` imports ``./myproc/counter.py``
    without anybody having to know about PYTHONPATH.
    """
    directories = [str(Path(entry).expanduser().resolve()) for entry in import_paths]
    for directory in reversed(directories):
        if directory not in sys.path:
            sys.path.insert(0, directory)
    return directories


def import_processor(path: str, import_paths: Sequence[str] = (".",)) -> Any:
    module_name, sep, attribute = path.partition(":")
    if not sep or not module_name or not attribute:
        raise ProcessingConfigError(
            f"processing.processor {path!r} is not 'package.module:Name' "
            "(a RecordProcessor class, a class with handle(batch), or a function)"
        )
    directories = _search_path(import_paths)
    importlib.invalidate_caches()  # a module written a moment ago (the scaffold) must be found
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (module_name + ".").startswith(exc.name + "."):
            expected = module_name.replace(".", "/") + ".py"
            raise ProcessingConfigError(
                f"processing.processor {path!r}: module {module_name} does not import: no {expected} "
                f"in {', '.join(directories)} (processing.import_paths) or the installed packages; "
                "run from your project's directory or add it to processing.import_paths"
            ) from exc
        raise ProcessingConfigError(
            f"processing.processor {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {path!r}: module {module_name} does not import: {exc!r}"
        ) from exc
    found = getattr(module, attribute, None)
    if found is None:
        raise ProcessingConfigError(
            f"processing.processor {path!r}: {module_name} ({getattr(module, '__file__', '?')}) "
            f"has no {attribute}"
        )
    return found


def _instantiate(path: str, cls: type[Any], options: dict[str, Any]) -> Any:
    try:
        return cls(**options)
    except Exception as exc:
        raise ProcessingConfigError(
            f"processing.processor {path!r} cannot be created with processing.options {options}: {exc!r}"
        ) from exc


@dataclass(frozen=True)
class _ClassForm:
    """Creates one user RecordProcessor per shard."""

    cls: type[Any]
    options: dict[str, Any]

    def __call__(self, shard: ShardInfo) -> RecordProcessor:
        processor: RecordProcessor = self.cls(**self.options)
        return processor


def _handler_of(instance: Any) -> BatchHandler:
    handle: BatchHandler = instance.handle
    return handle


@dataclass(frozen=True)
class UserProcessor:
    """What a user's ``package.module:Name`` turned out to be: exactly one of the two is set."""

    class_form: ProcessorFactory | None = None  # one RecordProcessor per shard, used as it is
    handlers: HandlerFactory | None = None  # one function-form handler per shard, to be wrapped


def user_processor(path: str, options: dict[str, Any], import_paths: Sequence[str]) -> UserProcessor:
    """Import ``path`` and decide its form; bad options fail now, not at the first lease."""
    found = import_processor(path, import_paths)
    if inspect.isclass(found):
        if all(callable(getattr(found, m, None)) for m in CLASS_METHODS):
            _instantiate(path, found, options)  # bad options fail now, not at the first lease
            return UserProcessor(class_form=_ClassForm(found, options))
        if callable(getattr(found, "handle", None)):
            _instantiate(path, found, options)
            return UserProcessor(handlers=lambda shard: _handler_of(found(**options)))
        missing = [m for m in CLASS_METHODS if not callable(getattr(found, m, None))]
        raise ProcessingConfigError(
            f"processing.processor {path!r}: class lacks {', '.join(missing)} (or a handle(batch) method)"
        )
    if callable(found):
        if options:
            raise ProcessingConfigError(
                f"processing.options {sorted(options)} cannot be passed to the function {path!r}: "
                "remove processing.options, or use a class with handle(batch) to receive options"
            )
        return UserProcessor(handlers=lambda shard: found)
    raise ProcessingConfigError(f"processing.processor {path!r} is not a class or a function")


@dataclass(frozen=True)
class WindowPlan:
    """Tumbling windows of ``seconds``, their state kept in ``states`` (``processing.tumbling_window_seconds``)."""

    seconds: int
    states: WindowStateStore
    max_state_bytes: int = DEFAULT_MAX_WINDOW_STATE_BYTES


def runner_chain(
    handler: Any,
    *,
    policy: RetryPolicy,
    clock: Clock,
    dead_letter: DeadLetter | None = None,
    metrics: Metrics | None = None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    lanes: int = 1,
    window: WindowPlan | None = None,
    threads: Threads = SYSTEM_THREADS,
) -> BatchRunner:
    """The runner one shard's handler is run by: the failure policy, over ``lanes`` lanes when more
    than one (factor 1 stays on the serial path: no pool, no thread hop), or window by window.

    ``handler`` is a :data:`~consumer.processing.api.BatchHandler`, or with ``window`` a
    :data:`~consumer.processing.windows.WindowedHandler`. This is the one place the chain is built:
    the settings' processor (:mod:`consumer.runtime.processors`) and code that wires a processor by
    hand (:func:`function_processor`, :func:`windowed_processor`) both come here.
    """
    if window is not None:
        if lanes > 1:
            raise ValueError(
                "a windowed chain runs one lane: a window's state is carried batch to batch in order"
            )
        adapter = WindowedAdapter(handler, window.seconds, window.max_state_bytes, metrics)
        serial = FailurePolicyRunner(
            adapter, policy, clock, dead_letter=dead_letter, metrics=metrics, batch_size=batch_size
        )
        return WindowedRunner(serial, adapter, window.states, clock)
    serial = FailurePolicyRunner(
        handler, policy, clock, dead_letter=dead_letter, metrics=metrics, batch_size=batch_size
    )
    return serial if lanes == 1 else LaneRunner(serial, lanes, clock, metrics=metrics, threads=threads)


def function_processor(
    handler: BatchHandler | WindowedHandler,
    *,
    clock: Clock | None = None,
    policy: RetryPolicy | None = None,
    metrics: Metrics | None = None,
    dead_letter: DeadLetter | None = None,
    parallelization_factor: int = 1,
    window: WindowPlan | None = None,
    threads: Threads = SYSTEM_THREADS,
    **kwargs: Any,
) -> FunctionProcessor:
    """A RecordProcessor for one handler, for code that wires processors by hand (tests, examples).

    ``kwargs``: ``record_filter``, ``batch_size``, ``max_window_millis``; ``parallelization_factor``
    is the number of lanes (1-10; 1 is the serial path); ``window``: a windowed handler's windows
    (:func:`windowed_processor` says it shorter).
    """
    clock = clock or SystemClock()
    runner = runner_chain(
        handler,
        policy=policy or RetryPolicy(),
        clock=clock,
        dead_letter=dead_letter,
        metrics=metrics,
        batch_size=kwargs.get("batch_size", DEFAULT_BATCH_SIZE),
        lanes=parallelization_factor,
        window=window,
        threads=threads,
    )
    return FunctionProcessor(runner, clock, **kwargs)


def windowed_processor(
    handler: WindowedHandler,
    *,
    seconds: int,
    states: WindowStateStore | None = None,
    max_state_bytes: int = DEFAULT_MAX_WINDOW_STATE_BYTES,
    **kwargs: Any,
) -> FunctionProcessor:
    """A RecordProcessor for one windowed handler (tumbling windows of ``seconds``), for code that
    wires processors by hand (tests, examples); ``states`` defaults to an in-memory store.

    ``kwargs``: those of :func:`function_processor` (but lanes: a window is one per shard).
    """
    stored = states if states is not None else InMemoryWindowStateStore()
    return function_processor(handler, window=WindowPlan(seconds, stored, max_state_bytes), **kwargs)
