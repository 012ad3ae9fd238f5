"""A light pass's reader (``spark_jobs.archiver.task_reader``) against the local broker: the same rows as Spark's Kafka
source for the same ranges (headers, null keys and values, a transaction's control records at a range's end, a range
that starts and ends inside a partition), and offsets that retention removed fail the read, saying what was lost, as
credentials the brokers refuse do at once."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql import DataFrame, SparkSession

from kafkalake.endpoints import Endpoints
from kafkalake.kafka_access import Credentials, kafka_access
from kafkalake.naming import SHARED_READ_GROUP, consumer_group
from kafkalake_dev.local.endpoints import KAFKA_SASL_PORT, KAFKA_USER
from kafkalake_dev.local.workload import ensure_topic
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.records import light_read_config, read_kafka
from spark_jobs.archiver.task_reader import read_ranges
from tests.integration.archive_helpers import jvm_consumers

pytestmark = pytest.mark.stack
CREATED = datetime(2026, 11, 28, tzinfo=UTC).isoformat()


def new_topic(endpoints: Endpoints, partitions: int) -> str:
    name = f"test.task-reader.{uuid.uuid4().hex[:8]}"
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), name, partitions)
    return name


def ends(endpoints: Endpoints, topic: str, partitions: int) -> dict[int, int]:
    consumer = Consumer({"bootstrap.servers": endpoints.kafka_bootstrap, "group.id": "test-task-reader"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in range(partitions)}
    finally:
        consumer.close()


def rows(frame: DataFrame) -> list[tuple[Any, ...]]:
    """The frame's rows in (topic, Kafka partition, offset) order."""
    return sorted((tuple(r) for r in frame.collect()), key=lambda r: (r[2], r[3], r[4]))


def test_the_task_reader_reads_what_sparks_kafka_source_reads(local_stack: Endpoints, spark: SparkSession) -> None:
    endpoints = local_stack
    plain, transactional = new_topic(endpoints, 3), new_topic(endpoints, 1)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    for i in range(60):
        record_headers: list[tuple[str, str | bytes | None]] | None = None
        if i % 3 == 0:
            record_headers = [("trace", f"t{i}".encode()), ("empty", None)]
        key = None if i % 7 == 0 else f"k{i}".encode()
        value = None if i % 11 == 0 else f"v{i}".encode()
        producer.produce(
            plain, key=key, value=value, partition=i % 3, headers=record_headers, timestamp=1_700_000_000_000 + i
        )
    assert producer.flush(30) == 0
    committing = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "transactional.id": f"tx-{transactional}"})
    committing.init_transactions(30)
    for batch in range(2):
        committing.begin_transaction()
        for i in range(5):
            committing.produce(transactional, key=b"k", value=f"tx{batch}-{i}".encode())
        committing.commit_transaction(30)
    high = ends(endpoints, transactional, 1)[0]
    assert high == 12, "two transactions of five records, each closed by a control record"
    plans = [
        Plan(plain, CREATED, {p: (0, e) for p, e in ends(endpoints, plain, 3).items()}),
        Plan(transactional, CREATED, {0: (0, high)}),  # ends on a control record: no record holds offset 11
        Plan(plain, CREATED, {1: (3, 12)}),  # starts and ends inside the partition
    ]
    access = kafka_access(endpoints)

    for plan in plans:
        for headers in (False, True):
            expected = rows(read_kafka(spark, access, plan, headers))
            found = rows(read_ranges(spark, light_read_config(kafka_access(endpoints)), [plan], headers))
            assert found == expected, (plan, headers)
            assert len(found) == (10 if plan.kafka_topic == transactional else plan.records)
    together = rows(read_ranges(spark, light_read_config(kafka_access(endpoints)), plans[:2], True))
    separately = [rows(read_kafka(spark, access, plan, True)) for plan in plans[:2]]
    assert together == sorted(separately[0] + separately[1], key=lambda r: (r[2], r[3], r[4]))
    assert any(r[-1] is not None for r in together) and any(r[-1] is None for r in together), "headers both ways"
    # Spark's source read each plan with consumers in the JVM under the topic's own group, with no JMX metrics
    # (registering them is their creation's cost, not ours to pay); the task reader made none there
    assert jvm_consumers(spark, consumer_group(plain), "app-info")
    assert jvm_consumers(spark, consumer_group(plain), "consumer-metrics") == set()
    assert jvm_consumers(spark, SHARED_READ_GROUP, "app-info") == set()


def test_offsets_retention_removed_fail_the_read_with_what_was_lost(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = local_stack
    topic = new_topic(endpoints, 1)
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    for i in range(20):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for future in admin.delete_records([TopicPartition(topic, 0, 10)]).values():
        future.result(30)

    with pytest.raises(Exception) as failed:
        read_ranges(
            spark, light_read_config(kafka_access(endpoints)), [Plan(topic, CREATED, {0: (0, 20)})], False
        ).collect()

    message = str(failed.value)
    assert f"KafkaReadFailed: {topic}[0] offsets 0-19: Kafka no longer has some of these offsets" in message
    assert "set archive.accept_data_loss: true" in message


def test_credentials_the_brokers_refuse_fail_the_read_at_once(local_stack: Endpoints, spark: SparkSession) -> None:
    topic = new_topic(local_stack, 1)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    producer.produce(topic, value=b"v", partition=0)
    assert producer.flush(30) == 0
    wrong = Credentials(KAFKA_USER[0], "not-the-password", mechanism="PLAIN", security_protocol="SASL_PLAINTEXT")
    access = dataclasses.replace(kafka_access(local_stack), bootstrap=f"127.0.0.1:{KAFKA_SASL_PORT}", credentials=wrong)

    with pytest.raises(Exception) as failed:
        read_ranges(spark, light_read_config(access), [Plan(topic, CREATED, {0: (0, 1)})], False).collect()

    message = str(failed.value)
    assert f"KafkaReadFailed: Kafka refused the archiver's credentials while reading {topic}[0] offsets 0-0" in message
    assert "SASL authentication error" in message and "not-the-password" not in message
