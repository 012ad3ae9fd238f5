"""An Iceberg topic (``table_format: iceberg``) on the local stack: each plan appended to its table in one commit
that names the plan and its offsets, exactly once across crashes and stale runs, and every reader (Spark through
the Iceberg catalog, pyiceberg's scan) reading the same rows."""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.iceberg import (
    METADATA_LOCATION_PARAMETER,
    OFFSETS_PROPERTY,
    PLAN_PROPERTY,
    committed_data,
    current_summaries,
    table_catalog,
    table_location,
)
from kafkalake.jobspec import ICEBERG_CATALOG
from kafkalake.layout import Partition
from kafkalake.registry import RegistryClient
from kafkalake.topic_catalog import Topic
from kafkalake_dev.checks.interop import Read, checks_for
from kafkalake_dev.checks.inventory import iceberg_inventory
from kafkalake_dev.checks.readers import iceberg_spark_read, pyiceberg_read
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import produce_topic
from lambdas.maintainer.dal import LakeObjects
from spark_jobs.archiver import table_commit, topic_run
from spark_jobs.archiver.table_commit import append_plan
from tests.crashes import InjectedCrash, crash
from tests.integration.archive_helpers import (
    OFFSET_COLUMNS,
    START,
    archive_topic,
    audit_problems,
    committed_and_end,
    expected_rows,
    iceberg_topic,
    produce,
    table_rows,
)

pytestmark = pytest.mark.stack
BUCKET = "kafkalake-iceberg-tests"


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, BUCKET)


def plan_snapshots(endpoints: Endpoints, topic: Topic) -> list[dict[str, str]]:
    table = table_catalog(endpoints).load_table((topic.database, topic.table))
    summaries = [dict(s.summary.additional_properties) for s in table.snapshots() if s.summary]
    return [s for s in summaries if PLAN_PROPERTY in s]


def test_a_plan_is_one_commit_naming_its_offsets_and_every_reader_agrees(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = iceberg_topic(endpoints, "card-authorized")
    counts = produce(endpoints, topic, 1500)
    summary = archive_topic(spark, endpoints, topic)
    assert summary.read == 1500 and summary.balanced()

    rows = table_rows(spark, endpoints, topic)
    assert rows.count() == expected_rows(topic, counts)
    assert rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
    versions = {r["schema_version"]: r["count"] for r in rows.groupBy("schema_version").count().collect()}
    assert versions == {int(k.rsplit("_", 1)[1]): v for k, v in counts.items() if k.startswith("schema_version")}
    scanned = table_catalog(endpoints).load_table((topic.database, topic.table)).scan().to_arrow()
    assert scanned.num_rows == rows.count()
    by_spark = {(r["_kafka_partition"], r["_kafka_offset"]) for r in rows.select(*OFFSET_COLUMNS).collect()}
    assert set(zip(*(scanned.column(c).to_pylist() for c in OFFSET_COLUMNS), strict=True)) == by_spark

    [snapshot] = plan_snapshots(endpoints, topic)
    offsets = json.loads(snapshot[OFFSETS_PROPERTY])[topic.kafka_topic]
    assert {int(p): tuple(r) for p, r in offsets.items()} == summary.plan
    partitions = spark.sql(f"SELECT partition FROM {ICEBERG_CATALOG}.{topic.database}.{topic.table}.partitions")
    assert partitions.count() == rows.select(F.date_trunc("hour", "_business_time")).distinct().count()
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []
    inventory = iceberg_inventory(make_client(endpoints, "s3"), endpoints.bucket, table_catalog(endpoints), topic)
    assert inventory.table_format == "iceberg" and len(inventory.partitions) == partitions.count()
    assert inventory.files == summary.objects and inventory.newest_kafka_time is not None
    assert inventory.quarantined_rows == summary.quarantined > 0

    glue = make_client(endpoints, "glue")  # what the maintainer reads: the hours and newest time the commit names
    described = glue.get_table(DatabaseName=topic.database, Name=topic.table)["Table"]
    lake = LakeObjects(make_client(endpoints, "s3"), endpoints.bucket)
    metadata = lake.table_metadata(described["Parameters"][METADATA_LOCATION_PARAMETER])
    by_snapshots = committed_data(current_summaries(metadata))
    hours = rows.select("schema_version", F.to_date("_business_time").alias("dt"), F.hour("_business_time").alias("h"))
    assert by_snapshots.partitions == {
        Partition(r["schema_version"], r["dt"], r["h"]) for r in hours.distinct().collect()
    }
    newest = rows.agg(F.max("_kafka_timestamp")).collect()[0][0]
    assert by_snapshots.newest_kafka_time == newest.replace(tzinfo=UTC), (by_snapshots.newest_kafka_time, newest)


def test_a_redo_after_the_table_commit_appends_nothing_twice(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = iceberg_topic(endpoints, "card-authorized", max_records_per_file=40)
    counts = produce(endpoints, topic, 600)
    with monkeypatch.context() as patch:
        patch.setattr(topic_run, "receipt", crash("after_table_commit"))  # the table holds the plan, nothing else
        with pytest.raises(InjectedCrash):
            archive_topic(spark, endpoints, topic)
    assert len(plan_snapshots(endpoints, topic)) == 1
    rerun = archive_topic(spark, endpoints, topic)
    assert rerun.redone_plan
    archive_topic(spark, endpoints, topic)  # caught up: nothing left to do
    assert len(plan_snapshots(endpoints, topic)) == 1
    rows = table_rows(spark, endpoints, topic)
    assert rows.count() == expected_rows(topic, counts)
    assert rows.groupBy(*OFFSET_COLUMNS).count().filter("count > 1").count() == 0
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends


def test_a_stale_run_committing_a_plan_the_table_holds_appends_nothing(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = iceberg_topic(endpoints, "shipment-events")
    counts = produce(endpoints, topic, 300)
    summary = archive_topic(spark, endpoints, topic)
    [snapshot] = plan_snapshots(endpoints, topic)
    plan_id = snapshot[PLAN_PROPERTY]
    files = [f"s3://{endpoints.bucket}/{o.key}" for o in summary.stored]
    location = table_location(endpoints.bucket, topic.prefix)
    again = append_plan(
        table_catalog(endpoints),
        (topic.database, topic.table),
        location=location,
        plan_id=plan_id,
        kafka_topic=topic.kafka_topic,
        ranges=summary.plan,
        files=files,
    )
    assert again is False
    assert table_rows(spark, endpoints, topic).count() == expected_rows(topic, counts)


def test_spark_sql_and_pyiceberg_count_the_interop_checks_exactly(spark: SparkSession, endpoints: Endpoints) -> None:
    """The checks Trino counts in ``make interop`` (whole table, the busiest business hour, the newest schema version),
    read through Spark SQL on ``glue_catalog`` and pyiceberg's scan, equal what the workload planned."""
    topic = iceberg_topic(endpoints, "shipment-events")  # keeps its tombstones as rows: the filters must leave them out
    registry = RegistryClient(endpoints.schema_registry_url)
    produced = produce_topic(topic, endpoints.kafka_bootstrap, registry, 900, start=START, hours=5)
    archive_topic(spark, endpoints, topic)
    checks = checks_for(topic, produced)
    assert [c.iceberg for c in checks] == [True] * 3 and checks[1].where.startswith("_business_time >= TIMESTAMP")
    tables = table_catalog(endpoints)
    for check in checks:
        assert iceberg_spark_read(spark, check) == Read(check.planned, 0), check.label
        assert pyiceberg_read(tables, check) == Read(check.planned, 0), check.label


def test_a_writer_that_commits_the_same_plan_between_the_look_and_the_append_wins_alone(
    spark: SparkSession, endpoints: Endpoints, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two runs carrying out one plan at once (a stale holder and the run that took its lease over): the second
    looks, finds no plan, and before it appends the first commits the same plan. The commit refuses the second's
    append, as the table's main branch is no longer the snapshot it read (pyiceberg checks it against Glue's current
    metadata; real Glue's ``VersionId`` also refuses the narrower race between that check and the update, which moto
    does not enforce); the second looks again, finds the plan, and appends nothing."""
    topic = iceberg_topic(endpoints, "shipment-events")
    counts = produce(endpoints, topic, 300)
    summary = archive_topic(spark, endpoints, topic)
    [snapshot] = plan_snapshots(endpoints, topic)
    files = [f"s3://{endpoints.bucket}/{o.key}" for o in summary.stored]
    location = table_location(endpoints.bucket, topic.prefix)

    def plan(plan_id: str) -> dict[str, Any]:
        return {
            "location": location,
            "plan_id": plan_id,
            "kafka_topic": topic.kafka_topic,
            "ranges": summary.plan,
            "files": [f.replace(".parquet", f".{plan_id}.parquet") for f in files],
        }

    s3 = make_client(endpoints, "s3")
    for source, target in zip(files, plan("racing")["files"], strict=True):  # the same rows as a new plan's files
        key = target.removeprefix(f"s3://{endpoints.bucket}/")
        s3.copy_object(Bucket=endpoints.bucket, Key=key, CopySource=f"{endpoints.bucket}/{source.split('/', 3)[3]}")
    identifier = (topic.database, topic.table)
    evolve = table_commit._evolve
    interleaved: list[bool] = []

    def other_writer_first(table: Any, schemas: Any) -> None:
        if not interleaved:  # once: the other run commits the plan right after this one looked
            interleaved.append(False)  # (the other run's own append goes through here too)
            interleaved[0] = append_plan(table_catalog(endpoints), identifier, **plan("racing"))
        evolve(table, schemas)

    monkeypatch.setattr(table_commit, "_evolve", other_writer_first)
    second = append_plan(table_catalog(endpoints), identifier, **plan("racing"))
    assert interleaved == [True] and second is False
    plans = [s[PLAN_PROPERTY] for s in plan_snapshots(endpoints, topic)]
    assert sorted(plans) == sorted([snapshot[PLAN_PROPERTY], "racing"]), plans
    assert table_rows(spark, endpoints, topic).count() == 2 * expected_rows(topic, counts)
