"""The Lambda form of a processor: an AWS Lambda handler for DynamoDB Streams, run unchanged.

``processing.processor: lambda:app.lambda_handler`` (Lambda's own ``Handler`` spelling, or this
product's ``lambda:package.module:function``) names a function ``handler(event, context)``. It is an
adapter on top of the function form: :class:`LambdaBatchHandler` is a ``handle(batch)`` that the
failure policy, lanes and windows wrap like any other, so retries, bisection, dead letters, filters
and batching are the product's, configured as docs/migrating-from-lambda.md maps them.

One call of the adapter is one invocation, as Lambda makes it: a fresh event
(:mod:`consumer.processing.lambda_event`) and context, the handler's return marshalled to JSON as the
Python runtime does (a ``Decimal`` as its number, anything else that JSON cannot hold a
``Runtime.MarshalError``), then read as the event source mapping reads it. What Lambda documents for
ReportBatchItemFailures, mirrored:

* a complete success: no response, a response that is not a JSON object, an object without
  ``batchItemFailures``, or a null or empty ``batchItemFailures`` list;
* a partial failure: ``{"batchItemFailures": [{"itemIdentifier": "<SequenceNumber>"}, ...]}`` —
  the lowest sequence number named is where processing resumes (everything before it is
  checkpointed), which is what :class:`~consumer.processing.api.BatchResult` means;
* a complete failure: an exception, an empty string or null ``itemIdentifier``, or an item without
  that key. Lambda does not document a well-formed identifier that names no record of the batch;
  here it fails the whole batch too (retrying it is safe, skipping it would not be).

A handler that runs past ``timeout_seconds`` failed, as Lambda counts a timed-out invocation
(``Task timed out``), whatever it returned. With a tumbling window the response must hold
``state`` (Lambda fails an invocation whose response does not), and a response that names failed
records fails the whole batch: the state it returns covers every record it was given, so keeping
that state while the records after the failure come again would count them twice.

Lambda runs concurrent invocations in separate execution environments, so module-level state —
Powertools' ``BatchProcessor``, which keeps the batch it processes on itself — is never shared by
two at once. Here shards (and lanes) are threads of one process: invocations take turns on one lock
per process unless the options say ``thread_safe: true``.
"""

from __future__ import annotations

import decimal
import inspect
import json
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from consumer.processing.api import Batch, BatchResult
from consumer.processing.errors import ProcessingConfigError, ProcessingError
from consumer.processing.lambda_event import LambdaContext, function_arn, streams_event, window_event
from consumer.processing.windows import WindowedBatch
from consumer.records import ShardInfo, StreamRecord
from ground.clock import Clock

PREFIX = "lambda:"
LambdaHandler = Callable[[dict[str, Any], LambdaContext], Any]
MAX_TIMEOUT_SECONDS = 900  # Lambda's longest function timeout: the default (longer is allowed here)


class LambdaInvocationError(ProcessingError):
    """An invocation Lambda would count as failed though the handler did not raise (the failure
    policy retries, bisects and dead-letters it like an exception)."""


class LambdaResponseError(LambdaInvocationError):
    """The response cannot be marshalled, or its ``batchItemFailures`` or ``state`` are not as
    Lambda requires."""


class LambdaTimeoutError(LambdaInvocationError):
    """The handler ran past the function's timeout (``processing.options.timeout_seconds``)."""


def is_lambda_form(processor: str) -> bool:
    return processor.startswith(PREFIX)


def handler_path(processor: str) -> str:
    """``package.module:function`` for ``lambda:`` + either this product's spelling or Lambda's
    ``module.function`` (split at the last dot, as Lambda reads its ``Handler`` setting)."""
    path = processor[len(PREFIX) :].strip()
    if ":" in path or "." not in path:
        return path
    module, _, function = path.rpartition(".")
    return f"{module}:{function}"


@dataclass(frozen=True)
class LambdaFunction:
    """The function settings a Lambda handler sees through its context (``processing.options``)."""

    function_name: str
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 128
    timeout_seconds: float = MAX_TIMEOUT_SECONDS
    report_batch_item_failures: bool = True
    thread_safe: bool = False

    @classmethod
    def from_options(cls, options: Mapping[str, Any], default_name: str) -> LambdaFunction:
        """The options of the Lambda form, checked: each problem names its key."""
        allowed = tuple(cls.__dataclass_fields__)
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ProcessingConfigError(
                f"processing.options for a Lambda handler: unknown {', '.join(unknown)} "
                f"(allowed: {', '.join(allowed)})"
            )
        name = options.get("function_name", default_name)
        version = options.get("function_version", "$LATEST")
        memory = options.get("memory_limit_in_mb", 128)
        timeout = options.get("timeout_seconds", MAX_TIMEOUT_SECONDS)
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", name):
            raise ProcessingConfigError(
                f"processing.options.function_name {name!r}: 1-64 letters, digits, - and _ (as Lambda's)"
            )
        if not isinstance(version, str) or not version:
            raise ProcessingConfigError(
                f"processing.options.function_version {version!r}: a version or $LATEST"
            )
        if isinstance(memory, bool) or not isinstance(memory, int) or not 128 <= memory <= 10240:
            raise ProcessingConfigError(
                f"processing.options.memory_limit_in_mb {memory!r}: 128-10240, as Lambda's MemorySize"
            )
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ProcessingConfigError(
                f"processing.options.timeout_seconds {timeout!r}: seconds above 0 (your function's Timeout)"
            )
        flags = {}
        for key in ("report_batch_item_failures", "thread_safe"):
            value = options.get(key, getattr(cls, key))
            if not isinstance(value, bool):
                raise ProcessingConfigError(f"processing.options.{key} {value!r}: true or false")
            flags[key] = value
        return cls(name, version, memory, float(timeout), **flags)


@dataclass(frozen=True)
class LambdaEnvironment:
    """Where the handler runs: the stream it reads (``eventSourceARN``; asked at each invocation,
    because the worker resolves its stream after the processor is checked) and where its logs go."""

    stream_arn: Callable[[], str]
    log_group_name: str
    log_stream_name: str


def check_handler(path: str, found: Any) -> LambdaHandler:
    """The imported object, if Lambda could call it as ``handler(event, context)``."""
    if inspect.isclass(found) or not callable(found):
        raise ProcessingConfigError(
            f"processing.processor 'lambda:{path}' is not a function handler(event, context)"
        )
    try:
        inspect.signature(found).bind({}, None)
    except TypeError as exc:
        raise ProcessingConfigError(
            f"processing.processor 'lambda:{path}': Lambda calls handler(event, context), and this "
            f"one cannot be called so: {exc}"
        ) from exc
    except ValueError:
        pass  # no signature to read (a builtin): the first invocation tells
    handler: LambdaHandler = found
    return handler


def _number(value: decimal.Decimal) -> int | float:
    """A Decimal as the runtime's JSON writes it (its number text) and JSON reads it back."""
    text = str(value)
    return int(text) if re.fullmatch(r"-?\d+", text) else float(text)


def marshal(response: Any) -> Any:
    """The response as the event source mapping receives it: the runtime's JSON, parsed."""
    if isinstance(response, bytes | bytearray):
        try:
            return json.loads(response)
        except ValueError:
            return None  # a payload that is not JSON reports no failures

    def default(value: Any) -> Any:
        if isinstance(value, decimal.Decimal):
            return _number(value)
        raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")

    try:
        return json.loads(json.dumps(response, default=default))
    except (TypeError, ValueError) as exc:
        raise LambdaResponseError(f"Runtime.MarshalError: Unable to marshal response: {exc}") from exc


def failed_identifiers(response: Any, records: Sequence[StreamRecord]) -> tuple[str, ...]:
    """The sequence numbers a marshalled response reports failed (none: complete success); raises
    :class:`LambdaResponseError` for a response Lambda counts as a complete failure."""
    if not isinstance(response, dict):
        return ()
    failures = response.get("batchItemFailures")
    if failures is None:
        return ()
    if not isinstance(failures, list):
        raise LambdaResponseError(
            f"batchItemFailures is a {type(failures).__name__}, not a list of {{'itemIdentifier': ...}}"
        )
    identifiers: list[str] = []
    for item in failures:
        identifier = item.get("itemIdentifier") if isinstance(item, dict) else None
        if not isinstance(identifier, str) or not identifier:
            raise LambdaResponseError(
                f"batchItemFailures item {item!r}: Lambda counts a missing, null or empty itemIdentifier "
                "as a failure of the whole batch"
            )
        identifiers.append(identifier)
    if identifiers:
        known = {record.sequence_number for record in records}
        strangers = [i for i in identifiers if i not in known]
        if strangers:
            span = f"{records[0].sequence_number}..{records[-1].sequence_number}" if records else "no records"
            raise LambdaResponseError(
                f"batchItemFailures names {', '.join(strangers[:5])}, no SequenceNumber of this batch ({span})"
            )
    return tuple(identifiers)


class Invoker:
    """Calls the handler as Lambda invokes the function: one invocation at a time unless the
    function is thread-safe, a new context each time, the response marshalled, the timeout kept."""

    def __init__(
        self,
        handler: LambdaHandler,
        function: LambdaFunction,
        environment: LambdaEnvironment,
        clock: Clock,
    ) -> None:
        self.handler = handler
        self.function = function
        self._environment = environment
        self._clock = clock
        self._turns = None if function.thread_safe else threading.Lock()

    def stream_arn(self) -> str:
        return self._environment.stream_arn()

    def invoke(self, event: dict[str, Any], stream_arn: str) -> Any:
        """The marshalled response; raises what the handler raised, or a LambdaInvocationError."""
        if self._turns is None:
            return self._invoke(event, stream_arn)
        with self._turns:
            return self._invoke(event, stream_arn)

    def _invoke(self, event: dict[str, Any], stream_arn: str) -> Any:
        function = self.function
        timeout_millis = int(function.timeout_seconds * 1000)
        context = LambdaContext(
            function_name=function.function_name,
            function_version=function.function_version,
            invoked_function_arn=function_arn(stream_arn, function.function_name, function.function_version),
            memory_limit_in_mb=function.memory_limit_in_mb,
            log_group_name=self._environment.log_group_name,
            log_stream_name=self._environment.log_stream_name,
            timeout_millis=timeout_millis,
            clock=self._clock,
        )
        try:
            response = self.handler(event, context)
        except SystemExit as exc:  # the runtime reports a process exit as a failed invocation
            raise LambdaInvocationError(f"Runtime.ExitError: the handler exited ({exc.code!r})") from exc
        if self._clock.monotonic_millis() > context.deadline_millis:
            raise LambdaTimeoutError(
                f"Task timed out after {function.timeout_seconds:.2f} seconds "
                "(processing.options.timeout_seconds): the invocation counts as failed"
            )
        return marshal(response)


class LambdaBatchHandler:
    """The function form's ``handle(batch)`` for a Lambda handler (one per shard)."""

    def __init__(self, invoker: Invoker) -> None:
        self.invoker = invoker

    def __call__(self, batch: Batch) -> BatchResult | None:
        arn = self.invoker.stream_arn()
        event = streams_event(batch.records, arn, self.invoker.function.function_name)
        if batch.gap is not None:  # worker.on_trimmed=reload's marker: {"Records": [], "gap": {...}}
            event["gap"] = batch.gap.as_json()
        response = self.invoker.invoke(event, arn)
        if not self.invoker.function.report_batch_item_failures:
            return None  # as Lambda without ReportBatchItemFailures: only an error fails the batch
        failed = failed_identifiers(response, batch.records)
        if not failed:
            return None
        return BatchResult(failed, error=f"the handler reported batchItemFailures {list(failed[:5])}")


class LambdaWindowedHandler:
    """The windowed handler (``processing.tumbling_window_seconds``) for a Lambda handler."""

    def __init__(self, invoker: Invoker) -> None:
        self.invoker = invoker

    def __call__(self, batch: WindowedBatch) -> dict[str, Any]:
        arn = self.invoker.stream_arn()
        window = batch.window
        event = window_event(
            batch.records,
            arn,
            shard_id=batch.shard_id,
            start=window.start,
            end=window.end,
            state=batch.state,
            final=window.is_final,
            function_name=self.invoker.function.function_name,
        )
        response = self.invoker.invoke(event, arn)
        if not isinstance(response, dict) or "state" not in response:
            raise LambdaResponseError(
                "with a tumbling window the response must hold the new state, {'state': {...}} "
                "(Lambda fails an invocation whose response has none)"
            )
        if self.invoker.function.report_batch_item_failures and failed_identifiers(response, batch.records):
            raise LambdaResponseError(
                "with a tumbling window a response naming batchItemFailures fails the whole batch: "
                "its state covers every record it was given (processing.retry.bisect_on_error "
                "isolates the failing record)"
            )
        state = response["state"]
        if not isinstance(state, dict):
            raise LambdaResponseError(
                f"the response's state is {type(state).__name__}, not a JSON object: {{'state': {{...}}}}"
            )
        return state


def lambda_handlers(invoker: Invoker, *, windowed: bool) -> Callable[[ShardInfo], Any]:
    """The handler factory the function form's chain wraps: one adapter per shard lease (a
    ``handle(batch)``, or with windows a ``handle(batch: WindowedBatch) -> state``)."""
    if windowed:
        return lambda shard: LambdaWindowedHandler(invoker)
    return lambda shard: LambdaBatchHandler(invoker)
