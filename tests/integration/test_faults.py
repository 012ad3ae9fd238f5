"""The faults AWS and the registry really produce, on the local stack: S3 throttling and 5xx bursts are retried and
counted, an access denial fails its topic only, a registry that is down or hangs fails its topic in bounded time,
a topic that gains partitions has them archived from their earliest offset. Each failing topic commits nothing of
the failing plan, and a run without the fault archives it exactly.

S3 faults come from a proxy in front of the local AWS endpoint (``tests.faults``); the run's ``aws_endpoint_url``
points at it, so the driver's and the executors' clients both go through it.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]
from pyspark.sql import SparkSession

from kafkalake.archive_receipts import ArchiveReceipt
from kafkalake.aws import make_client
from kafkalake.endpoints import Endpoints
from kafkalake.registry import TIMEOUT_SECONDS, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake_dev.local.sandbox import with_bucket
from kafkalake_dev.local.workload import ensure_topic
from spark_jobs.archiver.job import archive_fleet
from spark_jobs.archiver.summary import TopicResult
from spark_jobs.archiver.topic_run import catch_up
from spark_jobs.common import Run
from tests.faults import ACCESS_DENIED, INTERNAL_ERROR, SLOW_DOWN, UNAVAILABLE, Fault, FaultProxy, aws_proxy
from tests.integration.archive_helpers import audit_problems, committed_and_end, fresh, keys, produce, read_back

pytestmark = pytest.mark.stack
RECORDS = 300
KMS_DENIAL = (
    "User: arn:aws:sts::123456789012:assumed-role/ArchiverJobRole/job is not authorized to perform: "
    "kms:GenerateDataKey on resource: arn:aws:kms:eu-west-1:123456789012:key/lake"
)


@pytest.fixture(scope="module")
def endpoints(local_stack: Endpoints) -> Endpoints:
    return with_bucket(local_stack, "kafkalake-fault-tests")


@pytest.fixture
def s3_proxy(endpoints: Endpoints) -> Iterator[FaultProxy]:
    with aws_proxy(endpoints) as proxy:
        yield proxy


def puts_under(endpoints: Endpoints, *prefixes: str) -> str:
    """A path pattern for objects under any of ``prefixes`` (keys as botocore sends them, path style)."""
    return rf"^/{endpoints.bucket}/({'|'.join(re.escape(p) for p in prefixes)})"


def good_rows(*counts: Counter[str]) -> int:
    return sum(v for c in counts for k, v in c.items() if k.startswith("schema_version"))


def assert_exact(spark: SparkSession, endpoints: Endpoints, topic: Topic, rows: int, partitions: int = 3) -> None:
    """Every good record once, offsets committed to the end, the audit without a problem."""
    archived = read_back(spark, endpoints, topic).filter("id is not null")
    assert archived.count() == rows
    assert archived.groupBy("_kafka_partition", "_kafka_offset").count().filter("count > 1").count() == 0
    committed, ends = committed_and_end(endpoints, topic, partitions)
    assert committed == ends
    assert audit_problems(endpoints, topic) == []


def receipts(endpoints: Endpoints, topic: Topic) -> list[ArchiveReceipt]:
    s3 = make_client(endpoints, "s3")
    return [
        ArchiveReceipt.from_dict(json.loads(s3.get_object(Bucket=endpoints.bucket, Key=key)["Body"].read()))
        for key in sorted(keys(endpoints, topic.prefix.receipts_prefix()))
    ]


def stored_plan(endpoints: Endpoints, topic: Topic) -> dict[str, object]:
    """The topic's lease document (holder and stored plan)."""
    s3 = make_client(endpoints, "s3")
    document = s3.get_object(Bucket=endpoints.bucket, Key=topic.prefix.archive_lease_key())["Body"].read()
    return dict(json.loads(document))


def arming(arms: dict[str, Callable[[], Fault]], lines: list[str]) -> Callable[[str], None]:
    """A ``say`` that keeps the run's lines and arms a Kafka topic's fault (``arms``) once its first plan is
    committed, so the fault hits the topic's second plan."""

    def say(line: str) -> None:
        print(line)  # shown when a test fails
        lines.append(line)
        kafka_topic = line.split(": ", 1)[0]
        if line.startswith(f"{kafka_topic}: committed offsets") and kafka_topic in arms:
            arms.pop(kafka_topic)()

    return say


def fleet(
    spark: SparkSession, endpoints: Endpoints, topics: list[Topic], run: str, say: Callable[[str], None]
) -> dict[str, TopicResult]:
    results = archive_fleet(
        spark, endpoints, topics, concurrency=2, deadline=time.monotonic() + 600, run=Run(run), say=say
    )
    return {r.kafka_topic: r for r in results}


def test_slow_down_and_internal_error_bursts_are_retried_counted_and_the_run_finishes(
    spark: SparkSession, endpoints: Endpoints, s3_proxy: FaultProxy
) -> None:
    topic = fresh("card-authorized", max_records_per_run=150, max_records_per_file=40)
    counts = produce(endpoints, topic, RECORDS)
    s3_proxy.inject("PUT", puts_under(endpoints, topic.prefix.data_prefix()), SLOW_DOWN, times=3)
    s3_proxy.inject("PUT", puts_under(endpoints, topic.prefix.receipts_prefix()), INTERNAL_ERROR, times=2)
    s3_proxy.inject("PUT", puts_under(endpoints, topic.prefix.archive_lease_key()), SLOW_DOWN, times=1)

    through = dataclasses.replace(endpoints, aws_endpoint_url=s3_proxy.url)
    result = catch_up(spark, through, topic, run=Run("bursts"), deadline=time.monotonic() + 600, say=lambda _: None)

    assert result.ok, result.error
    assert s3_proxy.injected == Counter({"503 SlowDown": 4, "500 InternalError": 2})
    assert sum(s.s3_retries for s in result.plans) == 3  # the executors' data objects, back through the outcome rows
    assert result.as_dict()["s3_retries"] == 6  # and the driver's lease and receipts
    assert len([s for s in result.plans if s.plan]) == 2
    assert_exact(spark, endpoints, topic, good_rows(counts))


def test_access_denied_fails_its_topic_only_commits_nothing_of_the_plan_and_a_rerun_is_exact(
    spark: SparkSession, endpoints: Endpoints, s3_proxy: FaultProxy
) -> None:
    """S3 denies one topic's data objects after its first plan (an executor's write), and every write of another
    topic as the lake key's KMS policy would (the driver's first write, the lease); a third topic goes on."""
    good, denied, by_kms = (fresh("card-authorized", max_records_per_run=120, max_records_per_file=60) for _ in "abc")
    counts = {t.kafka_topic: produce(endpoints, t, 200) for t in (good, denied, by_kms)}
    prefixes = (by_kms.prefix.data_prefix(), by_kms.prefix.quarantine_prefix(), by_kms.prefix.state_prefix())
    s3_proxy.inject("PUT", puts_under(endpoints, *prefixes), ACCESS_DENIED, message=KMS_DENIAL)
    lines: list[str] = []
    deny_data = {
        denied.kafka_topic: lambda: s3_proxy.inject(
            "PUT", puts_under(endpoints, denied.prefix.data_prefix()), ACCESS_DENIED
        )
    }
    through = dataclasses.replace(endpoints, aws_endpoint_url=s3_proxy.url)

    results = fleet(spark, through, [good, denied, by_kms], "denied", arming(deny_data, lines))

    assert results[good.kafka_topic].ok
    assert_exact(spark, endpoints, good, good_rows(counts[good.kafka_topic]))
    error = results[denied.kafka_topic].error or ""
    assert f"{denied.kafka_topic}: FAILED, nothing of the failing plan committed: {error}" in lines
    assert f"ObjectNotWritten: cannot write s3://{endpoints.bucket}/{denied.prefix.data_prefix()}" in error
    assert "(AccessDenied) when calling the PutObject operation" in error
    assert f"s3:PutObject on s3://{endpoints.bucket}/{denied.prefix.data_prefix()}*" in error
    (first,) = receipts(endpoints, denied)  # the plan before the denial; the failing one has none
    committed, _ = committed_and_end(endpoints, denied)
    assert committed == {p: account.end for p, account in first.partitions.items()}
    lease = stored_plan(endpoints, denied)
    assert lease["run_id"] is None and isinstance(lease["work"], dict) and lease["work"]["plan"] is not None
    error = results[by_kms.kafka_topic].error or ""
    assert error.startswith("AccessDenied: An error occurred (AccessDenied) when calling the PutObject operation")
    assert f"lake key to write s3://{endpoints.bucket}/{by_kms.prefix.data_prefix()}*" in error
    assert "kms:GenerateDataKey and kms:Decrypt" in error
    assert keys(endpoints, by_kms.prefix.data_prefix()) == set()
    assert all(offset < 0 for offset in committed_and_end(endpoints, by_kms)[0].values())

    s3_proxy.clear()
    again = fleet(spark, through, [good, denied, by_kms], "denied-rerun", lambda _: None)

    assert all(r.ok for r in again.values()), [r.error for r in again.values()]
    assert again[denied.kafka_topic].plans[0].redone_plan
    for topic in (good, denied, by_kms):
        assert_exact(spark, endpoints, topic, good_rows(counts[topic.kafka_topic]))


def test_a_registry_down_or_hung_mid_run_fails_its_topic_in_bounded_time_and_a_rerun_is_exact(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    """Each topic's first plan reads the registry fine; then one topic's subject answers 503, the other's hangs
    longer than the client waits."""
    down, hung = (fresh("card-authorized", max_records_per_run=120) for _ in "ab")
    counts = {t.kafka_topic: produce(endpoints, t, 200) for t in (down, hung)}
    registry = FaultProxy(endpoints.schema_registry_url).start()
    try:
        through = dataclasses.replace(endpoints, schema_registry_url=registry.url)

        def fail(topic: Topic, delay: float = 0.0) -> Callable[[], Fault]:
            versions = rf"/subjects/{re.escape(value_subject(topic.kafka_topic))}/versions$"
            return lambda: registry.inject("GET", versions, UNAVAILABLE, delay=delay)

        arms = {down.kafka_topic: fail(down), hung.kafka_topic: fail(hung, delay=TIMEOUT_SECONDS + 5)}
        started = time.monotonic()

        results = fleet(spark, through, [down, hung], "registry", arming(arms, []))

        assert time.monotonic() - started < 120
        for topic, answer in ((down, "answered 503"), (hung, "did not answer (ReadTimeout")):
            error = results[topic.kafka_topic].error or ""
            subject = value_subject(topic.kafka_topic)
            assert error.startswith(f"RegistryError: topic {topic.kafka_topic}: cannot read the schema versions of ")
            assert f"subject '{subject}' from the registry at {registry.url}" in error
            assert answer in error, error
            (first,) = receipts(endpoints, topic)
            committed, _ = committed_and_end(endpoints, topic)
            assert committed == {p: account.end for p, account in first.partitions.items()}
    finally:
        registry.stop()

    again = fleet(spark, endpoints, [down, hung], "registry-rerun", lambda _: None)

    assert all(r.ok and r.plans[0].redone_plan for r in again.values()), [r.error for r in again.values()]
    for topic in (down, hung):
        assert_exact(spark, endpoints, topic, good_rows(counts[topic.kafka_topic]))


def test_partitions_added_between_runs_are_archived_from_their_earliest_offset(
    spark: SparkSession, endpoints: Endpoints
) -> None:
    topic = fresh("card-authorized")
    before = produce(endpoints, topic, 200)
    first = catch_up(spark, endpoints, topic, run=Run("before"), deadline=time.monotonic() + 600, say=lambda _: None)
    assert first.ok and set(first.lag) == {0, 1, 2}

    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    for future in admin.create_partitions([NewPartitions(topic.kafka_topic, 5)]).values():
        future.result(timeout=30)
    ensure_topic(admin, topic.kafka_topic, 5)  # waits for the new partitions' leaders
    after = produce(endpoints, topic, 600)  # all 600 again, spread over five partitions by key
    second = catch_up(spark, endpoints, topic, run=Run("after"), deadline=time.monotonic() + 600, say=lambda _: None)

    assert second.ok, second.error
    starts = {p: min(s.plan[p][0] for s in second.plans if p in s.plan) for p in (3, 4)}
    assert starts == {3: 0, 4: 0}
    assert second.lag == dict.fromkeys(range(5), 0)
    assert_exact(spark, endpoints, topic, good_rows(before, after), partitions=5)
