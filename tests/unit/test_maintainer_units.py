import json
from typing import Any

import pytest

from kafkalake.glue import NULLABLE_PARAMETER
from lambdas.maintainer.dal import TtlCache
from lambdas.maintainer.inference import IncompatibleSchema, merge_columns
from lambdas.maintainer.logic import handle_record
from lambdas.maintainer.models import MalformedBody, parse_body

KEY = (
    "data/staging/acme/payments/card-authorized/schema_version=1/dt=2026-11-21/hour=07/"
    "card-authorized%2B0%2B5-9.parquet"
)


def record(key: str = KEY, name: str = "ObjectCreated:Put") -> dict[str, Any]:
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "awsRegion": "eu-west-1",
        "eventTime": "2026-11-21T11:00:00.000Z",
        "eventName": name,
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "c",
            "bucket": {"name": "b", "arn": "arn:aws:s3:::b"},
            "object": {"key": key, "size": 1, "eTag": "e"},
        },
    }


def test_parse_plain_sns_and_test_event() -> None:
    plain = json.dumps({"Records": [record()]})
    assert len(parse_body(plain).records) == 1
    sns = json.dumps(
        {
            "Type": "Notification",
            "MessageId": "m",
            "TopicArn": "arn:aws:sns:eu-west-1:1:t",
            "Message": plain,
            "Timestamp": "2026-11-21T11:00:00.000Z",
            "SignatureVersion": "1",
            "Signature": "s",
            "SigningCertURL": "https://x.invalid/c",
            "UnsubscribeURL": "https://x.invalid/u",
        }
    )
    assert parse_body(sns).records[0].s3.object.key == KEY  # type: ignore[union-attr]
    assert parse_body(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"})).test_event


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("nope", "body is not JSON"),
        ("[1, 2]", "not an S3 event notification"),
        (json.dumps({"Records": [{"eventName": "x"}]}), "not an S3 event notification"),
    ],
)
def test_malformed_bodies_say_why(body: str, reason: str) -> None:
    with pytest.raises(MalformedBody, match=reason):
        parse_body(body)


def test_record_handler_decisions() -> None:
    data_key = handle_record(parse_body(json.dumps({"Records": [record()]})).records[0])
    assert not isinstance(data_key, str) and (data_key.first_offset, data_key.last_offset) == (5, 9)
    removed = parse_body(json.dumps({"Records": [record(name="ObjectRemoved:Delete")]})).records[0]
    assert handle_record(removed) == "removed_object"
    foreign = parse_body(json.dumps({"Records": [record(key="staging/x/_SUCCESS")]})).records[0]
    assert handle_record(foreign) == "foreign_key"


def test_ttl_cache_expires() -> None:
    now = [0.0]
    cache: TtlCache[str, int] = TtlCache(10, clock=lambda: now[0])
    cache.put("a", 1)
    now[0] = 9.9
    assert cache.get("a") == 1
    now[0] = 10.1
    assert cache.get("a") is None


def column(name: str, kind: str, nullable: bool = True) -> dict[str, Any]:
    return {"Name": name, "Type": kind, "Parameters": {NULLABLE_PARAMETER: str(nullable).lower()}}


def test_merge_adds_columns_and_refuses_breaking_changes() -> None:
    merged, added = merge_columns([column("id", "string", False)], [column("id", "string"), column("n", "int")])
    assert [c["Name"] for c in merged] == ["id", "n"] and [c["Name"] for c in added] == ["n"]
    with pytest.raises(IncompatibleSchema, match="column 'id' changes type from string to int"):
        merge_columns([column("id", "string")], [column("id", "int")])
    with pytest.raises(IncompatibleSchema, match="required column 'id' is missing"):
        merge_columns([column("id", "string", False)], [column("n", "int")])
    assert merge_columns([column("opt", "string")], [column("n", "int")])[1] == [column("n", "int")]
