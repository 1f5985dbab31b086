"""Stream records as the processor sees them: a change as the stream delivered it, parsed on access.

* :mod:`~consumer.records.stream_record`: the record's two forms, :class:`StreamRecord` (parsed)
  and :class:`WireRecord` (held as its bytes), with the shard (:class:`ShardInfo`) and one
  GetRecords answer (:class:`RecordBatch`);
* :mod:`~consumer.records.kinesis_stream_record`: a Kinesis user record as the delivery path
  hands it to a processor (:class:`KinesisStreamRecord`: partition key, data as bytes, sequence
  and sub-sequence number);
* :mod:`~consumer.records.attribute_values`: an image's attribute values as Python values, as boto3
  converts them but checked (a number DynamoDB cannot hold is an error, not a rounded value);
* :mod:`~consumer.records.errors`: what is wrong with a record, one hierarchy.
"""

from __future__ import annotations

from consumer.records.attribute_values import deserialize_item, deserialize_value
from consumer.records.errors import AttributeValueError, NotAnObjectError, RecordFormatError
from consumer.records.kinesis_stream_record import KinesisStreamRecord
from consumer.records.stream_record import EventName, RecordBatch, ShardInfo, StreamRecord, WireRecord

__all__ = [
    "AttributeValueError",
    "EventName",
    "KinesisStreamRecord",
    "NotAnObjectError",
    "RecordBatch",
    "RecordFormatError",
    "ShardInfo",
    "StreamRecord",
    "WireRecord",
    "deserialize_item",
    "deserialize_value",
]
