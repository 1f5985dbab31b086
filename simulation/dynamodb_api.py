"""One worker's DynamoDB client for the leases tables: botocore's low-level API, under the fault model.

The product's own :class:`~consumer.leases.dynamodb.DynamoDBLeaseStore` talks to this as it talks to
``boto3.client("dynamodb")``: ``get_item``, ``put_item``, ``update_item``, ``delete_item``,
``scan`` and ``transact_write_items`` with keyword arguments, answered with botocore's response
dicts, or raising what botocore raises -- the modelled ``ClientError`` subclasses
(ConditionalCheckFailedException carrying ``Item``, TransactionCanceledException carrying
``CancellationReasons``, ProvisionedThroughputExceededException, InternalServerError,
ValidationException), ``ReadTimeoutError`` / ``ConnectTimeoutError`` / ``EndpointConnectionError``,
and ``ParamValidationError`` for a request botocore itself would refuse (checked against botocore's
service model). The error classes are botocore's own, made from that model.

The client is configured as consumer.runtime.clients configures the leases client
(:func:`~consumer.runtime.clients.lease_client_timeouts`): each attempt waits for its answer at most
the read timeout; botocore's standard retry mode makes up to ``max_attempts + 1`` attempts of a
throttled, 500-answered, timed-out or unconnected request, backing off ``rand * min(scale * 2**i,
20 s)`` (scale 1 s after a throttle, 25 ms otherwise) and spending its retry quota (500, 5 per
throttle retry, 14 per other retry, given back on success), and raises the last attempt's error.
Backoffs and timeouts are simulated time.

Each attempt under :class:`~simulation.faults.Faults`: the request may not connect; it reaches the
server after a seeded latency with a long tail (queued on the server); the server may throttle it,
fail it with a 500, or -- a write -- act on it and still answer 500 or never answer (the caller
sees the timeout); the answer takes time to come back; a Scan or eventually consistent GetItem
may read the table as it was up to ``stale_scan_millis`` ago. While the process is paused its
requests already sent still reach the server; it reads an answer that arrived meanwhile when it
runs again, and times out only when it runs again with no answer. The server acts on an attempt
before its client gave it up, or never: DynamoDB documents no bound on acting later, and the model
draws none. Directed faults of the call (simulation/directed.py) reach the requests through
:attr:`FaultyDynamoDB.directed`, set by the port (simulation/faults.py) for the duration of one call.
"""

from __future__ import annotations

import functools
import random
import uuid
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ParamValidationError,
    ReadTimeoutError,
)

from simulation.ddb_items import ServerError
from simulation.ddb_tables import Tables
from simulation.directed import Directed
from simulation.kernel import Kernel, pause_millis

ENDPOINT = "https://dynamodb.us-east-1.amazonaws.com"
# What DynamoDB answers a throttled request with: a table or partition over its capacity (provisioned
# or on-demand), or the account's throughput limit.
THROTTLING_CODES = ("ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded")
THROTTLES = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)
WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems"})
QUOTA, THROTTLE_COST, RETRY_COST, NO_RETRY_REFUND = 500, 5, 14, 1


@functools.cache
def _botocore() -> tuple[Any, Any, Any]:
    """botocore's DynamoDB service model, its error classes and its parameter validator (loaded once)."""
    import botocore.session
    from botocore.errorfactory import ClientExceptionsFactory
    from botocore.validate import ParamValidator

    model = botocore.session.get_session().get_service_model("dynamodb")
    return model, ClientExceptionsFactory().create_client_exceptions(model), ParamValidator()


class FaultyDynamoDB:
    """What ``boto3.client("dynamodb", config=<the leases client's Config>)`` is to the store."""

    def __init__(
        self,
        tables: Tables,
        kernel: Kernel,
        faults: Any,  # simulation.faults.Faults
        rng: random.Random,
        *,
        config: dict[str, Any],  # consumer.runtime.clients.lease_client_timeouts(...)
        failover_millis: int,
    ) -> None:
        self.tables, self.kernel, self.faults, self.rng = tables, kernel, faults, rng
        self.connect_millis = int(config["connect_timeout"] * 1000)
        self.read_millis = int(config["read_timeout"] * 1000)
        self.attempts = int(config["retries"]["max_attempts"]) + 1  # botocore: retries, plus the first
        self.failover_millis = failover_millis
        self.quota = QUOTA
        self._last_cost = 0
        self.directed: Directed | None = None  # the port's directed fault, for the call in progress
        self._spent = False  # its commit delay and stop already hit a request of the call
        self.injected: dict[str, int] = {
            "throttled": 0,
            "failed": 0,
            "unconnected": 0,
            "timed_out": 0,
            "answered_500_after_commit": 0,
            "timed_out_after_commit": 0,
            "stopped": 0,
        }
        self.model, self.exceptions, self._validator = _botocore()

    # --------------------------------------------------------------------------- the API

    def get_item(self, **request: Any) -> dict[str, Any]:
        return self._call("GetItem", request)

    def put_item(self, **request: Any) -> dict[str, Any]:
        return self._call("PutItem", request)

    def update_item(self, **request: Any) -> dict[str, Any]:
        return self._call("UpdateItem", request)

    def delete_item(self, **request: Any) -> dict[str, Any]:
        return self._call("DeleteItem", request)

    def scan(self, **request: Any) -> dict[str, Any]:
        return self._call("Scan", request)

    def transact_write_items(self, **request: Any) -> dict[str, Any]:
        return self._call("TransactWriteItems", request)

    # ---------------------------------------------------------------------- botocore's part

    def _call(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        shape = self.model.operation_model(operation).input_shape
        report = self._validator.validate(request, shape)
        if report.has_errors():
            raise ParamValidationError(report=report.generate_report())
        if operation == "TransactWriteItems" and "ClientRequestToken" not in request:
            # botocore fills the idempotency token once per call; every retry sends the same.
            request = {**request, "ClientRequestToken": str(uuid.UUID(int=self.rng.getrandbits(128)))}
        self._maybe_stop()
        attempt = 1
        while True:
            try:
                response = self._attempt(operation, request)
            except (ClientError, BotoCoreError) as exc:
                delay = self._retry_delay(exc, attempt)
                if delay is None:
                    if isinstance(exc, ClientError):
                        exc.response["ResponseMetadata"]["RetryAttempts"] = attempt - 1
                        if attempt >= self.attempts:
                            exc.response["ResponseMetadata"]["MaxAttemptsReached"] = True
                    raise
                self.kernel.sleep(delay)
                attempt += 1
                continue
            self.quota = min(QUOTA, self.quota + (self._last_cost if attempt > 1 else NO_RETRY_REFUND))
            response["ResponseMetadata"] = {"HTTPStatusCode": 200, "RetryAttempts": attempt - 1}
            return response

    def _retry_delay(self, exc: Exception, attempt: int) -> float | None:
        """botocore's standard mode: whether to retry (and after how long), spending retry quota."""
        code = exc.response["Error"]["Code"] if isinstance(exc, ClientError) else None
        status = exc.response["ResponseMetadata"]["HTTPStatusCode"] if isinstance(exc, ClientError) else None
        throttled = code in THROTTLES
        transient = status in (500, 502, 503, 504) or isinstance(exc, BotoCoreError)
        if attempt >= self.attempts or not (throttled or transient):
            return None
        cost = THROTTLE_COST if throttled else RETRY_COST
        if cost > self.quota:
            return None
        self.quota -= cost
        self._last_cost = cost
        scale = 1000.0 if throttled else 25.0
        delay: float = self.rng.random() * min(scale * 2 ** (attempt - 1), 20_000.0)
        return delay

    def _error(self, operation: str, error: ServerError) -> ClientError:
        """The ClientError botocore raises for this answer: its modelled class, fields at the top."""
        cls = self.exceptions.from_code(error.code)
        response: dict[str, Any] = {
            "Error": {"Message": error.message, "Code": error.code},
            "ResponseMetadata": {"HTTPStatusCode": error.status, "RetryAttempts": 0},
            **error.fields,
        }
        if cls is not ClientError:
            members = self.model.shape_for(error.code).members
            for name in ("message", "Message"):
                if name in members:
                    response[name] = error.message
        exc: ClientError = cls(response, operation)
        return exc

    # ----------------------------------------------------------------------- the wire's part

    def _maybe_stop(self) -> None:
        """A stop-the-world pause of this whole process, just before a request goes out."""
        f = self.faults
        if f.active and f.pause_rate and self.rng.random() < f.pause_rate:
            self.injected["stopped"] += 1
            group = self.kernel.current.group
            stop = pause_millis(self.rng, self.failover_millis)
            group.paused_until = max(group.paused_until, self.kernel.now + stop)
            self.kernel.sleep(0)  # held (with every other thread of the process) until it resumes

    def _latency(self) -> tuple[int, int]:
        """(to the server, back from it): mostly short, a share many times slower."""
        f = self.faults
        if not f.active:
            return 0, 0
        base = int(self.rng.expovariate(1 / f.latency_millis)) if f.latency_millis else 0
        before = self.rng.randint(0, base) if base else 0
        after = base - before
        if f.tail_millis and self.rng.random() < f.tail_probability:
            tail = self.rng.randint(f.tail_millis // 4, f.tail_millis)
            if self.rng.random() < 0.75:
                before += tail  # queued on the server: it acts late, if its client still waits
            else:
                after += tail  # the answer is slow to come back
        return before, after

    def begin(self, fault: Directed | None) -> None:
        """The port's call begins, hit by ``fault`` (None: none): its requests carry it."""
        self.directed, self._spent = fault, False

    def _attempt(self, operation: str, request: dict[str, Any]) -> dict[str, Any]:
        f, kernel, group = self.faults, self.kernel, self.kernel.current.group
        storm = f.storm(kernel.now) if f.active else None
        if storm == "unreachable" or (f.active and self.rng.random() < f.error_rate / 4):
            self.injected["unconnected"] += 1
            if self.rng.random() < 0.5:
                kernel.sleep(self.connect_millis)
                raise ConnectTimeoutError(endpoint_url=ENDPOINT, error="timed out")
            kernel.sleep(self.rng.randint(0, 5))
            raise EndpointConnectionError(endpoint_url=ENDPOINT)
        before, after = self._latency()
        age = self.rng.randint(0, f.stale_scan_millis) if f.active and f.stale_scan_millis else 0
        fault = self.directed
        if fault is not None:
            if fault.view_age_millis and self._aims_at(fault, request):
                age = min(fault.view_age_millis, self.failover_millis)  # the model's bound
            if not self._spent:  # the call's first request, once
                self._spent = True
                before += fault.commit_delay_millis
                if fault.pause_after_send_millis:
                    group.paused_until = max(group.paused_until, kernel.now + fault.pause_after_send_millis)
        deadline, acts_at = kernel.now + self.read_millis, kernel.now + before
        # The request travels and queues while the process may be paused; its client gives it up at
        # the deadline -- or, stopped then, when it runs again -- and then the server never acts on it.
        while kernel.now < acts_at:
            kernel.sleep(min(acts_at, max(deadline, group.paused_until)) - kernel.now, through_pause=True)
            if deadline <= kernel.now < acts_at and group.paused_until <= kernel.now:
                self.injected["timed_out"] += 1
                raise ReadTimeoutError(endpoint_url=ENDPOINT, error="timed out")
        outcome: dict[str, Any] | ClientError
        try:
            outcome = self._serve(operation, request, age, storm)
            if operation in WRITES and f.active and self.rng.random() < f.ambiguous_rate:
                if self.rng.random() < 0.5:
                    self.injected["answered_500_after_commit"] += 1
                    raise ServerError("InternalServerError", "Internal server error", status=500)
                self.injected["timed_out_after_commit"] += 1
                after = max(after, deadline - kernel.now + 1)  # the answer never comes in time
        except ServerError as error:
            outcome = self._error(operation, error)
        answered_at = kernel.now + after
        kernel.sleep(min(answered_at, deadline) - kernel.now)  # the caller's thread, with its process
        if kernel.now < answered_at:
            self.injected["timed_out"] += 1
            raise ReadTimeoutError(endpoint_url=ENDPOINT, error="timed out")
        if isinstance(outcome, ClientError):
            raise outcome
        return outcome

    def _aims_at(self, fault: Directed, request: dict[str, Any]) -> bool:
        """Whether ``fault`` is for this request's table (every table when it names none)."""
        if not fault.table:
            return True
        leases = request.get("TableName") == self.tables.leases_table
        return fault.table == ("leases" if leases else "workers")

    def _serve(self, operation: str, request: dict[str, Any], age: int, storm: str | None) -> dict[str, Any]:
        """The server's answer to one attempt: refused (throttled, failed) or acted on."""
        f = self.faults
        if storm == "throttled" or (f.active and self.rng.random() < f.throttle_rate):
            self.injected["throttled"] += 1
            raise ServerError(
                self.rng.choice(THROTTLING_CODES),
                "The level of configured provisioned throughput for the table was exceeded. "
                "Consider increasing your provisioning level with the UpdateTable API.",
            )
        if storm == "failing" or (f.active and self.rng.random() < f.error_rate):
            self.injected["failed"] += 1
            raise ServerError("InternalServerError", "Internal server error", status=500)
        return self._act(operation, request, age)

    def _act(self, operation: str, request: dict[str, Any], age: int) -> dict[str, Any]:
        tables = self.tables
        if operation == "GetItem":
            return tables.get_item(request, age)
        if operation == "Scan":
            return tables.scan(request, age)
        if operation == "PutItem":
            return tables.put_item(request)
        if operation == "UpdateItem":
            return tables.update_item(request)
        if operation == "DeleteItem":
            return tables.delete_item(request)
        return tables.transact_write_items(request)
