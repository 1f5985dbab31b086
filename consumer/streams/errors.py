"""The stream source's errors: one hierarchy, each naming what the caller (or the operator) should do.

The fetch loop decides by type, never by parsing messages: an expired iterator is re-acquired from the
last delivered position, trimmed data is a loud loss, throttling and transient errors are backed off
and retried, a stream that is gone or a permission that is missing is fatal. Every adapter error wraps
the botocore error it came from (``raise ... from exc``) so the request id stays in the traceback.
"""

from __future__ import annotations


class StreamSourceError(Exception):
    """Base of everything a :class:`~consumer.streams.source.StreamSource` raises."""


class ExpiredIteratorError(StreamSourceError):
    """The shard iterator is older than its 15 minutes: get a new one from the last delivered position."""


class TrimmedDataError(StreamSourceError):
    """The position is older than the stream's 24 h retention: records were lost before being read."""


class ThrottledError(StreamSourceError):
    """Too many requests (LimitExceededException) even after botocore's retries: back off with jitter."""


class TransientStreamError(StreamSourceError):
    """A service-side or network failure (500, timeout) that outlived botocore's retries: retry later."""


class InvalidStreamRequestError(StreamSourceError):
    """The service rejected a request as malformed (ValidationException): a bug or a bad setting."""


class StreamNotFoundError(StreamSourceError):
    """The configured stream (or the table's stream) does not exist: fix the ARN or enable the stream."""


class StreamGoneError(StreamSourceError):
    """The stream was deleted or disabled while being read: fatal for the worker."""


class ShardNotFoundError(StreamSourceError):
    """The shard is no longer in the stream (trimmed away after 24 h, or a wrong id)."""


class AccessDeniedError(StreamSourceError):
    """The worker's credentials lack a DynamoDB Streams permission; the message names the IAM action."""


class StreamFormatError(StreamSourceError):
    """A response body that is not the JSON DynamoDB Streams documents (a proxy page, a truncated body)."""
