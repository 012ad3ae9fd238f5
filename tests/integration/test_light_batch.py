"""Light topics share one Spark job (``spark_jobs.archiver.light``) and stay isolated, on the local stack: in one
batch, eight healthy topics, a topic of poison only and a topic whose registry subject is missing; the eight and the
poison commit exactly in one Spark job, the missing subject fails alone and commits nothing, and a re-run once the
subject is registered is exact. Through the broker's SASL listener, with credentials from Secrets Manager: a topic
whose ACL denies the archiver's user Read fails alone with Kafka's reason, and once it is allowed a re-run reads
every topic in one pass, exactly."""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourceType,
)
from pyspark.sql import SparkSession

from kafkalake.aws import make_client, read_json
from kafkalake.endpoints import Endpoints
from kafkalake.naming import SHARED_READ_GROUP
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.wire import encode
from kafkalake_dev.local.endpoints import KAFKA_SASL_PORT
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic, sample_value
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.archiver.summary import TopicResult
from spark_jobs.common import Run
from tests.integration.archive_helpers import (
    acl,
    audit_problems,
    committed_and_end,
    fresh,
    good_records,
    jvm_consumers,
    kafka_acls,
    keys,
    produce,
    read_back,
    through_kafka_secret,
    topic_with_schema,
)

pytestmark = pytest.mark.stack
ALLOW = AclPermissionType.ALLOW
HEALTHY = 8
RECORDS = 150
POISON = 30
UNREGISTERED = 40


def spark_jobs(spark: SparkSession) -> set[int]:
    """The Spark jobs the session has run outside any job group (the archiver's)."""
    return set(spark.sparkContext.statusTracker().getJobIdsForGroup(None))


def run_fleet(
    spark: SparkSession, endpoints: Endpoints, topics: list[Topic], run: str, lines: list[str]
) -> tuple[dict[str, TopicResult], int]:
    """One archiver run over ``topics``: the results by Kafka topic, and how many Spark jobs it ran."""
    before = spark_jobs(spark)
    # Leases that no renewal needs within the test (half the TTL without a write), so their requests are counted
    this_run = Run(run, lease_ttl=timedelta(minutes=15))
    results = archive_fleet(
        spark, endpoints, topics, concurrency=2, deadline=time.monotonic() + 600, run=this_run, say=lines.append
    )
    return {r.kafka_topic: r for r in results}, len(spark_jobs(spark) - before)


def produce_values(endpoints: Endpoints, topic: Topic, values: list[bytes]) -> None:
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap})
    for i, value in enumerate(values):
        producer.produce(topic.kafka_topic, key=f"k{i}".encode(), value=value)
    assert producer.flush(30) == 0


def assert_exact(spark: SparkSession, endpoints: Endpoints, topic: Topic, rows: int) -> None:
    """``rows`` data rows, no (partition, offset) twice, offsets committed to the end, the audit clean."""
    archived = read_back(spark, endpoints, topic)
    assert archived.count() == rows
    assert archived.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
    committed, ends = committed_and_end(endpoints, topic)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []


def test_light_topics_share_one_spark_job_and_a_failing_one_fails_alone(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-light-tests")
    healthy = [fresh("card-authorized") for _ in range(HEALTHY)]
    good = {t.kafka_topic: produce(endpoints, t, RECORDS) for t in healthy}
    poisoned, unregistered = fresh("card-authorized"), fresh("card-authorized")
    topic_with_schema(endpoints, poisoned, poisoned.schemas[0])
    produce_values(endpoints, poisoned, [b"\x07not a framed value"] * POISON)
    # Framed with an id the registry holds under another subject: the topic's own subject is missing until the re-run.
    schema = unregistered.schemas[0]
    registry = RegistryClient(endpoints.schema_registry_url)
    schema_id = registry.register(f"{unregistered.kafka_topic}-elsewhere", schema)
    ensure_topic(AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap}), unregistered.kafka_topic, 3)
    values = [encode(schema_id, schema, sample_value(json.loads(schema), "c", i)) for i in range(UNREGISTERED)]
    produce_values(endpoints, unregistered, values)
    topics = [*healthy, poisoned, unregistered]
    lines: list[str] = []

    results, jobs = run_fleet(spark, endpoints, topics, "light", lines)

    assert jobs == 1, f"{jobs} Spark jobs for one batch of light topics"
    # the pass read Kafka with one consumer per task in its Python workers (``task_reader``), none in the JVM
    assert jvm_consumers(spark, SHARED_READ_GROUP, "app-info") == set()
    for topic in [*healthy, poisoned]:
        result = results[topic.kafka_topic]
        assert result.ok, result.error
        assert [s.shared_job for s in result.plans] == [HEALTHY + 1]
    for topic in healthy:
        assert_exact(spark, endpoints, topic, good_records(good[topic.kafka_topic]))
        # read the lease, take it with the plan stored, and clear the plan with the lease released in the same write
        assert results[topic.kafka_topic].lease_requests == 3
    poison = results[poisoned.kafka_topic]
    assert poison.as_dict()["quarantine_by_reason"] == {"bad_magic_byte": POISON}
    assert (poison.totals()["read"], poison.totals()["written"]) == (POISON, 0)
    assert keys(endpoints, poisoned.prefix.data_prefix()) == set()
    assert keys(endpoints, poisoned.prefix.quarantine_prefix())
    assert committed_and_end(endpoints, poisoned)[0] == committed_and_end(endpoints, poisoned)[1]
    assert audit_problems(endpoints, poisoned) == []
    error = results[unregistered.kafka_topic].error or ""
    subject = value_subject(unregistered.kafka_topic)
    assert error.startswith(f"SubjectMissing: topic {unregistered.kafka_topic}: the registry at "), error
    assert f"has no schema under subject '{subject}'" in error
    assert f"{unregistered.kafka_topic}: FAILED, nothing of the failing plan committed: {error}" in lines
    assert (
        keys(endpoints, unregistered.prefix.data_prefix()) | keys(endpoints, unregistered.prefix.quarantine_prefix())
        == set()
    )
    assert all(offset < 0 for offset in committed_and_end(endpoints, unregistered)[0].values())
    lease = read_json(make_client(endpoints, "s3"), endpoints.bucket, unregistered.prefix.archive_lease_key())
    assert lease is not None and lease["run_id"] is None and lease["work"]["plan"] is not None

    assert registry.register(subject, schema) == schema_id
    again, jobs = run_fleet(spark, endpoints, topics, "light-rerun", [])

    assert all(r.ok for r in again.values()), [r.error for r in again.values()]
    assert jobs == 1
    redone = again[unregistered.kafka_topic].plans[0]
    assert redone.redone_plan and redone.read == UNREGISTERED and redone.balanced()
    assert_exact(spark, endpoints, unregistered, redone.written)
    for topic in healthy:
        assert [s.plan for s in again[topic.kafka_topic].plans] == [{}]
        assert again[topic.kafka_topic].lease_requests == 3  # nothing to store: read, take, release
        assert_exact(spark, endpoints, topic, good_records(good[topic.kafka_topic]))


def test_over_sasl_topics_kafka_denies_fail_alone_and_once_allowed_share_one_pass(
    local_stack: Endpoints, spark: SparkSession
) -> None:
    endpoints = with_bucket(local_stack, "kafkalake-light-tests")
    sasl = through_kafka_secret(endpoints, KAFKA_SASL_PORT, mechanism="PLAIN", security_protocol="SASL_PLAINTEXT")
    healthy, denied = [fresh("card-authorized") for _ in range(3)], [fresh("card-authorized") for _ in range(2)]
    good = {t.kafka_topic: produce(endpoints, t, RECORDS) for t in [*healthy, *denied]}
    topics = [*healthy, *denied]
    lines: list[str] = []
    # each denied topic may be planned (Describe: its offsets), not read
    read_denied = [
        acl(ResourceType.TOPIC, t.kafka_topic, operation, permission)
        for t in denied
        for operation, permission in [(AclOperation.DESCRIBE, ALLOW), (AclOperation.READ, AclPermissionType.DENY)]
    ]

    with kafka_acls(endpoints) as grant:
        grant(read_denied)
        results, _ = run_fleet(spark, sasl, topics, "sasl", lines)

    for topic in healthy:
        assert results[topic.kafka_topic].ok, results[topic.kafka_topic].error
        assert_exact(spark, endpoints, topic, good_records(good[topic.kafka_topic]))
    for topic in denied:
        error = results[topic.kafka_topic].error or ""
        assert f"Not authorized to access topics: [{topic.kafka_topic}]" in error, error
        assert f"{topic.kafka_topic}: FAILED, nothing of the failing plan committed: {error}" in lines
        assert keys(endpoints, topic.prefix.data_prefix()) | keys(endpoints, topic.prefix.quarantine_prefix()) == set()
        assert all(offset < 0 for offset in committed_and_end(endpoints, topic)[0].values())

    again, jobs = run_fleet(spark, sasl, topics, "sasl-rerun", [])

    assert all(r.ok for r in again.values()), [r.error for r in again.values()]
    assert jobs == 1
    for topic in denied:  # their stored plans, redone in one pass: read by the task reader with the secret's login
        [redone] = again[topic.kafka_topic].plans
        assert redone.redone_plan and redone.shared_job == len(denied) and redone.balanced()
        assert_exact(spark, endpoints, topic, good_records(good[topic.kafka_topic]))
