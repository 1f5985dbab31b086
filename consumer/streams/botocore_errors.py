"""botocore's errors as the stream port's: one translation path for every stream service's adapter.

Each adapter (DynamoDB Streams, Kinesis) knows what its service's error codes mean and what to do
about them (its ``translate``); what botocore raises, and how a call that was never sent or never
answered is reported, is the same for both, so it is written once here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from botocore.exceptions import BotoCoreError, ClientError, ParamValidationError

from consumer.streams.errors import InvalidStreamRequestError, StreamSourceError, TransientStreamError

# (code, "<action> on <resource>: <code>: <message>", the service's message) -> the port's error
Translate = Callable[[str, str, str], StreamSourceError]


@contextmanager
def translated(action: str, resource: str, translate: Translate) -> Iterator[None]:
    """Run a call; raise the port's error, saying what to do, for any botocore error it raises."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", ""))
        raise translate(code, f"{action} on {resource}: {code}: {message}", message) from exc
    except ParamValidationError as exc:
        raise InvalidStreamRequestError(f"{action} on {resource} was not sent: {exc}") from exc
    except BotoCoreError as exc:
        raise TransientStreamError(
            f"{action} on {resource} failed after botocore's retries: {exc} "
            "(check endpoint_url and the network; the call is retried later)"
        ) from exc
