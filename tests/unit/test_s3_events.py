"""moto's S3 notifications lack fields S3 always sends: the maintainer's strict models refuse them as they are, and
accept them once the dev tooling completed them; other bodies pass as they are."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws

from kafkalake_dev.local.s3_events import as_s3_sends, complete_body
from lambdas.maintainer.models import MalformedBody, parse_body

KEY = "data/staging/acme/payments/card-authorized/schema_version=1/dt=2026-11-21/hour=07/card-authorized+0+5-9.parquet"


@mock_aws
def test_moto_notifications_validate_once_completed() -> None:
    s3 = boto3.client("s3", region_name="eu-west-1")
    sqs = boto3.client("sqs", region_name="eu-west-1")
    s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
    url = sqs.create_queue(QueueName="notifications")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    s3.put_bucket_notification_configuration(
        Bucket="lake",
        NotificationConfiguration={"QueueConfigurations": [{"QueueArn": arn, "Events": ["s3:ObjectCreated:*"]}]},
    )
    sqs.purge_queue(QueueUrl=url)  # the s3:TestEvent
    s3.put_object(Bucket="lake", Key=KEY, Body=b"x")
    [raw] = sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]
    with pytest.raises(MalformedBody, match="not an S3 event notification"):
        parse_body(raw["Body"])
    [completed] = as_s3_sends(sqs).receive_message(QueueUrl=url)["Messages"]
    [event] = parse_body(completed["Body"]).events
    assert (event.name, event.key) == ("ObjectCreated:Put", KEY)


@pytest.mark.parametrize(
    "body",
    ["not json", "[1, 2]", json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "lake"})],
)
def test_other_bodies_pass_as_they_are(body: str) -> None:
    assert complete_body(body) == body


def test_fields_a_record_has_are_kept() -> None:
    record = {"eventSource": "aws:s3", "userIdentity": {"principalId": "AWS:REAL"}, "s3": {"bucket": {"name": "b"}}}
    [completed] = json.loads(complete_body(json.dumps({"Records": [record]})))["Records"]
    assert completed["userIdentity"] == {"principalId": "AWS:REAL"}
    assert set(completed) >= {"requestParameters", "responseElements"} and "ownerIdentity" in completed["s3"]["bucket"]
