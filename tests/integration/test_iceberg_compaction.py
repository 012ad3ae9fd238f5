"""The compactor on an Iceberg topic (``spark_jobs.compaction.table_maintenance``) on the local stack: the closed
hours' small files rewritten into one commit, the old snapshots expired and orphans removed in the same run, every
reader (Spark through the Iceberg catalog, pyiceberg's scan) reading exactly the same rows before, between the
rewrite and the expiry (the current snapshot and the one pinned before the rewrite), and after; the inventory shows
the rewritten hours and their files before, once the history is gone; the archiver goes on appending after it. The
archiver and the compactor run one after the other: moto's Glue ignores ``VersionId``."""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.aws import list_objects, make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import PARTITION_FIELD, table_catalog
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.registry import RegistryClient
from kafkalake.s3_location import parse_s3_uri
from kafkalake.topic_catalog import Topic
from kafkalake_dev.checks.inventory import iceberg_inventory
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import produce_topic
from spark_jobs import iceberg_maintenance
from spark_jobs.compaction import table_maintenance
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.selection import closed_until
from spark_jobs.compaction.table_maintenance import TableCompaction
from spark_jobs.compaction.work import Action, Knobs, table_name
from spark_jobs.iceberg_maintenance import Expired
from tests.integration.archive_helpers import (
    OFFSET_COLUMNS,
    archive_topic,
    audit_problems,
    committed_and_end,
    expected_rows,
    iceberg_topic,
    table_rows,
)

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-iceberg-compaction-tests"
KNOBS = Knobs(min_input_files=2, snapshot_retention=timedelta(0), orphan_age=timedelta(0))
"""Every snapshot but the current one expires, and every orphan goes, in the run itself (by default: hours, a day)."""


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


@dataclass(frozen=True)
class Read:
    """One read of the table by each reader: Spark's rows (as JSON), and the (Kafka partition, offset) of each row as
    Spark and as pyiceberg read them, sorted with repeats kept."""

    rows: list[str]
    by_spark: list[tuple[int, int]]
    by_pyiceberg: list[tuple[int, int]]


def read(spark: SparkSession, endpoints: Endpoints, topic: Topic, snapshot: int | None = None) -> Read:
    """The table's current snapshot, or ``snapshot``, read by Spark and by pyiceberg."""
    rows = table_rows(spark, endpoints, topic)
    if snapshot is not None:
        rows = spark.sql(f"SELECT * FROM {ICEBERG_CATALOG}.{table_name(topic)} VERSION AS OF {snapshot}")
    as_json = sorted(r[0] for r in rows.select(F.to_json(F.struct(*sorted(rows.columns)))).collect())
    by_spark = sorted((r[0], r[1]) for r in rows.select(*OFFSET_COLUMNS).collect())
    table = table_catalog(endpoints).load_table((topic.database, topic.table))
    scanned = table.scan(snapshot_id=snapshot, selected_fields=OFFSET_COLUMNS).to_arrow()
    by_pyiceberg = sorted(zip(*(scanned.column(c).to_pylist() for c in OFFSET_COLUMNS), strict=True))
    return Read(as_json, by_spark, by_pyiceberg)


def data_files(spark: SparkSession, topic: Topic) -> dict[str, int]:
    """The current snapshot's data files (URI → hour: hours since the epoch)."""
    name = f"{ICEBERG_CATALOG}.{table_name(topic)}"
    spark.sql(f"REFRESH TABLE {name}")
    query = f"SELECT file_path, partition.{PARTITION_FIELD} FROM {name}.data_files"
    return {r[0]: r[1] for r in spark.sql(query).collect()}


def produce_around_now(endpoints: Endpoints, topic: Topic, records: int) -> Counter[str]:
    """``records`` whose business times spread over the four hours before this one and this one (and a few a day
    earlier): with the default safety delay, the first two of those hours are closed, the other three open."""
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=4)
    registry = RegistryClient(endpoints.schema_registry_url)
    return produce_topic(topic, endpoints.kafka_bootstrap, registry, records, start=start, hours=5).counts


def archive_all(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> int:
    """Plans of the topic until it is caught up; how many had records."""
    plans = 0
    while archive_topic(spark, endpoints, topic, say=lambda _: None).read:
        plans += 1
    return plans


def broken_table(endpoints: Endpoints) -> Topic:
    """An Iceberg topic whose Glue table names a metadata file that is not there: it cannot be loaded."""
    topic = iceberg_topic(endpoints, "shipment-events")
    nowhere = f"s3://{endpoints.bucket}/{topic.prefix.data_prefix()}metadata/00000-{uuid.uuid4()}.metadata.json"
    parameters = {"table_type": "ICEBERG", "metadata_location": nowhere}
    table = {"Name": topic.table, "TableType": "EXTERNAL_TABLE", "Parameters": parameters}
    make_client(endpoints, "glue").create_table(DatabaseName=topic.database, TableInput=table)
    return topic


def test_closed_hours_are_rewritten_in_one_commit_old_files_go_and_every_reader_agrees_throughout(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = iceberg_topic(endpoints, "card-authorized", max_records_per_file=10, max_records_per_run=300)
    counts = produce_around_now(endpoints, topic, 600)
    assert archive_all(spark, endpoints, topic) == 2
    before = read(spark, endpoints, topic)
    assert len(before.by_spark) == expected_rows(topic, counts)
    assert before.by_pyiceberg == before.by_spark == sorted(set(before.by_spark))
    files_before = data_files(spark, topic)
    pinned = table_catalog(endpoints).load_table((topic.database, topic.table)).metadata.current_snapshot_id
    s3 = make_client(endpoints, "s3")
    orphan = f"{topic.prefix.data_prefix()}data/orphan-{uuid.uuid4().hex}.parquet"
    s3.put_object(Bucket=endpoints.bucket, Key=orphan, Body=b"written, never committed")
    broken = broken_table(endpoints)
    now = datetime.now(UTC) + timedelta(seconds=2)  # after every commit so far and the orphan's write
    closed = int(closed_until(KNOBS, now).timestamp()) // 3600  # hours before this one are closed

    between: dict[str, Read] = {}
    expire = iceberg_maintenance.expire_snapshots  # the function table_maintenance calls

    def reading_first(session: SparkSession, table: str, older_than: datetime) -> Expired:
        between["current"] = read(spark, endpoints, topic)
        between["pinned"] = read(spark, endpoints, topic, snapshot=pinned)
        return expire(session, table, older_than)

    monkeypatch.setattr(table_maintenance, "expire_snapshots", reading_first)
    results = {r.table: r for r in Compactor(spark, endpoints, [topic, broken], KNOBS, now=lambda: now).run()}

    result = results[table_name(topic)]
    assert isinstance(result, TableCompaction) and result.action == Action.COMPACTED, result
    assert results[table_name(broken)].action == Action.FAILED and results[table_name(broken)].reason
    files_after = data_files(spark, topic)
    per_hour_before = Counter(files_before.values())
    per_hour_after = Counter(files_after.values())
    due = {hour for hour, files in per_hour_before.items() if hour < closed and files >= KNOBS.min_input_files}
    assert len(due) >= 2  # the two closed hours of this morning at least, each with many small files
    assert all(per_hour_after[hour] <= 1 for hour in due)
    open_before, open_after = ({f: h for f, h in files.items() if h >= closed} for files in (files_before, files_after))
    assert open_before and open_before == open_after  # the open hours' files were not rewritten
    assert (result.files_before, result.files_after) == (len(files_before), len(files_after))
    assert result.rewritten_files == sum(per_hour_before[hour] for hour in due)
    assert result.snapshot_before == pinned and result.snapshot_after not in (None, pinned)

    assert between["current"] == before  # the rewrite's snapshot, its replaced files still there
    assert between["pinned"] == before  # a query that started before the rewrite
    after = read(spark, endpoints, topic)
    assert after == before
    name = f"{ICEBERG_CATALOG}.{table_name(topic)}"
    assert [r[0] for r in spark.sql(f"SELECT snapshot_id FROM {name}.snapshots").collect()] == [result.snapshot_after]
    current = set(list_objects(s3, endpoints.bucket, topic.prefix.data_prefix()))
    replaced = {parse_s3_uri(f).key for f, hour in files_before.items() if hour in due}
    assert not replaced & current  # deleted by the expiry
    assert {parse_s3_uri(f).key for f in files_after} <= current
    assert orphan not in current and result.orphan_files >= 1 and result.expired_files >= len(replaced)
    inventory = iceberg_inventory(s3, endpoints.bucket, table_catalog(endpoints), topic)  # the history has expired
    hours = {
        int(datetime.fromisoformat(f"{p.values[1]}T{p.values[2]}:00+00:00").timestamp()) // 3600: p
        for p in inventory.partitions
    }
    assert {h for h, p in hours.items() if p.compacted} == due
    assert all((p.files_before, p.files) == (per_hour_before[h], per_hour_after[h]) for h, p in hours.items())
    assert inventory.files_before == len(files_before) > inventory.files == len(files_after)

    more = produce_around_now(endpoints, topic, 900)  # the archiver goes on after the compaction
    assert archive_all(spark, endpoints, topic) == 3
    final = read(spark, endpoints, topic)
    assert len(final.by_spark) == expected_rows(topic, counts) + expected_rows(topic, more)
    assert final.by_pyiceberg == final.by_spark == sorted(set(final.by_spark))
    assert set(before.by_spark) < set(final.by_spark)
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []  # the expired snapshots' plans are accounted for by their receipts
