"""What is wrong with a stream record: its shape, or one attribute value in it.

One hierarchy under :class:`RecordFormatError` (a ``ValueError``), so a record's fault raised while a
processor reads it is a failure of that record like any other: retried, bisected, dead-lettered.
"""

from __future__ import annotations


class RecordFormatError(ValueError):
    """A stream record that does not have the shape DynamoDB Streams documents."""


class NotAnObjectError(RecordFormatError):
    """A member of ``Records`` that is not a JSON object: no record at all (the response is refused)."""


class AttributeValueError(RecordFormatError):
    """An attribute value that cannot be converted to a Python value (e.g. a number DynamoDB cannot hold).

    Raised while a processor reads ``keys``/``new_image``/``old_image``, so it names everything an
    operator needs to find the value: the attribute path (``NewImage.items[2].qty``), the record
    (eventID and sequence number) and the shard. Being a ``ValueError`` raised inside the processor
    call, it is a failure of that record like any other: retried, bisected, dead-lettered.
    """

    def __init__(
        self,
        path: str,
        problem: str,
        *,
        event_id: str | None = None,
        sequence_number: str | None = None,
        shard_id: str | None = None,
    ) -> None:
        self.path, self.problem = path, problem
        self.event_id, self.sequence_number, self.shard_id = event_id, sequence_number, shard_id
        shard = f"shard {shard_id}" if shard_id is not None else ""
        record = f"record {event_id!r} (SequenceNumber {sequence_number!r})" if event_id is not None else ""
        where = ", ".join(part for part in (shard, record) if part)
        super().__init__(": ".join(part for part in (where, path, problem) if part))

    def under(self, segment: str) -> AttributeValueError:
        """The same error one container further out (``segment`` + the path so far)."""
        return AttributeValueError(segment + self.path, self.problem)

    def in_record(self, event_id: str, sequence_number: str | None, shard_id: str) -> AttributeValueError:
        return AttributeValueError(
            self.path, self.problem, event_id=event_id, sequence_number=sequence_number, shard_id=shard_id
        )
