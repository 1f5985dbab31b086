"""Everything reading a stream can raise: one hierarchy, each class naming what to do about it.

It is the only error vocabulary for stream reads: the adapter raises these, the lifecycle (the shard
consumer, shard sync) and the worker's start-up catch them, test fakes raise them. Callers decide by
type, never by parsing messages:

* :class:`ExpiredIteratorError`, :class:`InvalidStreamRequestError` (an iterator the service no
  longer accepts): get a new iterator from the last delivered position;
* :class:`TrimmedDataError`, :class:`ShardNotFoundError`: data or a shard gone before it was read —
  a loud loss, handled by ``worker.on_trimmed``;
* :class:`FatalStreamError` (:class:`StreamNotFoundError`, :class:`StreamGoneError`,
  :class:`AccessDeniedError`): no retry helps; the worker stops and says what to fix;
* anything else (:class:`ThrottledError`, :class:`TransientStreamError`,
  :class:`StreamFormatError`, the base class itself): back off and retry.

Every adapter error wraps the botocore error it came from (``raise ... from exc``) so the request id
stays in the traceback.
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


class FatalStreamError(StreamSourceError):
    """The stream cannot be read as configured, and retrying will not change that: the worker stops."""


class StreamNotFoundError(FatalStreamError):
    """The configured stream (or the table's stream) does not exist: fix the ARN or enable the stream."""


class StreamGoneError(FatalStreamError):
    """The stream was deleted or disabled while being read: fatal for the worker."""


class ShardNotFoundError(StreamSourceError):
    """The shard is no longer in the stream (trimmed away after 24 h, or a wrong id)."""


class AccessDeniedError(FatalStreamError):
    """The worker's credentials lack a DynamoDB Streams permission; the message names the IAM action."""


class StreamFormatError(StreamSourceError):
    """A response body that is not the JSON DynamoDB Streams documents (a proxy page, a truncated body)."""
