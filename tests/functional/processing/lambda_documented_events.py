"""The DynamoDB Streams event AWS Lambda sends, as AWS documents it: the fixtures the Lambda form's
event is compared with (tests/functional/processing/test_lambda_event_shape.py).

Written here from the documentation's facts, one record per kind of change:

* the Lambda Developer Guide's DynamoDB example events (an INSERT, a MODIFY and a REMOVE of the
  item ``{"Id": 101, "Message": ...}``, in a table whose stream shows NEW_AND_OLD_IMAGES), with each
  record's ``eventID``, ``eventName``, ``eventVersion``, ``eventSource``, ``awsRegion``,
  ``dynamodb`` and ``eventSourceARN`` (``arn:aws:dynamodb:<region>:<account>:table/<table>/stream/
  <label>``);
* the DynamoDB API reference's StreamRecord: ``ApproximateCreationDateTime`` is the creation time
  in UNIX epoch seconds rounded down to the second (a float in Lambda's Python events, e.g.
  ``1694530154.0``), ``SizeBytes`` a number, ``SequenceNumber`` a string of digits;
* the DynamoDB Developer Guide's Time to Live page: a delete made by TTL carries
  ``"userIdentity": {"type": "Service", "principalId": "dynamodb.amazonaws.com"}``;
* the DynamoDB JSON of every attribute type (``S``, ``N``, ``B`` base64, ``BOOL``, ``NULL``, ``M``,
  ``L``, ``SS``, ``NS``, ``BS``), numbers as strings.

Values that differ from record to record (``eventID``, the creation time, the sequence number, the
size, the stream's ARN) are compared by type and form; every other value by equality.
"""

from __future__ import annotations

from typing import Any

DOCUMENTED_ARN = (
    "arn:aws:dynamodb:us-east-1:123456789012:table/ExampleTableWithStream/stream/2015-06-27T00:48:05.899"
)
VARYING = ("eventID", "eventSourceARN", "ApproximateCreationDateTime", "SequenceNumber", "SizeBytes")


def _record(name: str, body: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "eventID": "c4ca4238a0b923820dcc509a6f75849b",
        "eventName": name,
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1479499740.0,
            **body,
            "SequenceNumber": "111",
            "SizeBytes": 26,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": DOCUMENTED_ARN,
        **extra,
    }


KEYS = {"Id": {"N": "101"}}
NEW_ITEM = {"Message": {"S": "New item!"}, "Id": {"N": "101"}}
CHANGED_ITEM = {"Message": {"S": "This item has changed"}, "Id": {"N": "101"}}

INSERT = _record("INSERT", {"Keys": KEYS, "NewImage": NEW_ITEM})
MODIFY = _record("MODIFY", {"Keys": KEYS, "NewImage": CHANGED_ITEM, "OldImage": NEW_ITEM})
REMOVE = _record("REMOVE", {"Keys": KEYS, "OldImage": CHANGED_ITEM})
TTL_ITEM = {"Id": {"N": "102"}, "Message": {"S": "Expires"}, "ExpiresAt": {"N": "1479499000"}}
TTL_DELETE = _record(
    "REMOVE",
    {"Keys": {"Id": {"N": "102"}}, "OldImage": TTL_ITEM},
    userIdentity={"type": "Service", "principalId": "dynamodb.amazonaws.com"},
)
EVERY_TYPE_ITEM = {
    "Id": {"N": "103"},
    "Text": {"S": "Hello"},
    "Price": {"N": "-12.50"},
    "Blob": {"B": "dGhpcyB0ZXh0IGlzIGJhc2U2NC1lbmNvZGVk"},
    "InStock": {"BOOL": True},
    "Discontinued": {"NULL": True},
    "Dimensions": {"M": {"Width": {"N": "4"}, "Unit": {"S": "cm"}}},
    "History": {"L": [{"S": "created"}, {"N": "3"}]},
    "Colors": {"SS": ["Blue", "Red"]},
    "Sizes": {"NS": ["1", "2.5"]},
    "Thumbnails": {"BS": ["U3Vubnk=", "UmFpbnk="]},
}
EVERY_TYPE_INSERT = _record("INSERT", {"Keys": {"Id": {"N": "103"}}, "NewImage": EVERY_TYPE_ITEM})

WINDOW_EVENT_FIELDS = {
    # The Lambda Developer Guide's DynamodbTimeWindowEvent, beside its Records.
    "window": {"start": "2020-07-30T17:00:00Z", "end": "2020-07-30T17:05:00Z"},
    "state": {"1": "state1"},
    "shardId": "shard123456789",
    "eventSourceARN": DOCUMENTED_ARN,
    "isFinalInvokeForWindow": False,
    "isWindowTerminatedEarly": False,
}
