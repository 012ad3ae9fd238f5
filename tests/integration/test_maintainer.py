"""The maintainer against the local stack: real objects in moto's S3, real notifications in its SQS, real Glue calls.

Past 400 lines: every scenario (duplicates, special and malformed bodies, crawler and native inference, schema
versions, throttling, EventBridge delivery, the dead-letter queue's redrive, reconciling, late rows, LF-tags) drives
the one drain through the same ``Lake`` (bucket, queue, Glue database and clock) and event builders; apart, each
file would repeat them or import them from a helper module that only this file uses."""

from __future__ import annotations

import dataclasses
import io
import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.awsrequest import AWSResponse
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.environments import EnvironmentConfig
from kafkalake.glue import COMPLETE_PARAMETER
from kafkalake.layout import DataKey, Partition, TablePrefix
from kafkalake.topic_catalog import TopicCatalog, load_topic_catalog, tables_document
from kafkalake_dev.local.maintainer import invoke_reconciler_locally, lambda_log
from kafkalake_dev.local.provision import PROVISIONED_SERVICES, provision
from kafkalake_dev.local.s3_events import as_s3_sends
from kafkalake_dev.local.sandbox import count_calls, isolated_env
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.maintainer.report import Report
from lambdas.tables import tables_from_document
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs
from tests.integration.lake_files import small_file

pytestmark = pytest.mark.stack
BUCKET_IN_EVENTS = "lake"
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def parquet(version: int, rows: int = 3) -> bytes:
    columns: dict[str, Any] = {
        "id": pa.array([f"id-{i}" for i in range(rows)]),
        "amount_cents": pa.array(range(rows), pa.int64()),
        "authorization": pa.array(
            [{"issuer": "x", "authorized_at": None}] * rows,
            pa.struct([("issuer", pa.string()), ("authorized_at", pa.timestamp("ms"))]),
        ),
    }
    if version >= 2:
        columns["merchant_country"] = pa.array(["DE"] * rows)
    if version == 99:  # an incompatible change: amount_cents becomes a string
        columns["amount_cents"] = pa.array(["1"] * rows)
    out = io.BytesIO()
    pq.write_table(pa.table(columns), out)
    return out.getvalue()


def key(prefix: TablePrefix, version: int, hour: int, first: int = 0, day: date = date(2026, 11, 21)) -> DataKey:
    return DataKey(prefix, Partition(version, day, hour), kafka_partition=0, first_offset=first, last_offset=first + 9)


class Lake:
    def __init__(self, endpoints: Endpoints, env: EnvironmentConfig, catalog: TopicCatalog, files: tuple[Path, Path]):
        self.endpoints, self.env, self.catalog, self.files = endpoints, env, catalog, files
        clients = {s: make_client(endpoints, s) for s in PROVISIONED_SERVICES}
        provisioned = provision(clients, endpoints.region, env, catalog)
        self.p = provisioned
        self.card = TablePrefix(env.name, "acme", "payments", "card-authorized")  # native inference
        self.sensor = TablePrefix(env.name, "globex", "iot", "sensor-readings")  # crawler mode
        self.acme, self.globex = f"acme_{env.name}", f"globex_{env.name}"
        self.calls: Counter[str] = Counter()
        self.s3 = make_client(endpoints, "s3")
        self.sqs = as_s3_sends(make_client(endpoints, "sqs"))  # moto's notifications as S3 sends them
        self.glue = count_calls(make_client(endpoints, "glue"), self.calls)
        self.clients = Clients(
            self.sqs, self.glue, self.s3, make_client(endpoints, "events"), make_client(endpoints, "lakeformation")
        )
        self.settings = DrainConfig(
            queue_url=provisioned.queue_url,
            bucket=provisioned.bucket,
            event_bus=provisioned.event_bus,
            env=env.name,
            tables=tables_from_document(tables_document(catalog.for_env(env.name))),
            wait_seconds=0,
        )
        self.state = State(ttl=600)

    def put(self, data_key: DataKey, version_body: int | None = None) -> None:
        body = parquet(version_body or data_key.partition.schema_version)
        self.s3.put_object(Bucket=self.p.bucket, Key=data_key.key(), Body=body)

    def send(self, body: dict[str, Any] | str) -> None:
        self.sqs.send_message(
            QueueUrl=self.p.queue_url, MessageBody=body if isinstance(body, str) else json.dumps(body)
        )

    def run(self) -> Report:
        self.calls.clear()
        return drain(self.settings, self.clients, self.state, remaining_ms=lambda: 600_000, now=lambda: NOW)

    def queue_depth(self, url: str | None = None) -> int:
        attrs = self.sqs.get_queue_attributes(
            QueueUrl=url or self.p.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return int(attrs["ApproximateNumberOfMessages"]) + int(attrs["ApproximateNumberOfMessagesNotVisible"])

    def partitions(self, prefix: TablePrefix) -> set[tuple[str, ...]]:
        database, table = self.names(prefix)
        pages = self.glue.get_paginator("get_partitions").paginate(DatabaseName=database, TableName=table)
        return {tuple(p["Values"]) for page in pages for p in page["Partitions"]}

    def tables(self) -> set[tuple[str, str]]:
        return {(db, t["Name"]) for db in self.p.databases for t in self.glue.get_tables(DatabaseName=db)["TableList"]}

    def names(self, prefix: TablePrefix) -> tuple[str, str]:
        topic = self.catalog.get(prefix.topic, prefix.env)
        return topic.database, topic.table

    def glue_writes(self) -> int:
        return sum(n for op, n in self.calls.items() if op.split(".")[1].startswith(("Create", "Update", "Batch")))

    def glue_total(self) -> int:
        return sum(self.calls.values())


@pytest.fixture
def lake(local_stack: Endpoints, tmp_path: Path) -> Lake:
    env, catalog, environments = isolated_env(tmp_path)
    return Lake(local_stack, env, load_topic_catalog(catalog), (catalog, environments))


def s3_event(key_in_event: str, name: str = "ObjectCreated:Put") -> dict[str, Any]:
    """An S3 notification as real S3 sends it (keys URL-encoded with '/' kept, '+' for space)."""
    return {
        "Records": [
            {
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
                    "configurationId": "kafkalake",
                    "bucket": {
                        "name": BUCKET_IN_EVENTS,
                        "ownerIdentity": {"principalId": "A"},
                        "arn": f"arn:aws:s3:::{BUCKET_IN_EVENTS}",
                    },
                    "object": {"key": key_in_event, "size": 10, "eTag": "e", "sequencer": "0A"},
                },
            }
        ]
    }


def sns_wrapped(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "Type": "Notification",
        "MessageId": "m-1",
        "TopicArn": "arn:aws:sns:eu-west-1:123456789012:t",
        "Subject": None,
        "Message": json.dumps(body),
        "Timestamp": "2026-11-21T11:00:00.000Z",
        "SignatureVersion": "1",
        "Signature": "x",
        "SigningCertURL": "https://example.invalid/c.pem",
        "UnsubscribeURL": "https://example.invalid/u",
    }


def test_one_run_syncs_glue_with_duplicates_shuffled_and_encoded_keys(lake: Lake) -> None:
    keys = [key(lake.card, 1, hour, first) for hour in (3, 4, 5) for first in (0, 10, 20)]
    random.Random(7).shuffle(keys)
    for data_key in keys:
        lake.put(data_key)
    for data_key in keys[:3]:  # the same objects written again: duplicate events
        lake.put(data_key)
    lake.s3.copy_object(
        Bucket=lake.env.bucket,
        Key=keys[0].key(),
        CopySource={"Bucket": lake.env.bucket, "Key": keys[0].key()},
        MetadataDirective="REPLACE",
    )
    report = lake.run()

    assert report.counts["ignored_test_event"] == 1
    assert report.counts["data_events"] == 13
    assert report.counts["unique_objects"] == 9
    assert report.counts["tables_created"] == 1
    assert report.counts["partitions_added"] == 3
    assert report.counts["create_partition_calls"] == 1
    assert report.counts["messages"] == report.counts["deleted"] == 14
    assert report.errors == []
    assert lake.tables() == {(lake.acme, "card_authorized")}
    assert lake.partitions(lake.card) == {("1", "2026-11-21", f"{h:02d}") for h in (3, 4, 5)}
    table = lake.glue.get_table(DatabaseName=lake.acme, Name="card_authorized")["Table"]
    assert [c["Name"] for c in table["StorageDescriptor"]["Columns"]] == ["id", "amount_cents", "authorization"]
    assert table["StorageDescriptor"]["Columns"][2]["Type"] == "struct<issuer:string,authorized_at:timestamp>"
    assert [k["Name"] for k in table["PartitionKeys"]] == ["schema_version", "dt", "hour"]
    part = lake.glue.get_partition(
        DatabaseName=lake.acme, TableName="card_authorized", PartitionValues=["1", "2026-11-21", "04"]
    )["Partition"]
    assert part["StorageDescriptor"]["Location"] == (
        f"s3://{lake.env.bucket}/data/{lake.env.name}/acme/payments/card-authorized/schema_version=1/dt=2026-11-21/hour=04/"
    )
    assert lake.queue_depth() == 0 and lake.queue_depth(lake.p.dlq_url) == 0
    # Hours 03 and 04 are followed by data in 04 and 05 and ended long before NOW: complete.
    assert report.counts["partitions_completed"] == 2
    assert part["Parameters"][COMPLETE_PARAMETER] == "true"
    assert sorted(e["type"] for e in report.events) == ["PartitionComplete", "PartitionComplete", "TableCreated"]


def test_second_run_without_events_makes_no_glue_calls_and_cache_saves_reads(lake: Lake) -> None:
    lake.put(key(lake.card, 1, 3))
    lake.run()
    assert lake.run().counts["messages"] == 0
    assert lake.glue_total() == 0
    lake.put(key(lake.card, 1, 3, first=50))  # a new object in a known partition, within the TTL
    report = lake.run()
    assert report.counts["deleted"] == 1
    # no read (table, versions, location, completeness: all cached); Glue confirms the partition before the ack
    assert lake.calls == Counter({"glue.BatchCreatePartition": 1}), lake.calls


def test_special_bodies_are_counted_and_acknowledged(lake: Lake) -> None:
    card = key(lake.card, 1, 6)
    lake.put(card)  # moto's own event, fully escaped
    real_style = quote(card.key(), safe="/")  # real S3: '/' kept, '+' becomes %2B
    lake.send(s3_event(real_style))
    lake.send(sns_wrapped(s3_event(real_style)))
    lake.send(
        sns_wrapped(
            {
                "Service": "Amazon S3",
                "Event": "s3:TestEvent",
                "Time": "t",
                "Bucket": BUCKET_IN_EVENTS,
                "RequestId": "r",
                "HostId": "h",
            }
        )
    )
    lake.send(s3_event(quote(card.key(), safe="/"), name="ObjectRemoved:Delete"))
    lake.send(s3_event("quarantine/staging/acme/payments/card-authorized/x.parquet"))
    lake.send(s3_event("data/staging/acme/payments/card-authorized/schema_version=1/dt=2026-11-21/hour=06/_SUCCESS"))
    lake.send(s3_event(quote(key(TablePrefix(lake.env.name, "nobody", "x", "unknown-topic"), 1, 1).key(), safe="/")))
    # a table of our database that the catalog lacks: ours only if its crawler exists by convention (it does not)
    lake.send(s3_event(quote(key(TablePrefix(lake.env.name, "acme", "payments", "uncataloged"), 1, 1).key(), safe="/")))
    report = lake.run()
    assert report.counts["ignored_test_event"] == 2
    assert report.counts["ignored_removed_object"] == 1
    assert report.counts["ignored_foreign_key"] == 2
    assert report.counts["ignored_unknown_table"] == 2
    assert report.counts["data_events"] == 5
    assert report.counts["unique_objects"] == 3
    assert report.counts["partitions_added"] == 1
    assert report.counts["deleted"] == report.counts["messages"] == 10
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "06")}
    assert lake.queue_depth() == 0


def test_malformed_bodies_go_to_the_dlq_after_redrive(lake: Lake) -> None:
    lake.sqs.set_queue_attributes(QueueUrl=lake.p.queue_url, Attributes={"VisibilityTimeout": "0"})
    lake.send("this is not json")
    lake.send({"Records": [{"unexpected": True}]})
    lake.put(key(lake.card, 1, 7))
    first = lake.run()
    assert first.counts["malformed"] == 2
    assert first.counts["deleted"] == 2  # the TestEvent and the good object
    assert any("body is not JSON" in e for e in first.errors)
    for _ in range(lake.env.max_receive_count):
        lake.run()
    assert lake.queue_depth() == 0
    assert lake.queue_depth(lake.p.dlq_url) == 2


def test_crawler_mode_table_missing_starts_crawler_once_and_keeps_messages(lake: Lake) -> None:
    lake.sqs.set_queue_attributes(QueueUrl=lake.p.queue_url, Attributes={"VisibilityTimeout": "0"})
    lake.put(key(lake.sensor, 1, 1))
    first = lake.run()
    assert first.counts["crawlers_started"] == 1
    assert first.counts["deferred_until_table_exists"] == 1
    assert first.counts["left_for_retry"] == 1
    second = lake.run()  # the crawler is still running: "already on it"
    assert second.counts["crawlers_already_running"] == 1
    assert second.counts["crawlers_started"] == 0
    assert lake.queue_depth() == 1


def crawled_sensor_table(lake: Lake) -> None:
    """What the crawler would have made: the table, with schema version 1 partitions."""
    lake.glue.create_table(
        DatabaseName=lake.globex,
        TableInput={
            "Name": "sensor_readings",
            "PartitionKeys": [
                {"Name": "schema_version", "Type": "int"},
                {"Name": "dt", "Type": "string"},
                {"Name": "hour", "Type": "string"},
            ],
            "StorageDescriptor": {
                "Columns": [{"Name": "id", "Type": "string"}],
                "Location": f"s3://{lake.env.bucket}/data/{lake.env.name}/globex/iot/sensor-readings/",
            },
        },
    )
    lake.glue.create_partition(
        DatabaseName=lake.globex,
        TableName="sensor_readings",
        PartitionInput={
            "Values": ["1", "2026-11-21", "00"],
            "StorageDescriptor": {"Columns": [{"Name": "id", "Type": "string"}]},
        },
    )


def test_crawler_mode_existing_table_and_partitions(lake: Lake) -> None:
    crawled_sensor_table(lake)
    lake.put(key(lake.sensor, 1, 0))  # partition already exists
    lake.put(key(lake.sensor, 1, 1))
    report = lake.run()
    assert report.counts["partitions_added"] == 1
    assert report.counts["crawlers_started"] == 0
    assert lake.partitions(lake.sensor) == {("1", "2026-11-21", "00"), ("1", "2026-11-21", "01")}
    assert lake.queue_depth() == 0
    lake.put(key(lake.sensor, 2, 1))  # a new schema version re-triggers the crawler
    report = lake.run()
    assert report.counts["crawlers_started"] == 1
    assert report.counts["crawler_reason_new_schema_version"] == 1
    assert [e["type"] for e in report.events] == ["SchemaVersionAdded"]


def test_native_second_schema_version_merges_columns(lake: Lake) -> None:
    lake.put(key(lake.card, 1, 8))
    lake.run()
    lake.put(key(lake.card, 2, 8))
    report = lake.run()
    assert report.counts["tables_updated"] == 1
    assert [e for e in report.events if e["type"] == "SchemaVersionAdded"] == [
        {
            "type": "SchemaVersionAdded",
            "database": lake.acme,
            "table": "card_authorized",
            "schema_version": 2,
            "columns_added": ["merchant_country"],
        }
    ]
    table = lake.glue.get_table(DatabaseName=lake.acme, Name="card_authorized")["Table"]
    assert [c["Name"] for c in table["StorageDescriptor"]["Columns"]][-1] == "merchant_country"
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "08"), ("2", "2026-11-21", "08")}


def test_incompatible_schema_version_is_refused_and_table_kept(lake: Lake) -> None:
    lake.put(key(lake.card, 1, 9))
    lake.run()
    lake.put(key(lake.card, 3, 9), version_body=99)
    report = lake.run()
    assert report.counts["schema_incompatible"] == 1
    assert "column 'amount_cents' changes type from bigint to string" in report.errors[0]
    assert report.counts["left_for_retry"] == 1
    table = lake.glue.get_table(DatabaseName=lake.acme, Name="card_authorized")["Table"]
    assert {c["Name"]: c["Type"] for c in table["StorageDescriptor"]["Columns"]}["amount_cents"] == "bigint"
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "09")}


def test_throttled_glue_calls_are_retried_by_botocore(lake: Lake) -> None:
    throttled: Counter[str] = Counter()

    def throttle(request: Any, **_: Any) -> AWSResponse | None:
        operation = request.headers.get("X-Amz-Target", b"")
        operation = operation.decode() if isinstance(operation, bytes) else operation
        if operation.endswith(("BatchCreatePartition", "GetTable")) and throttled[operation] < 2:
            throttled[operation] += 1
            body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
            return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.1"}, _Raw(body))
        return None

    lake.glue.meta.events.register("before-send.glue", throttle)
    for hour in (10, 11):
        lake.put(key(lake.card, 1, hour))
    report = lake.run()
    assert sum(throttled.values()) == 4
    assert report.counts["partitions_added"] == 2
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "10"), ("1", "2026-11-21", "11")}
    assert lake.queue_depth() == 0


class _Raw:
    def __init__(self, body: bytes) -> None:
        self.body = body

    def stream(self, **_: Any) -> Iterator[bytes]:
        yield self.body

    def read(self, *_: Any) -> bytes:
        return self.body


def test_cli_maintain_once_runs_the_handler(lake: Lake, monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from kafkalake_dev.cli.app import app

    lake.put(key(lake.card, 1, 12))
    catalog, environments = lake.files
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    result = CliRunner().invoke(app, ["maintain", "--once", "--env", lake.env.name, "--catalog", str(catalog)])
    assert result.exit_code == 0, result.output
    assert "partitions_added                 1" in result.output
    assert "tables_created                   1" in result.output
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "12")}


def test_local_invocations_for_two_environments_each_drain_their_own_queue(
    local_stack: Endpoints, tmp_path: Path
) -> None:
    """One process plays two function configurations in turn (as the demo and the tests do): the second must
    not reuse the warm runtime, queue included, of the first, and neither may leave its configuration behind."""

    from kafkalake_dev.local.maintainer import invoke_locally

    lakes = []
    for name in ("a", "b"):
        env, catalog, environments = isolated_env(tmp_path / name)
        lakes.append(Lake(local_stack, env, load_topic_catalog(catalog), (catalog, environments)))
    before = dict(os.environ)
    for lake, hour in zip(lakes, (12, 13), strict=True):
        lake.put(key(lake.card, 1, hour))
        report = invoke_locally(local_stack, lake.env, lake.catalog, native=True)
        assert report["counts"]["partitions_added"] == 1, report
        assert lake.partitions(lake.card) == {("1", "2026-11-21", f"{hour}")}
    assert dict(os.environ) == before


def test_a_table_deleted_while_cached_is_recreated_and_never_stops_another_table(lake: Lake) -> None:
    """BatchGetPartition answers EntityNotFoundException for a table the cache still holds: the table's cached
    entries are dropped, its sync is retried once (native inference creates it again), and the healthy table in
    the same drain is synced too."""
    lake.put(key(lake.card, 1, 8))
    first = lake.run()
    assert first.counts["tables_created"] == 1 and first.errors == []
    lake.glue.delete_table(DatabaseName=lake.acme, Name="card_authorized")  # by hand, while the maintainer caches it
    crawled_sensor_table(lake)
    lake.put(key(lake.card, 1, 9))  # a new partition of the deleted table
    lake.put(key(lake.sensor, 1, 2))  # and one of a healthy table
    second = lake.run()
    assert second.counts["table_cache_dropped"] == 1
    assert second.counts["tables_failed"] == 0 and second.failed_tables == {}
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "09")}, "the table was not created again"
    assert ("1", "2026-11-21", "02") in lake.partitions(lake.sensor)
    assert lake.queue_depth() == 0


def test_throttling_that_outlasts_the_retries_fails_only_its_table(lake: Lake) -> None:
    """One table's BatchCreatePartition stays throttled past botocore's retries: that table is reported and keeps
    its messages; the other table in the same drain is synced."""
    from botocore.config import Config

    few_retries = Config(retries={"mode": "standard", "max_attempts": 2})
    glue = boto3.client(
        "glue", config=few_retries, region_name=lake.endpoints.region, endpoint_url=lake.endpoints.aws_endpoint_url
    )
    lake.clients = dataclasses.replace(lake.clients, glue=glue)

    def throttle_card(request: Any, **_: Any) -> AWSResponse | None:
        target = request.headers.get("X-Amz-Target", b"")
        target = target.decode() if isinstance(target, bytes) else target
        if target.endswith("BatchCreatePartition") and b'"TableName": "card_authorized"' in (request.body or b""):
            body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"}).encode()
            return AWSResponse(request.url, 400, {"Content-Type": "application/x-amz-json-1.1"}, _Raw(body))
        return None

    glue.meta.events.register("before-send.glue", throttle_card)
    crawled_sensor_table(lake)
    lake.put(key(lake.card, 1, 10))
    lake.put(key(lake.sensor, 1, 3))
    report = lake.run()
    assert report.counts["tables_failed"] == 1
    assert list(report.failed_tables) == [f"{lake.acme}.card_authorized"]
    assert "ThrottlingException" in report.failed_tables[f"{lake.acme}.card_authorized"]
    assert lake.partitions(lake.card) == set()
    assert ("1", "2026-11-21", "03") in lake.partitions(lake.sensor)
    assert report.counts["left_for_retry"] >= 1  # the card table's message stays for the next run


def test_s3_events_delivered_through_eventbridge_are_registered(lake: Lake) -> None:
    """S3 → EventBridge → SQS: the body is an EventBridge event whose key is not URL-encoded."""
    data_key = key(lake.card, 1, 11)
    lake.s3.put_object(Bucket=lake.p.bucket, Key=data_key.key(), Body=parquet(1))
    lake.sqs.purge_queue(QueueUrl=lake.p.queue_url)  # only the EventBridge delivery remains
    lake.send(
        {
            "version": "0",
            "id": "e-1",
            "detail-type": "Object Created",
            "source": "aws.s3",
            "account": "123456789012",
            "time": "2026-11-21T11:00:00Z",
            "region": "eu-west-1",
            "resources": [f"arn:aws:s3:::{lake.p.bucket}"],
            "detail": {
                "version": "0",
                "bucket": {"name": lake.p.bucket},
                "object": {"key": data_key.key(), "size": 10, "etag": "e", "sequencer": "0A"},
                "request-id": "r",
                "requester": "123456789012",
                "source-ip-address": "10.0.0.1",
                "reason": "PutObject",
            },
        }
    )
    report = lake.run()
    assert report.counts["data_events"] == 1 and report.counts["partitions_added"] == 1
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "11")}
    assert lake.queue_depth() == 0


def test_dlq_redrive_moves_messages_back_and_the_next_drain_registers_them(
    lake: Lake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events that ended in the DLQ (say, while the table could not be written) go back with `kafkalake dlq
    redrive`. The local endpoint has no message-move task (moto answers 500), so the test asks for the copy."""
    from typer.testing import CliRunner

    from kafkalake_dev.cli.app import app

    keys = [key(lake.card, 1, hour) for hour in (12, 13)]
    for data_key in keys:
        lake.s3.put_object(Bucket=lake.p.bucket, Key=data_key.key(), Body=parquet(1))
    lake.sqs.purge_queue(QueueUrl=lake.p.queue_url)
    for data_key in keys:  # as they would sit in the DLQ after maxReceiveCount
        lake.sqs.send_message(QueueUrl=lake.p.dlq_url, MessageBody=json.dumps(s3_event(quote(data_key.key()))))
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(lake.files[1]))
    result = CliRunner().invoke(app, ["dlq", "redrive", "--env", lake.env.name, "--no-move-task"])
    assert result.exit_code == 0, result.output
    assert "redrive by receive-send-delete: 2 messages" in result.output
    assert lake.queue_depth(lake.p.dlq_url) == 0 and lake.queue_depth() == 2
    report = lake.run()
    assert report.counts["partitions_added"] == 2
    assert lake.partitions(lake.card) == {("1", "2026-11-21", "12"), ("1", "2026-11-21", "13")}
    assert lake.queue_depth() == 0


def test_reconcile_restores_exactly_the_partitions_whose_events_were_lost(
    lake: Lake, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Events deleted from the queue before the maintainer ran: the scheduled reconciler (its Lambda handler, as
    the daily schedule invokes it) adds exactly the missing partitions (found by listing S3 level by level) and
    nothing else, and publishes how many it repaired; `kafkalake reconcile` then finds nothing to do."""
    from typer.testing import CliRunner

    from kafkalake_dev.cli.app import app

    lake.put(key(lake.card, 1, 14))
    lake.run()  # the table and its first partition, from the events
    lost = [key(lake.card, 1, 15), key(lake.card, 2, 15), key(lake.card, 1, 16, day=date(2026, 11, 22))]
    for data_key in lost:
        lake.put(data_key, version_body=1)
    lake.sqs.purge_queue(QueueUrl=lake.p.queue_url)  # their notifications are lost
    lake.s3.put_object(Bucket=lake.p.bucket, Key=f"{lake.card.data_prefix()}schema_version=1/notes/x.txt", Body=b"")
    before = lake.partitions(lake.card)
    catalog, environments = lake.files
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    capsys.readouterr()
    logged = lambda_log().stat().st_size if lambda_log().exists() else 0
    first = invoke_reconciler_locally(lake.endpoints, lake.env, lake.catalog)
    restored = {tuple(k.partition.values()) for k in lost}
    assert lake.partitions(lake.card) == before | restored
    assert first["partitions_repaired"] == 3 and first["failed"] == {}
    assert sorted(first["repaired"][f"{lake.acme}.card_authorized"]) == sorted("/".join(v) for v in restored)
    assert '"CloudWatchMetrics"' not in capsys.readouterr().out  # the metrics go to the Lambdas' log file
    with lambda_log().open() as log:
        log.seek(logged)
        [emf] = [json.loads(line) for line in log.read().splitlines() if '"ReconcilePartitionsRepaired"' in line]
    assert emf["ReconcilePartitionsRepaired"] == [3.0] and emf["service"] == "kafkalake-reconciler"
    second = CliRunner().invoke(app, ["reconcile", "--env", lake.env.name, "--catalog", str(catalog)])
    assert second.exit_code == 0 and "0 partitions added, 0 with no objects" in second.output
    assert "no table in Glue yet" in second.output  # the crawler-mode tables nobody created
    assert lake.partitions(lake.card) == before | restored
    lake.glue.create_partition(  # a partition whose objects were deleted by hand
        DatabaseName=lake.acme,
        TableName="card_authorized",
        PartitionInput={
            "Values": ["1", "2026-11-20", "01"],
            "StorageDescriptor": {"Location": f"s3://{lake.p.bucket}/{lake.card.data_prefix()}gone/"},
        },
    )
    third = CliRunner().invoke(app, ["reconcile", "--env", lake.env.name, "--catalog", str(catalog)])
    assert "EMPTY 1/2026-11-20/01" in third.output


def test_a_late_row_is_visible_after_one_maintainer_and_compactor_cycle(lake: Lake, spark: SparkSession) -> None:
    """A file lands in a partition after its compaction: the next drain records it (marker, LateData event), the
    next compactor run takes that partition first, and readers then see the late rows once."""
    topic = lake.catalog.get("card-authorized", lake.env.name)
    hour = Partition(1, date(2026, 11, 20), 7)
    endpoints = dataclasses.replace(lake.endpoints, bucket=lake.p.bucket)

    def put(first: int) -> str:
        data_key = DataKey(topic.prefix, hour, 0, first, first + 9).key()
        lake.s3.put_object(Bucket=lake.p.bucket, Key=data_key, Body=small_file(0, first, 10))
        return data_key

    for first in range(0, 120, 10):
        put(first)
    assert lake.run().counts["partitions_added"] == 1
    compactor = Compactor(spark, endpoints, [topic], Knobs(min_input_files=10), now=lambda: NOW)
    [compacted] = compactor.run()
    assert (compacted.action, compacted.late, compacted.rows) == ("compacted", False, 120)

    def visible() -> tuple[int, int]:
        location = lake.glue.get_partition(
            DatabaseName=topic.database, TableName=topic.table, PartitionValues=hour.values()
        )["Partition"]["StorageDescriptor"]["Location"]
        frame = spark.read.parquet(location.replace("s3://", "s3a://")).select("_kafka_partition", "_kafka_offset")
        return frame.count(), frame.distinct().count()

    late_key = put(120)
    assert visible() == (120, 120)  # invisible until the compactor's next run
    lake.state = State(ttl=600)  # a later drain: the cache that held the partition's raw location has expired
    report = lake.run()
    assert report.counts["late_objects"] == 1
    assert report.counts["ignored_compaction_output"] >= 1  # the compactor's files: no table, no partition
    [event] = [e for e in report.events if e["type"] == "LateData"]
    assert event["objects"] == [late_key] and event["table"] == topic.table
    marker = topic.prefix.late_data_key(hour)
    assert json.loads(lake.s3.get_object(Bucket=lake.p.bucket, Key=marker)["Body"].read())["objects"] == [late_key]
    [again] = compactor.run()
    assert (again.action, again.late, again.rows, again.files_before) == ("compacted", True, 130, 2)
    assert visible() == (130, 130)  # the late rows once, nothing twice
    assert marker not in {o["Key"] for o in lake.s3.list_objects_v2(Bucket=lake.p.bucket).get("Contents", [])}
    assert lake.run().counts["late_objects"] == 0  # the drain has nothing new to record


def lf_tags(pairs: list[dict[str, Any]]) -> dict[str, list[str]]:
    return {p["TagKey"]: p["TagValues"] for p in pairs}


def test_the_maintainer_tags_the_tables_it_creates_and_their_personal_columns(
    local_stack: Endpoints, tmp_path: Path
) -> None:
    """A native topic whose catalog entry names a nested personal field: the table the maintainer creates carries
    its sensitivity, the field's top-level column is tagged personal, the database keeps the provisioned tags."""
    env, catalog, environments = isolated_env(tmp_path)
    [card_file] = catalog.glob(f"acme/payments/{env.name}/card-authorized.yaml")
    card_file.write_text(card_file.read_text() + "pii: {authorization.issuer: hmac}\n")
    lake = Lake(local_stack, env, load_topic_catalog(catalog), (catalog, environments))
    lake.put(key(lake.card, 1, 3))
    report = lake.run()
    assert report.errors == [] and report.counts["tables_created"] == report.counts["tables_tagged"] == 1

    lakeformation = make_client(local_stack, "lakeformation")
    table = {"DatabaseName": lake.acme, "Name": "card_authorized"}
    tagged = lakeformation.get_resource_lf_tags(Resource={"Table": table})
    assert lf_tags(tagged["LFTagsOnTable"]) == {"sensitivity": ["confidential"], "pii": ["false"]}
    columns = {"TableWithColumns": {**table, "ColumnNames": ["id", "amount_cents", "authorization"]}}
    on_columns = lakeformation.get_resource_lf_tags(Resource=columns)["LFTagsOnColumns"]
    assert {c["Name"]: lf_tags(c["LFTags"]) for c in on_columns} == {"authorization": {"pii": ["true"]}}
    database = lakeformation.get_resource_lf_tags(Resource={"Database": {"Name": lake.acme}})
    assert lf_tags(database["LFTagOnDatabase"]) == {"sensitivity": ["confidential"], "pii": ["true"]}

    lake.put(key(lake.card, 1, 4))  # a known table within the cache period: not tagged again
    assert lake.run().counts["tables_tagged"] == 0
