import io
import json
from datetime import UTC, date, datetime, timedelta
from typing import Any

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from moto import mock_aws

from kafkalake.glue import NULLABLE_PARAMETER
from kafkalake.layout import DataKey, Partition, TablePrefix
from kafkalake.s3_location import decode_event_key
from lambdas.maintainer.dal import LakeObjects, TtlCache
from lambdas.maintainer.inference import IncompatibleSchema, merge_columns
from lambdas.maintainer.logic import Ignored, handle_record
from lambdas.maintainer.models import MalformedBody, parse_body
from lambdas.maintainer.partitions import PartitionSync
from lambdas.maintainer.report import Report
from lambdas.tables import LakeTable

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
        "userIdentity": {"principalId": "AWS:AIDAEXAMPLE"},
        "requestParameters": {"sourceIPAddress": "10.0.0.1"},
        "responseElements": {"x-amz-request-id": "R", "x-amz-id-2": "I"},
        "s3": {
            "s3SchemaVersion": "1.0",
            "configurationId": "c",
            "bucket": {"name": "b", "ownerIdentity": {"principalId": "A"}, "arn": "arn:aws:s3:::b"},
            "object": {"key": key, "size": 1, "eTag": "e", "sequencer": "0A"},
        },
    }


def test_parse_plain_sns_and_test_event() -> None:
    plain = json.dumps({"Records": [record()]})
    assert len(parse_body(plain).events) == 1
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
    assert parse_body(sns).events[0].key == decode_event_key(KEY)
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
    data_key = handle_record(parse_body(json.dumps({"Records": [record()]})).events[0], "staging")
    assert isinstance(data_key, DataKey) and (data_key.first_offset, data_key.last_offset) == (5, 9)
    removed = parse_body(json.dumps({"Records": [record(name="ObjectRemoved:Delete")]})).events[0]
    assert handle_record(removed, "staging") == Ignored("removed_object")
    foreign = parse_body(json.dumps({"Records": [record(key="state/x/_SUCCESS")]})).events[0]
    ignored = handle_record(foreign, "staging")
    assert isinstance(ignored, Ignored) and ignored.kind == "foreign_key"
    assert "state/x/_SUCCESS" in ignored.detail and "not a data partition" in ignored.detail
    other = handle_record(parse_body(json.dumps({"Records": [record()]})).events[0], "production")
    assert isinstance(other, Ignored) and other.kind == "other_environment"
    assert "belongs to environment 'staging'; this maintainer serves 'production'" in other.detail
    output = "data/staging/acme/payments/card-authorized/_compacted/schema_version=1/dt=2026-11-20/hour=07/run-0a/"
    output += "part-00000.parquet"
    compacted = parse_body(json.dumps({"Records": [record(key=output)]})).events[0]
    assert handle_record(compacted, "staging") == Ignored("compaction_output")


def eventbridge(key: str, detail_type: str = "Object Created") -> str:
    """S3 → EventBridge → SQS: the key is not URL-encoded."""
    return json.dumps(
        {
            "version": "0",
            "id": "e",
            "detail-type": detail_type,
            "source": "aws.s3",
            "account": "111111111111",
            "time": "2026-11-21T11:00:00Z",
            "region": "eu-west-1",
            "resources": ["arn:aws:s3:::b"],
            "detail": {
                "version": "0",
                "bucket": {"name": "b"},
                "object": {"key": key, "size": 1, "etag": "e", "sequencer": "0A"},
                "request-id": "r",
                "requester": "111111111111",
                "source-ip-address": "10.0.0.1",
                "reason": "PutObject",
            },
        }
    )


def test_eventbridge_bodies_are_accepted_with_their_keys_as_they_are() -> None:
    plain_key = decode_event_key(KEY)  # "...card-authorized+0+5-9.parquet": a literal '+', not a space
    [created] = parse_body(eventbridge(plain_key)).events
    data_key = handle_record(created, "staging")
    assert isinstance(data_key, DataKey) and data_key.key() == plain_key
    [deleted] = parse_body(eventbridge(plain_key, "Object Deleted")).events
    assert handle_record(deleted, "staging") == Ignored("removed_object")


def test_errors_for_bad_bodies_echo_a_bounded_part_of_them() -> None:
    for huge in (
        json.dumps({"Records": [{"eventName": "x" * 200_000}]}),
        json.dumps({"Type": "Notification", "Message": 7, "TopicArn": "z" * 200_000}),
        json.dumps({"source": "aws.s3", "detail-type": "Object Created", "detail": "d" * 200_000}),
    ):
        with pytest.raises(MalformedBody) as bad:
            parse_body(huge)
        assert len(str(bad.value)) < 1_000
    with pytest.raises(MalformedBody) as not_json:
        parse_body("{" + "y" * 200_000)
    assert len(str(not_json.value)) < 1_000 and "more characters" in str(not_json.value)


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


def test_freshness_is_the_age_of_the_newest_kafka_time_made_queryable() -> None:
    """Per Kafka partition the object with the highest offsets is read (its footer's statistics), the newest of
    those gives the table's age at the drain."""
    now = datetime(2026, 11, 21, 12, tzinfo=UTC)
    prefix = TablePrefix("staging", "acme", "payments", "card-authorized")
    partition = Partition(1, date(2026, 11, 21), 11)
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="lake")
        newest = {0: datetime(2026, 11, 21, 11, 40, tzinfo=UTC), 1: datetime(2026, 11, 21, 11, 50, tzinfo=UTC)}
        keys = set()
        for kafka_partition, first, moment in ((0, 0, newest[0]), (0, 10, newest[0]), (1, 0, newest[1])):
            key = DataKey(prefix, partition, kafka_partition, first, first + 9)
            times = [moment - timedelta(minutes=5 * (first == 0 and kafka_partition == 0)), moment]
            body = io.BytesIO()
            pq.write_table(pa.table({"_kafka_timestamp": pa.array(times, pa.timestamp("us", tz="UTC"))}), body)
            s3.put_object(Bucket="lake", Key=key.key(), Body=body.getvalue())
            keys.add(key)
        report = Report()
        sync = PartitionSync(None, LakeObjects(s3, "lake"), None, report, timedelta(0), now)  # type: ignore[arg-type]
        sync.note_freshness(LakeTable.by_convention(prefix), keys)
    assert report.data_age_seconds == {"acme_staging.card_authorized": 600.0}
    assert report.as_dict()["data_age_seconds"] == {"acme_staging.card_authorized": 600.0}
