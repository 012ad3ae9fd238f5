"""The offset audit on the local stack: a clean archive, a deleted object, compaction, an accepted retention loss."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import SparkSession
from typer.testing import CliRunner

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.layout import parse_data_key
from kafkalake.topic_catalog import Topic, load_topic_catalog
from kafkalake_dev.checks.audit import PartitionAudit, audit, committed_offsets, read_lake
from kafkalake_dev.checks.inventory import table_objects
from kafkalake_dev.cli.app import app
from kafkalake_dev.local.sandbox import isolated_env, register_complete_partitions, with_bucket
from spark_jobs.archiver.topic_run import catch_up
from spark_jobs.compaction.job import Compactor
from spark_jobs.compaction.work import Knobs
from tests.integration.archive_helpers import committed_and_end, fresh, produce

pytestmark = pytest.mark.stack
LATER = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, "kafkalake-audit-tests")


def archive(spark: SparkSession, endpoints: Endpoints, topic: Topic) -> None:
    catch_up(spark, endpoints, topic, deadline=time.monotonic() + 600, say=lambda _: None)


def audited(endpoints: Endpoints, topic: Topic) -> list[PartitionAudit]:
    lake = read_lake(make_client(endpoints, "s3"), endpoints.bucket, topic)
    return audit(lake, committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic))


def problems(results: list[PartitionAudit]) -> list[tuple[int, int, int, str]]:
    return [(p.kafka_partition, p.start, p.end, p.kind) for r in results for p in r.problems]


def test_every_offset_is_accounted_for_a_deleted_object_is_a_gap_and_compaction_keeps_the_books(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = fresh("card-authorized", max_records_per_run=200, max_records_per_file=40)
    counts = produce(endpoints, topic, 600)
    archive(spark, endpoints, topic)
    clean = audited(endpoints, topic)
    assert problems(clean) == []
    assert sum(r.read for r in clean) == 600 and sum(r.receipts for r in clean) >= 3
    assert sum(r.quarantined for r in clean) == counts["poison"]
    assert sum(r.dropped_tombstones for r in clean) == counts["tombstones"]
    assert sum(r.found for r in clean) == sum(r.stored for r in clean) == 600 - counts["poison"] - counts["tombstones"]
    assert {r.kafka_partition: r.end for r in clean} == committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic)

    s3 = make_client(endpoints, "s3")
    raw = sorted(table_objects(s3, endpoints.bucket, topic.prefix)[0])
    victim = raw[len(raw) // 2]
    body = s3.get_object(Bucket=endpoints.bucket, Key=victim)["Body"].read()
    s3.delete_object(Bucket=endpoints.bucket, Key=victim)
    gone = parse_data_key(victim)
    assert problems(audited(endpoints, topic)) == [
        (gone.kafka_partition, gone.first_offset, gone.last_offset + 1, "gap")
    ]
    s3.put_object(Bucket=endpoints.bucket, Key=victim, Body=body)
    assert problems(audited(endpoints, topic)) == []

    partitions = sorted({parse_data_key(k).partition for k in raw})
    schema = pq.read_schema(io.BytesIO(body))
    register_complete_partitions(make_client(endpoints, "glue"), topic, endpoints.bucket, schema, partitions)
    knobs = Knobs(min_input_files=2, grace_period=timedelta(hours=1))
    compacted = Compactor(spark, endpoints, [topic], knobs, now=lambda: LATER, say=lambda _: None).run()
    assert {r.action for r in compacted} >= {"compacted"} and "failed" not in {r.action for r in compacted}
    assert problems(audited(endpoints, topic)) == []  # raw files still there through the grace period
    Compactor(spark, endpoints, [topic], knobs, now=lambda: LATER + timedelta(hours=2), say=lambda _: None).run()
    remaining, _ = table_objects(s3, endpoints.bucket, topic.prefix)
    assert len(remaining) < len(raw)  # compacted inputs deleted: their rows live on in the outputs
    after = audited(endpoints, topic)
    assert problems(after) == [] and sum(r.found for r in after) == sum(r.stored for r in clean)


def test_a_retention_loss_accepted_is_reported_as_a_gap_at_its_offsets(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = fresh("card-authorized", max_records_per_run=1000, accept_data_loss=True)
    produce(endpoints, topic, 300)
    archive(spark, endpoints, topic)
    before = committed_offsets(endpoints.kafka_bootstrap, topic.kafka_topic)
    produce(endpoints, topic, 600)  # the topic holds fewer: the whole workload again, 600 more records
    _, ends = committed_and_end(endpoints, topic)
    start = before[0] or 0
    assert ends[0] > start + 1, (before, ends)
    lost_until = (start + ends[0]) // 2  # records [start, lost_until) of partition 0 fall out of retention
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic.kafka_topic, 0, lost_until)]).values():
        future.result(timeout=30)
    archive(spark, endpoints, topic)  # accept_data_loss: partition 0 goes on from the earliest retained offset
    assert problems(audited(endpoints, topic)) == [(0, start, lost_until, "gap")]


def test_the_command_prints_the_table_and_exits_non_zero_on_a_gap(
    spark: SparkSession, local_stack: Endpoints, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`kafkalake archive` then `kafkalake audit` on an isolated environment: exit 0 while the books balance,
    1 with the gap named once a data object is deleted."""
    env, catalog_folder, environments = isolated_env(tmp_path)
    monkeypatch.setenv("KAFKALAKE_ENVIRONMENTS", str(environments))
    topic = load_topic_catalog(catalog_folder).get("card-authorized", env.name)
    bucket_endpoints = with_bucket(local_stack, env.bucket)
    produce(bucket_endpoints, topic, 300)
    where = ["--env", env.name, "--catalog", str(catalog_folder)]
    archived = CliRunner().invoke(app, ["archive", *where, "--topic", topic.name])
    assert archived.exit_code == 0, archived.output
    balanced = CliRunner().invoke(app, ["audit", *where, "--topic", topic.name])
    assert balanced.exit_code == 0, balanced.output
    assert f"offset audit of {topic.kafka_topic}" in balanced.output and "problems" not in balanced.output
    s3 = make_client(bucket_endpoints, "s3")
    victim = sorted(table_objects(s3, env.bucket, topic.prefix)[0])[0]
    s3.delete_object(Bucket=env.bucket, Key=victim)
    gone = parse_data_key(victim)
    unbalanced = CliRunner().invoke(app, ["audit", *where, "--topic", topic.name])
    assert unbalanced.exit_code == 1, unbalanced.output
    assert f"partition {gone.kafka_partition} offsets {gone.first_offset}-{gone.last_offset}: gap" in unbalanced.output
