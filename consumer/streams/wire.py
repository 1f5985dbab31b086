"""The fast record path: GetRecords response bytes → :class:`StreamRecord`, parsed with orjson.

botocore's JSON parser walks the output shape for every attribute value of every record (and turns
binaries into bytes and creation times into datetimes), which costs about a dozen times the plain JSON
parse. Records are instead kept exactly as they arrived on the wire: the attribute-value encoding with
binaries still base64, the creation time as epoch seconds. Each record is held as its own JSON bytes
(:class:`WireRecord`: ~1.3 x its wire size, where the parsed dicts would be ~11 x) with the few fields
the worker reads on every record taken up front; ``raw`` and the images are parsed from those bytes
when read, and converted to Python values, with boto3's TypeDeserializer semantics, only when a
processor asks.

A compact body (as the service sends it) is cut into its records first and each record's bytes are
parsed, held and dropped in turn (:func:`read_compact`): the whole body parsed at once would be ~20 x
its bytes in transient objects and, freed after the last record, cost more CPU than the parse of the
records one by one. Any other body (the emulator's and moto's spaced JSON) is parsed whole.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from consumer.records import NotAnObjectError, StreamRecord, WireRecord
from consumer.streams import held_fields
from consumer.streams.errors import StreamFormatError
from consumer.streams.source import GetRecordsResult

# The attribute type tags: no record begins with one of these keys (an attribute value does).
_TYPE_TAGS = frozenset((b"S", b"N", b"B", b"BOOL", b"NULL", b"M", b"L", b"SS", b"NS", b"BS"))


# Between two records of a compact ``Records`` array: ``},{"`` and the next record's first key. The
# only other arrays of objects in a response are ``L`` values, whose objects' keys are the attribute
# type tags, hence the look-ahead; a key starting with a letter rules out a ``"`` that closes a string
# (valid JSON has ``:``, ``,``, ``}`` or ``]`` after one). So, in a body orjson has accepted and of
# DynamoDB's shape, the matches are exactly the boundaries between records when the body is compact.
# A body of another shape is caught by the count of matches, or failing that when the record is read:
# a wrong cut is never one JSON value (it splits an object or joins two), and WireRecord checks it.
_BETWEEN_RECORDS = re.compile(rb'\},\{"(?!(?:' + b"|".join(sorted(_TYPE_TAGS)) + rb')")[A-Za-z_]')


def cut_records(body: bytes, document: dict[str, Any], count: int) -> list[tuple[int, int]] | None:
    """Where each of the ``count`` records of ``body`` (parsed: ``document``) lies in it, or None.

    For the compact JSON DynamoDB Streams sends: the text around the ``Records`` array must be exactly
    what orjson writes for the other members, and the array must hold exactly ``count - 1``
    boundaries, and every slice must parse back to its record. Anything else (whitespace, as the
    emulator and moto send; a second ``Records`` member) gives None, and the records are written
    back with ``orjson.dumps`` instead.
    """
    before: list[bytes] = []
    after: list[bytes] = []
    side = before
    for key, value in document.items():
        if key == "Records":
            side = after
            continue
        try:
            side.append(orjson.dumps(key) + b":" + orjson.dumps(value))
        except (orjson.JSONEncodeError, TypeError):
            return None
    head = b"{" + b"".join(member + b"," for member in before) + b'"Records":['
    tail = b"]" + b"".join(b"," + member for member in after) + b"}"
    if not (body.startswith(head) and body.endswith(tail)):
        return None
    start, end = len(head), len(body) - len(tail)
    if end - start < 2 or body[start] != ord("{") or body[end - 1] != ord("}"):
        return None
    boundaries = [match.start() for match in _BETWEEN_RECORDS.finditer(body, start, end)]
    if len(boundaries) != count - 1:
        return None
    cuts = []
    for boundary in boundaries:
        cuts.append((start, boundary + 1))
        start = boundary + 2
    cuts.append((start, end))
    # A body with a second ``Records`` member (the parse keeps the last) still has this head and
    # tail; only parsing each slice back proves the cut. This path is rare (bodies read_compact
    # refused), so the parse is affordable, and a record never holds bytes that are not its own.
    for (first, last), record in zip(cuts, document["Records"], strict=True):
        try:
            if orjson.loads(body[first:last]) != record:
                return None
        except orjson.JSONDecodeError:
            return None
    return cuts


def _creation_millis(record: Any) -> int | None:
    body = record.get("dynamodb") if isinstance(record, dict) else None
    created = body.get("ApproximateCreationDateTime") if isinstance(body, dict) else None
    if isinstance(created, (int, float)):
        return int(created * 1000)
    return None


def _between_records(body: bytes, start: int, end: int) -> bytes | None:
    """What lies between two records of the compact ``Records`` array ``body[start:end]``, or None.

    ``},{"K"``, where ``K`` is the first record's first key (the service writes every record's
    members in one order), found with ``bytes.find``: faster than the :data:`_BETWEEN_RECORDS`
    scan. In valid JSON ``},{"`` is structure (a ``"`` inside a string is escaped), and what follows a
    closing quote is never a letter, so its matches are exactly the places where an object of an
    array begins with key ``K``: the records of the ``Records`` array, since the only other arrays
    of objects are ``L`` values, whose objects' keys are the type tags. A record that began with
    another key would leave two records in one slice, which does not parse (the caller then parses
    the body whole, as it does for every body it cannot cut).
    """
    if not body.startswith(b'{"', start):
        return None
    close = body.find(b'"', start + 2, end)
    key = body[start + 2 : close]
    if close < 0 or not key[:1].isalpha() or key in _TYPE_TAGS:
        return None
    return b'},{"' + key + b'"'


def read_compact(
    body: bytes, shard_id: str, convert_images: bool = False
) -> tuple[tuple[StreamRecord, ...], Any, Any] | None:
    """The records of a compact body parsed one at a time, or None (then the body is parsed whole).

    Parsing the whole body builds every record's dicts before the first is held (~20 x the body:
    a transient that was most of the worker's peak memory per in-flight record), and frees them only
    after the last, from memory long gone from the CPU's caches. Here the body is cut first
    (:func:`_between_records`), and each record's slice is parsed, held and dropped in turn, so the
    transient is one record and its objects are freed while still hot.

    Nothing is taken on trust: the envelope (the body with the array emptied: ``"Records":[]`` and
    the other members) must parse to an object whose ``Records`` is that empty array, be exactly
    what orjson writes for it (no whitespace, no member twice), with no ``"Records":[`` after the
    array, and every slice must be one JSON object (parsed by orjson, or decoded by msgspec where
    only the held fields are built: consumer/streams/held_fields.py; :meth:`WireRecord.from_parsed`
    refuses anything else). The first ``"Records":[`` is then the top-level member (the envelope holds that
    text once at its top level, and it is neither before the first nor after the array), so the body
    is exactly the envelope with those objects in its ``Records``: valid JSON, and these are its
    records as the whole parse would give them; a cut in the wrong place cannot parse (it splits an
    object or joins two). Any other body (spaced, another shape, not JSON) gives None.

    ``convert_images``: each held record's keys and images are converted from the parse that checks
    it (:meth:`WireRecord.keep_images`), so reading them needs no second parse; without it, each
    record but the last (whose creation time is the batch's lag) is decoded without its images.

    Returns the records, ``NextShardIterator`` as the envelope holds it, and the last record parsed.
    """
    marker = body.find(b'"Records":[')
    if marker < 0:
        return None
    start = marker + len(b'"Records":[')
    end = body.rfind(b"}]") + 1  # the array's closing bracket, if no member after it holds "}]"
    if end <= start:
        end = start if body.startswith(b"]", start) else -1
        if end < 0:
            return None
    loads = orjson.loads
    hold = _parse_holding_images if convert_images else held_fields.hold
    try:
        if body.find(b'"Records":[', end) >= 0:
            return None
        text = body[:start] + body[end:]
        envelope = loads(text)
        if type(envelope) is not dict or envelope.get("Records") != [] or orjson.dumps(envelope) != text:
            return None
        if end == start:
            return (), envelope.get("NextShardIterator"), None
        needle = _between_records(body, start, end)
        if needle is None:
            return None
        # Cut, parse and hold in one loop: each record's dicts are dropped as soon as it is held.
        find = body.find
        records: list[StreamRecord] = []
        append = records.append
        boundary = find(needle, start, end)
        while boundary >= 0:
            append(hold(body[start : boundary + 1], shard_id))
            start = boundary + 2
            boundary = find(needle, start, end)
        # The last record is parsed whole: its creation time is the batch's MillisBehindLatest.
        piece = body[start:end]
        last = loads(piece)
        append((_holding_images if convert_images else WireRecord.from_parsed)(last, shard_id, piece))
    except (orjson.JSONDecodeError, orjson.JSONEncodeError, NotAnObjectError):
        return None
    return tuple(records), envelope.get("NextShardIterator"), last


def _parse_holding_images(wire: bytes, shard_id: str) -> StreamRecord:
    """Record ``wire`` parsed and held, its keys and images converted from that parse."""
    return _holding_images(orjson.loads(wire), shard_id, wire)


def _holding_images(record: Any, shard_id: str, wire: bytes | None = None) -> StreamRecord:
    """:meth:`WireRecord.from_parsed`, the keys and images converted from this parse."""
    held = WireRecord.from_parsed(record, shard_id, wire)
    if type(held) is WireRecord:
        held.keep_images(record["dynamodb"])
    return held


def parse_get_records(
    body: bytes, shard_id: str, now_wall_millis: int, *, convert_images: bool = False
) -> GetRecordsResult:
    """Parse one GetRecords response body.

    ``millis_behind_latest`` is ``now − ApproximateCreationDateTime`` of the newest record delivered
    (DynamoDB Streams has no MillisBehindLatest of its own), 0 for an empty batch.
    ``convert_images``: convert each record's keys and images now (``processing.convert_images:
    on_fetch``).
    """
    compact = read_compact(body, shard_id, convert_images)
    if compact is not None:
        records, next_iterator, last = compact
        return GetRecordsResult(
            records, _checked_iterator(next_iterator, shard_id), _behind(last, now_wall_millis)
        )
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned a body that is not JSON ({len(body)} bytes, "
            f"starting {body[:60]!r}); is endpoint_url pointing at DynamoDB Streams?"
        ) from exc
    if not isinstance(document, dict):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned {type(document).__name__}, not an object"
        )
    wire_records = document.get("Records") or []
    if not isinstance(wire_records, list) or not all(isinstance(r, dict) for r in wire_records):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned Records that are not a list of objects"
        )
    hold = _holding_images if convert_images else WireRecord.from_parsed
    cuts = cut_records(body, document, len(wire_records)) if wire_records else None
    if cuts is None:
        records = tuple([hold(r, shard_id) for r in wire_records])
    else:
        pairs = zip(wire_records, cuts, strict=True)
        records = tuple([hold(r, shard_id, body[start:end]) for r, (start, end) in pairs])
    next_iterator = _checked_iterator(document.get("NextShardIterator"), shard_id)
    return GetRecordsResult(
        records, next_iterator, _behind(wire_records[-1] if wire_records else None, now_wall_millis)
    )


def _checked_iterator(next_iterator: Any, shard_id: str) -> str | None:
    if next_iterator is not None and not isinstance(next_iterator, str):
        raise StreamFormatError(
            f"GetRecords on shard {shard_id} returned NextShardIterator {next_iterator!r}"
        )
    return next_iterator


def _behind(last_record: Any, now_wall_millis: int) -> int:
    """``now - ApproximateCreationDateTime`` of the newest record (0 without one or its time)."""
    created = _creation_millis(last_record) if last_record is not None else None
    return 0 if created is None else max(0, now_wall_millis - created)
