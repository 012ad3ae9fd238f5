"""Overlapping archiver runs on the local stack: one run at a time carries out a topic's plans, a stale holder is
taken over and its plan redone, and a run that lost the topic can no longer commit anything that counts."""

from __future__ import annotations

import dataclasses
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from pyspark.sql import SparkSession

from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.lease import STALE_WITHIN, Lease, LeaseLost
from kafkalake.naming import consumer_group
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import StoredAs, TableFormat, TableMode
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import plan_workload, tally
from spark_jobs.archiver.plan import Plan, PlanLease
from spark_jobs.archiver.summary import TopicResult
from spark_jobs.archiver.topic_run import catch_up
from spark_jobs.common import Run
from tests.integration.archive_helpers import (
    ICEBERG_COMPANIES,
    START,
    audit_problems,
    committed_and_end,
    contents,
    differing_rows,
    fresh,
    keyring,
    keys,
    produce,
)

pytestmark = pytest.mark.stack
RECORDS = 1500


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, "kafkalake-overlap-tests")


def run(spark: SparkSession, endpoints: Endpoints, topic: Topic, name: str, ttl: float = 30) -> TopicResult:
    lease_ttl = timedelta(seconds=ttl)
    deadline = time.monotonic() + 600
    keys = keyring(endpoints) if topic.needs_key else None
    return catch_up(spark, endpoints, topic, run=Run(name, lease_ttl), deadline=deadline, keys=keys, say=lambda _: None)


def plan_workload_tombstoned(topic: Topic) -> set[int]:
    """The good records of ``produce``'s workload whose key a later tombstone deletes."""
    return tally(topic, plan_workload(topic, RECORDS, start=START, hours=5)).tombstoned


def arrived(endpoints: Endpoints, topic: Topic) -> list[int]:
    try:
        return list(committed_and_end(endpoints, topic)[1].values())
    except Exception:  # noqa: BLE001 - the topic does not exist yet
        return [0]


def kept_as(endpoints: Endpoints, topic: Topic, table_format: str) -> Topic:
    """``topic`` kept as ``table_format`` (``upsert``: an Iceberg table of its latest row per Kafka key), with an
    Iceberg table's database (the stack deploys the databases)."""
    if table_format == TableFormat.HIVE:
        return topic
    update: dict[str, Any] = {"table_format": TableFormat.ICEBERG}
    if topic.company not in ICEBERG_COMPANIES:  # where a deployed archiver may make an Iceberg table
        update["database"] = f"{ICEBERG_COMPANIES[0]}_{topic.env}"
    if table_format == "upsert":
        archive = topic.spec.archive.model_copy(update={"key": StoredAs.CLEAR})
        update |= {"mode": TableMode.UPSERT, "archive": archive}
    kept = dataclasses.replace(topic, spec=topic.spec.model_copy(update=update))
    make_client(endpoints, "glue").create_database(DatabaseInput={"Name": kept.database})
    return kept


@pytest.mark.parametrize(
    ("name", "table_format"),
    [
        ("card-authorized", "hive"),
        ("card-authorized", "iceberg"),
        ("order-placed", "hive"),
        ("customer-updated", "upsert"),
    ],
)  # order-placed: a Protobuf topic; customer-updated's latest row per key
def test_two_runs_started_seconds_apart_while_records_arrive_then_a_third_catches_up(
    spark: SparkSession, endpoints: Endpoints, name: str, table_format: str
) -> None:
    topic = kept_as(endpoints, fresh(name, max_records_per_run=120, max_records_per_file=40), table_format)
    produced: list[dict[str, int]] = []
    producing = threading.Thread(target=lambda: produced.append(dict(produce(endpoints, topic, RECORDS))))
    producing.start()
    deadline = time.monotonic() + 60
    while producing.is_alive() and time.monotonic() < deadline and sum(arrived(endpoints, topic)) < 100:
        time.sleep(0.2)  # the runs start once records arrive, and records keep arriving while they run

    results: dict[str, TopicResult] = {}

    def start(name: str) -> threading.Thread:
        thread = threading.Thread(target=lambda: results.__setitem__(name, run(spark, endpoints, topic, name)))
        thread.start()
        return thread

    first = start("run-a")
    time.sleep(3)
    second = start("run-b")
    for thread in (first, second, producing):
        thread.join()
    third = run(spark, endpoints, topic, "run-c")

    assert all(r.ok for r in (*results.values(), third)), [r.error for r in (*results.values(), third)]
    held = [r.skipped for r in results.values() if r.skipped]
    assert held and held[0].startswith("held by run run-"), "the later run should have found the topic held"
    counts = produced[0]
    good = sum(v for k, v in counts.items() if k.startswith("schema_version"))
    rows = contents(spark, endpoints, topic)
    assert good == RECORDS - counts["poison"] - counts["tombstones"]
    tombstoned = len(plan_workload_tombstoned(topic)) if table_format == "upsert" else 0
    assert rows.count() == good - tombstoned
    assert rows.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0

    reference = kept_as(endpoints, fresh(name, max_records_per_run=RECORDS, max_records_per_file=40), table_format)
    produce(endpoints, reference, RECORDS)
    run(spark, endpoints, reference, "single-run")
    assert differing_rows(rows, contents(spark, endpoints, reference)) == 0
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []


def test_a_stale_holder_is_taken_over_its_plan_redone_and_its_late_steps_refused(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = fresh("card-authorized", max_records_per_run=200, max_records_per_file=40)
    produce(endpoints, topic, 600)
    s3, key = make_client(endpoints, "s3"), topic.prefix.archive_lease_key()
    ttl = timedelta(seconds=2)
    dead = Lease.acquire(s3, endpoints.bucket, key, "dead-run", ttl=ttl, now=lambda: datetime.now(UTC))
    stored = Plan(topic.kafka_topic, datetime.now(UTC).isoformat(), {0: (0, 50), 1: (0, 50), 2: (0, 50)})
    PlanLease(dead).store(stored)
    time.sleep((ttl + STALE_WITHIN).total_seconds())  # the dead run stopped renewing: its lease is stale

    rescued = run(spark, endpoints, topic, "rescuer", ttl=2)
    assert rescued.ok and rescued.plans[0].redone_plan and rescued.plans[0].plan == stored.ranges
    with pytest.raises(LeaseLost, match="run dead-run lost"):
        PlanLease(dead).finish(stored)

    # The dead run wakes up and commits its plan's ends to Kafka, behind what the rescuer committed.
    zombie = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": consumer_group(topic.kafka_topic)})
    zombie.commit(offsets=[TopicPartition(topic.kafka_topic, p, 50) for p in range(3)], asynchronous=False)
    zombie.close()
    objects = keys(endpoints, topic.prefix.data_prefix())
    again = run(spark, endpoints, topic, "next-run")
    assert again.ok and not any(s.plan for s in again.plans), "offsets behind the lease's record were re-archived"
    assert keys(endpoints, topic.prefix.data_prefix()) == objects
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends, "the group's commit is moved forward to what the lease records"
    assert audit_problems(endpoints, topic) == []
