"""The local stack's moto server lists object versions as moto does, without copying their bytes, and receives SQS
messages as moto does, without building the queue's attributes for each."""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from moto import mock_aws
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.core.utils import unix_time_millis
from moto.s3 import models as s3_models
from moto.sqs.models import Queue, SQSBackend, sqs_backends

from kafkalake_dev.local.moto_server import retained, versions_without_bytes


def listing(s3: Any) -> list[tuple[Any, ...]]:
    pages = s3.get_paginator("list_object_versions").paginate(
        Bucket="lake", Prefix="a/", PaginationConfig={"PageSize": 2}
    )
    return [
        (kind, v["Key"], v["VersionId"], v["IsLatest"], v.get("Size"), v.get("ETag"))
        for page in pages
        for kind in ("Versions", "DeleteMarkers")
        for v in page.get(kind, [])
    ]


def test_versions_are_listed_as_moto_lists_them(monkeypatch: pytest.MonkeyPatch) -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="eu-west-1")
        s3.create_bucket(Bucket="lake", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"})
        s3.put_bucket_versioning(Bucket="lake", VersioningConfiguration={"Status": "Enabled"})
        for key, bodies in {"a/1": [b"x", b"yy"], "a/2": [b"zzz"], "b/3": [b"w"]}.items():
            for body in bodies:
                s3.put_object(Bucket="lake", Key=key, Body=body)
        s3.delete_object(Bucket="lake", Key="a/2")  # a delete marker
        by_moto = listing(s3)
        with monkeypatch.context() as patch:
            patch.setattr(s3_models, "copy", SimpleNamespace(copy=copy.copy, deepcopy=versions_without_bytes))
            ours = listing(s3)
        again = listing(s3)  # the stored versions are as they were: moto's own listing is unchanged
    assert len(by_moto) == 4 and {k for k, *_ in by_moto} == {"Versions", "DeleteMarkers"}
    assert ours == by_moto == again


def test_a_copy_shares_the_bytes_and_leaves_the_original_alone() -> None:
    closed = []

    class Version:
        def __init__(self) -> None:
            self.value, self.is_latest = bytearray(b"bytes"), False

        def __del__(self) -> None:
            closed.append(self.value)

    original = Version()
    [twin] = versions_without_bytes([original])
    twin.is_latest = True
    assert isinstance(twin, Version) and twin.value is original.value and original.is_latest is False
    del twin
    assert closed == [], "a copy closed the stored version's bytes"


def test_retention_is_checked_as_moto_checks_it() -> None:
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        sqs.create_queue(QueueName="q", Attributes={"MessageRetentionPeriod": "60"})
        sqs.send_message(QueueUrl=sqs.get_queue_url(QueueName="q")["QueueUrl"], MessageBody="m")
        backend = sqs_backends[DEFAULT_ACCOUNT_ID]["eu-west-1"]
        [message] = backend.get_queue("q")._messages
        for age_ms in (0, 59_000, 61_000):
            message.sent_timestamp = int(unix_time_millis() - age_ms)  # type: ignore[assignment]  # moto types it None
            by_moto = SQSBackend.is_message_valid_based_on_retention_period(backend, "q", message)
            assert retained(backend, "q", message) == by_moto == (age_ms < 60_000)


def test_a_receive_does_not_build_the_queue_attributes(monkeypatch: pytest.MonkeyPatch) -> None:
    """moto builds every attribute of the queue (three walks over its messages) three times per message received:
    the maintainer's drain, which keeps its messages in flight until its end, waited quadratically long for it."""
    built = []
    attributes = Queue.attributes

    def counted(queue: Queue) -> dict[str, Any]:
        built.append(queue.name)
        return attributes.fget(queue)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(Queue, "attributes", property(counted))
    monkeypatch.setattr(SQSBackend, "is_message_valid_based_on_retention_period", retained)
    with mock_aws():
        sqs = boto3.client("sqs", region_name="eu-west-1")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        sqs.send_message_batch(QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": str(i)} for i in range(10)])
        built.clear()
        received = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0)["Messages"]
    assert sorted(int(m["Body"]) for m in received) == list(range(10))
    assert built == []
