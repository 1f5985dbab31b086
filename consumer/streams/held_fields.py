"""Hold a record from the four fields the worker reads on every record, decoded with msgspec.

A record held as its bytes (:class:`WireRecord`) needs only its event name, sequence number,
creation time and size up front; its images are parsed when a processor reads them. Parsing each
record with orjson builds every image's dicts and strs only to drop them, and that was most of the
worker's CPU per record. msgspec decodes into a typed struct and skips every other member, still
checking that the bytes are one well-formed JSON object: what makes a cut of the body trustworthy
(consumer/streams/wire.py ``read_compact``).

Two things orjson checks that msgspec's skipping does not: UTF-8 inside the skipped strings, and the
range of skipped numbers. A record with any byte outside ASCII is therefore parsed by orjson
instead (``bytes.isascii`` is one fast scan), so invalid UTF-8 is refused exactly as before. A
number beyond a double's range in a skipped member (DynamoDB writes none there: an image's numbers
are strings) leaves the record held; reading it raises :class:`RecordFormatError` naming the record,
in the processor call, which retries and dead-letters it like any record that fails.

When images are converted at fetch time (``processing.convert_images: on_fetch``) the record is
parsed whole anyway, and this path is not used.
"""

from __future__ import annotations

from typing import Annotated

import msgspec
import orjson

from consumer.records import StreamRecord, WireRecord

# orjson gives an int for an integer up to 2**64 - 1 and a float beyond, which WireRecord refuses
# as a size; msgspec takes any integer, and bounds only within int64. A size outside those is
# refused here, so orjson decides it as it always did.
_SizeInt = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Body(msgspec.Struct, gc=False):
    """The held members of a record's ``dynamodb`` object."""

    sequence_number: str = msgspec.field(name="SequenceNumber")
    created: float = msgspec.field(name="ApproximateCreationDateTime", default=0.0)
    size: _SizeInt = msgspec.field(name="SizeBytes", default=0)


class _Record(msgspec.Struct, gc=False):
    """The held members of a record."""

    event_name: str = msgspec.field(name="eventName")
    body: _Body = msgspec.field(name="dynamodb")


_decode = msgspec.json.Decoder(_Record).decode


def hold(wire: bytes, shard_id: str) -> StreamRecord:
    """Record ``wire`` (one record's bytes cut from a response body) held, as
    :meth:`WireRecord.from_parsed` of its orjson parse would hold it.

    Any record this path cannot vouch for (not ASCII, a held field missing or of another type, not
    one JSON object) goes through orjson and :meth:`WireRecord.from_parsed`, which decide as
    always: a :class:`StreamRecord` for a malformed held field, :class:`orjson.JSONDecodeError` for
    bytes that are not JSON, :class:`NotAnObjectError` for a value that is not an object.
    """
    if wire.isascii():
        try:
            fields = _decode(wire)
        except msgspec.DecodeError:  # ValidationError included: malformed or not JSON, see below
            pass
        else:
            body = fields.body
            held = WireRecord.from_fields(
                wire,
                shard_id,
                event_name=fields.event_name,
                sequence_number=body.sequence_number,
                created=body.created,
                size=body.size,
            )
            if held is not None:
                return held
    return WireRecord.from_parsed(orjson.loads(wire), shard_id, wire)
