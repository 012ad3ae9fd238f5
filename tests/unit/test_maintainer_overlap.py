"""Overlapping drains and Glue changed behind the maintainer's caches, against in-process AWS (moto).

Two drains overlap deterministically: drain A's Glue client runs drain B to its end just before one of A's own
calls (``Interleaved``), which is the moment a real overlap makes A's earlier read stale. moto 5.2.5 accepts
``UpdateTable``'s ``VersionId`` and ignores it; ``VersionLocked`` answers a stale one as Glue does.
"""

from __future__ import annotations

import dataclasses
import io
import json
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from urllib.parse import quote

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from botocore.exceptions import ClientError
from moto import mock_aws

from kafkalake.iceberg import plan_summary
from kafkalake.layout import DataKey, Partition, TablePrefix
from kafkalake.naming import TableInference, crawler_name_for, default_names
from kafkalake.topic_spec import TableFormat
from kafkalake_dev.local.sandbox import count_calls
from lambdas.maintainer.dal import Clients, State
from lambdas.maintainer.logic import DrainConfig, drain
from lambdas.maintainer.report import Report
from lambdas.maintainer.sync import MERGE_ATTEMPTS
from lambdas.tables import LakeTable
from tests.unit.test_maintainer_units import record

REGION, BUCKET, DATABASE = "eu-west-1", "lake", "acme_staging"
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
CARD = TablePrefix("staging", "acme", "payments", "card-authorized")
TABLE = LakeTable(
    env="staging",
    company="acme",
    domain="payments",
    topic="card-authorized",
    database=DATABASE,
    table="card_authorized",
    inference=TableInference.NATIVE,
    crawler_name=crawler_name_for(DATABASE, "card_authorized"),
)
COLUMNS = {1: ["id", "amount"], 2: ["id", "amount", "merchant_country"], 3: ["id", "amount", "channel"]}
"""Each schema version's columns: versions 2 and 3 each add one of their own."""


def key(version: int, hour: int, first: int = 0) -> DataKey:
    return DataKey(CARD, Partition(version, date(2026, 11, 21), hour), 0, first, first + 9)


def footer(version: int) -> bytes:
    out = io.BytesIO()
    pq.write_table(pa.table({name: pa.array(["x"]) for name in COLUMNS[version]}), out)
    return out.getvalue()


def conflict() -> ClientError:
    error = {"Code": "ConcurrentModificationException", "Message": "Update table failed due to concurrent modification"}
    return ClientError({"Error": error}, "UpdateTable")


class VersionLocked:
    """A Glue client whose ``UpdateTable`` refuses a ``VersionId`` that is not the table's current one, as Glue does."""

    def __init__(self, glue: Any) -> None:
        self._glue = glue

    def update_table(self, **kwargs: Any) -> Any:
        name = kwargs["TableInput"]["Name"]
        current = self._glue.get_table(DatabaseName=kwargs["DatabaseName"], Name=name)["Table"]["VersionId"]
        if "VersionId" in kwargs and kwargs["VersionId"] != current:
            raise conflict()
        return self._glue.update_table(**kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._glue, name)


@dataclass
class Interleaved:
    """A Glue client that runs ``before`` once, just before its first ``operation`` call goes out."""

    glue: Any
    operation: str
    before: Callable[[], object]
    ran: bool = field(default=False, init=False)

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.glue, name)
        if name != self.operation or self.ran:
            return call

        def interleaved(**kwargs: Any) -> Any:
            self.ran = True
            self.before()
            return call(**kwargs)

        return interleaved


@dataclass
class Lake:
    s3: Any
    sqs: Any
    glue: Any
    events: Any
    lakeformation: Any
    settings: DrainConfig
    calls: Counter[str] = field(default_factory=Counter)

    def put(self, data_key: DataKey, version: int | None = None) -> None:
        """The object, and its notification as S3 sends it (key URL-encoded)."""
        body = footer(version or data_key.partition.schema_version)
        self.s3.put_object(Bucket=BUCKET, Key=data_key.key(), Body=body)
        message = json.dumps({"Records": [record(quote(data_key.key(), safe="/"))]})
        self.sqs.send_message(QueueUrl=self.settings.queue_url, MessageBody=message)

    def drain(self, state: State, glue: Any = None) -> Report:
        """One drain of one execution environment (``state``: its warm caches)."""
        clients = Clients(self.sqs, glue or self.glue, self.s3, self.events, self.lakeformation)
        return drain(self.settings, clients, state, remaining_ms=lambda: 600_000, now=lambda: NOW)

    def table(self) -> dict[str, Any]:
        table: dict[str, Any] = self.glue.get_table(DatabaseName=DATABASE, Name=TABLE.table)["Table"]
        return table

    def partitions(self) -> set[str]:
        found = self.glue.get_partitions(DatabaseName=DATABASE, TableName=TABLE.table)["Partitions"]
        return {p["Values"][2] for p in found}

    def queue_depth(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.settings.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())


@pytest.fixture
def lake() -> Iterator[Lake]:
    with mock_aws():
        services = ("s3", "sqs", "glue", "events", "lakeformation")
        s3, sqs, glue, events, lakeformation = (boto3.client(s, region_name=REGION) for s in services)
        s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
        glue.create_database(DatabaseInput={"Name": DATABASE})
        events.create_event_bus(Name="lake-events")
        queue_url = sqs.create_queue(QueueName="notifications")["QueueUrl"]
        settings = DrainConfig(
            queue_url=queue_url, bucket=BUCKET, event_bus="lake-events", env="staging", tables=[TABLE], wait_seconds=0
        )
        found = Lake(s3, sqs, glue, events, lakeformation, settings)
        count_calls(glue, found.calls)
        yield found


def test_two_drains_merging_different_schema_versions_at_once_end_with_the_union(lake: Lake) -> None:
    """Drain B merges version 3 between drain A's read of the table and A's update for version 2: A's update is
    refused (stale VersionId), A reads the table again and merges version 2 into B's result."""
    lake.put(key(1, 3))
    lake.drain(State(600))
    drain_a, drain_b = State(600), State(600)
    reports: list[Report] = []

    def overlapping_drain() -> None:
        lake.put(key(3, 5))
        reports.append(lake.drain(drain_b, VersionLocked(lake.glue)))

    lake.put(key(2, 4))
    a = lake.drain(drain_a, Interleaved(VersionLocked(lake.glue), "update_table", overlapping_drain))
    [b] = reports
    table = lake.table()
    assert [c["Name"] for c in table["StorageDescriptor"]["Columns"]] == ["id", "amount", "channel", "merchant_country"]
    assert table["Parameters"]["kafkalake.schema_versions"] == "1,2,3"
    assert a.counts["table_update_conflicts"] == 1 and a.counts["tables_updated"] == 1
    assert b.counts["table_update_conflicts"] == 0 and b.counts["tables_updated"] == 1
    assert [e["columns_added"] for e in a.events if e["type"] == "SchemaVersionAdded"] == [["merchant_country"]]
    assert [e["columns_added"] for e in b.events if e["type"] == "SchemaVersionAdded"] == [["channel"]]
    assert a.errors == b.errors == [] and lake.partitions() == {"03", "04", "05"} and lake.queue_depth() == 0


def test_a_merge_that_keeps_losing_the_race_fails_its_table_with_a_clear_message(lake: Lake) -> None:
    lake.put(key(1, 3))
    lake.drain(State(600))

    class AlwaysChanged(VersionLocked):
        def update_table(self, **kwargs: Any) -> Any:
            raise conflict()

    lake.put(key(2, 4))
    report = lake.drain(State(600), AlwaysChanged(lake.glue))
    assert report.counts["table_update_conflicts"] == MERGE_ATTEMPTS
    assert report.failed_tables == {
        f"{DATABASE}.card_authorized": f"SchemaMergeConflict: schema_version=2 not merged: the table changed between "
        f"reading and updating it {MERGE_ATTEMPTS} times in a row (other drains or writers updating it at the same "
        "time)"
    }
    assert report.counts["left_for_retry"] == 1 and lake.table()["Parameters"]["kafkalake.schema_versions"] == "1"


def test_a_partition_deleted_in_glue_within_the_cache_ttl_is_created_again_by_the_next_event(lake: Lake) -> None:
    warm = State(600)
    lake.put(key(1, 3))
    lake.drain(warm)
    hour = key(1, 3).partition.values()
    lake.glue.delete_partition(DatabaseName=DATABASE, TableName=TABLE.table, PartitionValues=hour)
    lake.put(key(1, 3, first=10))  # a new object in the partition the warm cache holds
    lake.calls.clear()
    report = lake.drain(warm)
    assert lake.calls == Counter({"glue.BatchCreatePartition": 1}), "the cache saves every read, never the check"
    assert lake.partitions() == {"03"}
    assert report.counts["partitions_added"] == 1 and report.counts["deleted"] == 1


def test_a_table_deleted_and_created_again_within_the_cache_ttl_gets_its_partitions_back(lake: Lake) -> None:
    """Another execution environment creates the table again from another partition's event; this one's warm
    caches still hold the old table's partitions."""
    warm = State(600)
    lake.put(key(1, 3))
    lake.drain(warm)
    lake.glue.delete_table(DatabaseName=DATABASE, Name=TABLE.table)
    lake.put(key(1, 4))
    assert lake.drain(State(600)).counts["tables_created"] == 1
    lake.put(key(1, 3, first=10))
    report = lake.drain(warm)
    assert lake.partitions() == {"03", "04"}
    assert report.counts["partitions_added"] == 1 and report.counts["deleted"] == 1


def test_overlapping_drains_publish_each_completeness_event_once(lake: Lake) -> None:
    """Both drains find hours 03 and 04 not yet complete and both mark them (Glue's partition update has no lock):
    the drain whose claim is written first publishes, the other counts them as claimed elsewhere."""
    published: Counter[str] = Counter()

    def count_events(params: dict[str, Any], **_: Any) -> None:
        published.update(e["DetailType"] for e in params["Entries"])

    lake.events.meta.events.register("provide-client-params.eventbridge.PutEvents", count_events)
    reports: list[Report] = []

    def overlapping_drain() -> None:
        for hour in (3, 4, 5):
            lake.put(key(1, hour, first=10))
        reports.append(lake.drain(State(600)))

    for hour in (3, 4, 5):
        lake.put(key(1, hour))
    a = lake.drain(State(600), Interleaved(lake.glue, "batch_update_partition", overlapping_drain))
    [b] = reports
    assert a.counts["partitions_completed"] == b.counts["partitions_completed"] == 2
    completed = [e["partition"]["hour"] for r in (a, b) for e in r.events if e["type"] == "PartitionComplete"]
    assert sorted(completed) == ["03", "04"]
    assert a.counts["completeness_claimed_elsewhere"] == 2
    assert published["PartitionComplete"] == 2
    claim = lake.s3.get_object(Bucket=BUCKET, Key=CARD.completeness_claim_key(key(1, 3).partition))
    assert json.loads(claim["Body"].read())["partition"] == ["1", "2026-11-21", "03"]


def test_a_crawler_is_looked_up_only_in_our_databases(lake: Lake) -> None:
    """A table outside the catalog is ours when its crawler exists by convention, but only in a database the stack
    deploys: the role may look up only those crawlers (elsewhere AWS answers AccessDenied, not EntityNotFound)."""
    outside = TablePrefix("staging", "nobody", "x", "unknown-topic")
    ours = TablePrefix("staging", "acme", "payments", "crawled-elsewhere")
    for prefix in (outside, ours):
        database, table = default_names(prefix)
        lake.glue.create_crawler(
            Name=crawler_name_for(database, table),
            Role="arn:aws:iam::123456789012:role/crawler",
            DatabaseName=database,
            Targets={"S3Targets": [{"Path": f"s3://{BUCKET}/{prefix.data_prefix()}"}]},
        )
    assert default_names(ours)[0] == DATABASE
    lake.calls.clear()
    lake.put(DataKey(outside, Partition(1, date(2026, 11, 21), 3), 0, 0, 9))
    report = lake.drain(State(600))
    assert report.counts["ignored_unknown_table"] == 1 and report.counts["deleted"] == 1
    assert "glue.GetCrawler" not in lake.calls
    lake.put(DataKey(ours, Partition(1, date(2026, 11, 21), 3), 0, 0, 9))
    lake.drain(State(600))
    assert lake.calls["glue.GetCrawler"] == 1, "a crawler by convention in our database is looked up (a control)"


def test_a_key_of_another_environment_is_ignored_and_its_crawler_never_started(lake: Lake) -> None:
    """Today's by-convention lookup would find production's crawler and start it from a staging maintainer."""
    production = TablePrefix("production", "acme", "payments", "card-authorized")
    database, table = default_names(production)
    crawler = crawler_name_for(database, table)
    lake.glue.create_crawler(
        Name=crawler,
        Role="arn:aws:iam::123456789012:role/crawler",
        DatabaseName=database,
        Targets={"S3Targets": [{"Path": f"s3://{BUCKET}/{production.data_prefix()}"}]},
    )
    lake.calls.clear()
    lake.put(DataKey(production, Partition(1, date(2026, 11, 21), 3), 0, 0, 9))
    report = lake.drain(State(600))
    assert report.counts["ignored_other_environment"] == 1 and report.counts["deleted"] == 1
    assert report.counts["data_events"] == 0 and lake.queue_depth() == 0
    assert "belongs to environment 'production'; this maintainer serves 'staging'" in report.foreign_keys[0]
    assert not [call for call in lake.calls if call.startswith("glue.")]
    assert lake.glue.get_crawler(Name=crawler)["Crawler"]["State"] == "READY"


def iceberg_metadata(*snapshots: tuple[int, int | None, dict[str, str]], current: int) -> bytes:
    """An Iceberg table metadata file's JSON with ``(id, parent, summary)`` snapshots."""
    listed = [
        {"snapshot-id": i, "parent-snapshot-id": parent, "summary": {"operation": "append", **summary}}
        for i, parent, summary in snapshots
    ]
    return json.dumps({"format-version": 2, "current-snapshot-id": current, "snapshots": listed}).encode()


def plan(name: str, partitions: list[Partition], newest: datetime) -> dict[str, str]:
    return plan_summary(name, "card-authorized", {0: (0, 9)}, partitions, newest)


def test_an_iceberg_tables_objects_add_no_partition_and_start_no_crawler(lake: Lake) -> None:
    """The archiver makes and commits an Iceberg table: its data objects are acknowledged (after the table exists),
    never turned into Glue partitions; Iceberg's own files are no foreign key. Freshness and complete hours come
    from the current snapshots' summaries: a rolled-back snapshot's hours and times count for nothing."""
    iceberg = TABLE.model_copy(update={"table_format": TableFormat.ICEBERG})
    lake.settings = dataclasses.replace(lake.settings, tables=[iceberg])
    lake.put(key(1, 7))
    waiting = lake.drain(State(600))
    assert waiting.counts["deferred_until_table_exists"] == 1 and lake.queue_depth() == 1, "no table yet: it waits"
    assert "glue.CreateTable" not in lake.calls and "glue.StartCrawler" not in lake.calls
    lake.sqs.purge_queue(QueueUrl=lake.settings.queue_url)  # the kept message, delivered again after its timeout
    lake.put(key(1, 7))
    columns = [{"Name": c, "Type": "string"} for c in COLUMNS[1]]
    metadata_key = f"{CARD.data_prefix()}metadata/00002-abc.metadata.json"
    lake.glue.create_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": TABLE.table,
            "TableType": "EXTERNAL_TABLE",
            "Parameters": {"table_type": "ICEBERG", "metadata_location": f"s3://{BUCKET}/{metadata_key}"},
            "StorageDescriptor": {"Columns": columns, "Location": TABLE.location(BUCKET)},
        },
    )
    day = date(2026, 11, 21)
    hours = [Partition(1, day, 5), Partition(1, day, 6), Partition(1, day, 7)]
    metadata = iceberg_metadata(
        (1, None, plan("p1", hours[:2], NOW - timedelta(hours=5))),
        (2, 1, plan("p2", hours[2:], NOW - timedelta(minutes=3))),
        (3, 1, plan("rolled-back", [Partition(1, day, 11)], NOW - timedelta(minutes=1))),
        current=2,
    )
    lake.s3.put_object(Bucket=BUCKET, Key=metadata_key, Body=metadata)
    rewritten = f"{CARD.data_prefix()}data/_business_time_hour=2026-11-21-07/00000-0-abc.parquet"
    lake.s3.put_object(Bucket=BUCKET, Key=rewritten, Body=footer(1))
    lake.sqs.send_message(
        QueueUrl=lake.settings.queue_url, MessageBody=json.dumps({"Records": [record(quote(rewritten, safe="/"))]})
    )
    lake.s3.put_object(Bucket=BUCKET, Key=key(1, 7).key(), Body=footer(1))
    report = lake.drain(State(600))
    assert report.counts["iceberg_objects"] == 1 and report.counts["ignored_iceberg_file"] == 1, report.as_dict()
    assert report.counts["ignored_foreign_key"] == 0
    assert lake.partitions() == set() and "glue.BatchCreatePartition" not in lake.calls
    assert "glue.StartCrawler" not in lake.calls
    assert lake.queue_depth() == 0
    assert report.data_age_seconds == {TABLE.name: 180.0}, "the newest time of the current line's snapshots"
    complete = [e["partition"] for e in report.events if e["type"] == "PartitionComplete"]
    assert sorted(p["hour"] for p in complete) == ["05", "06"], report.events  # 07 is open, 11 was rolled back

    lake.put(key(1, 8))  # a later drain finds the same hours complete: announced once
    again = lake.drain(State(600))
    assert not [e for e in again.events if e["type"] == "PartitionComplete"], again.events
    assert again.counts["completeness_claimed_elsewhere"] == 2, again.as_dict()


def test_an_iceberg_tables_commit_whose_metadata_cannot_be_read_stays_queued(lake: Lake) -> None:
    """A commit's metadata event for a table whose metadata file is gone fails that table alone: its message stays
    for the next run, with the reason."""
    iceberg = TABLE.model_copy(update={"table_format": TableFormat.ICEBERG})
    lake.settings = dataclasses.replace(lake.settings, tables=[iceberg])
    metadata_key = f"{CARD.data_prefix()}metadata/00001-gone.metadata.json"
    lake.glue.create_table(
        DatabaseName=DATABASE,
        TableInput={
            "Name": TABLE.table,
            "Parameters": {"table_type": "ICEBERG", "metadata_location": f"s3://{BUCKET}/{metadata_key}"},
            "StorageDescriptor": {"Columns": [], "Location": TABLE.location(BUCKET)},
        },
    )
    lake.sqs.send_message(
        QueueUrl=lake.settings.queue_url, MessageBody=json.dumps({"Records": [record(quote(metadata_key, safe="/"))]})
    )
    report = lake.drain(State(600))
    assert report.counts["tables_failed"] == 1 and "NoSuchKey" in report.failed_tables[TABLE.name], report.as_dict()
    assert lake.queue_depth() == 1
