"""A light pass's reader (``spark_jobs.archiver.task_reader``) without a broker: how the ranges are spread over the
tasks, and that no rendering of its Spark plan shows the Kafka credentials it carries to the executors."""

from __future__ import annotations

from collections import Counter
from typing import cast

import pyarrow as pa
import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Consumer, KafkaError, TopicPartition
from pyspark.sql import SparkSession

from kafkalake.kafka_access import Credentials, KafkaAccess
from spark_jobs.archiver import task_reader
from spark_jobs.archiver.plan import Plan
from spark_jobs.archiver.task_reader import (
    HEADERS,
    KAFKA_COLUMNS,
    TASK_RECORDS,
    ClientErrors,
    KafkaRange,
    KafkaReadFailed,
    read,
    read_ranges,
    task_ranges,
)
from tests.plans import plan_renderings

CREATED = "2026-11-28T00:00:00+00:00"


def plans() -> list[Plan]:
    return [
        Plan("big", CREATED, {0: (0, 9_000), 1: (100, 100), 2: (5, 3_005)}),
        *(Plan(f"light.{i}", CREATED, {p: (0, 500 + 10 * i) for p in range(3)}) for i in range(20)),
    ]


def test_each_non_empty_range_is_read_by_exactly_one_of_at_most_as_many_tasks_as_cores() -> None:
    tasks = task_ranges(plans(), 2, task_records=1_000)

    assert len(tasks) == 2
    found = Counter(r for task in tasks for r in task)
    expected = {KafkaRange(p.kafka_topic, x, s, e) for p in plans() for x, (s, e) in p.ranges.items() if e > s}
    assert set(found) == expected and set(found.values()) == {1}
    assert KafkaRange("big", 1, 100, 100) not in found, "an empty range is no task's"
    loads = sorted(sum(r.records for r in task) for task in tasks)
    assert loads[1] - loads[0] <= max(r.records for r in expected), "spread by records, the largest first"
    assert task_ranges(plans(), 2, task_records=1_000) == tasks, "the same plans give the same tasks"


def test_a_pass_takes_a_task_per_task_records_up_to_a_core_each() -> None:
    records = sum(p.records for p in plans())  # 47,700
    assert records < TASK_RECORDS
    assert len(task_ranges(plans(), 8)) == 1, "a small pass is worth one task's cost"
    assert len(task_ranges(plans(), 8, task_records=15_000)) == 4  # 3 tasks' worth and a remainder
    assert len(task_ranges(plans(), 2, task_records=15_000)) == 2  # no more tasks than cores


def test_fewer_ranges_than_cores_take_a_task_each_and_no_ranges_one_empty_task() -> None:
    one = [Plan("t", CREATED, {0: (0, 10), 1: (0, 5)})]

    assert task_ranges(one, 8, task_records=1) == [[KafkaRange("t", 0, 0, 10)], [KafkaRange("t", 1, 0, 5)]]
    assert task_ranges([Plan("t", CREATED, {0: (7, 7)})], 8) == [[]]


KEY_PEM = "-----BEGIN PRIVATE KEY-----\ns3cr3t-Kafka-client-key\n-----END PRIVATE KEY-----\n"
CREDENTIALS = {
    "a SASL password": (Credentials("archiver", "s3cr3t-Kafka-password"), "s3cr3t-Kafka-password"),
    "a client key": (
        Credentials(security_protocol="SSL", certificate_pem="-----BEGIN CERTIFICATE-----\n", key_pem=KEY_PEM),
        "s3cr3t-Kafka-client-key",
    ),
}


@pytest.mark.parametrize("headers", [False, True])
@pytest.mark.parametrize("credentials", CREDENTIALS.values(), ids=CREDENTIALS.keys())
def test_the_plan_has_the_kafka_sources_columns_and_no_rendering_shows_the_credentials(
    bare_spark: SparkSession, headers: bool, credentials: tuple[Credentials, str], capsys: pytest.CaptureFixture[str]
) -> None:
    given, secret = credentials
    access = KafkaAccess("broker:9096", "http://registry", given)
    frame = read_ranges(bare_spark, access.client_config(), plans(), headers)

    expected = f"{KAFKA_COLUMNS}, {HEADERS}" if headers else KAFKA_COLUMNS
    assert frame.schema.simpleString() == bare_spark.createDataFrame([], expected).schema.simpleString()
    renderings = plan_renderings(frame, capsys)
    assert [name for name, text in renderings.items() if secret in text] == []
    # every rendering but codegen's (the generated code of the stages around it) names the reader by its class
    assert [name for name, text in renderings.items() if "RangeReader" not in text] == ["explain codegen"]


class FakeMessage:
    """A consumed record, or an event (``error``) at ``offset``, as confluent-kafka hands them over."""

    def __init__(self, partition: int, offset: int, error: KafkaError | None = None) -> None:
        self._partition, self._offset, self._error = partition, offset, error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return self._partition

    def offset(self) -> int:
        return self._offset

    def error(self) -> KafkaError | None:
        return self._error

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return f"v{self._offset}".encode()

    def timestamp(self) -> tuple[int, int]:
        return TIMESTAMP_CREATE_TIME, 1_700_000_000_000

    def headers(self) -> None:
        return None


class FakeConsumer:
    """Hands over ``polls`` one after the other, then nothing; each of ``client_errors`` goes to ``error_cb`` within
    a ``consume``, as librdkafka serves its error callback."""

    def __init__(
        self,
        *polls: list[FakeMessage],
        client_errors: tuple[KafkaError, ...] = (),
        error_cb: ClientErrors | None = None,
    ) -> None:
        self.polls, self.closed = list(polls), False
        self.paused: list[int] = []
        self.client_errors, self.error_cb = list(client_errors), error_cb

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned = [(p.partition, p.offset) for p in partitions]

    def consume(self, count: int, timeout: float) -> list[FakeMessage]:
        if self.client_errors and self.error_cb is not None:
            self.error_cb(self.client_errors.pop(0))
        return self.polls.pop(0) if self.polls else []

    def pause(self, partitions: list[TopicPartition]) -> None:
        self.paused += [p.partition for p in partitions]

    def close(self) -> None:
        self.closed = True


def offsets(batches: list[pa.RecordBatch]) -> list[tuple[int, int]]:
    table = pa.Table.from_batches(batches)
    return list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True))


def test_a_range_ends_at_its_end_offset_or_at_its_partitions_end_never_below_it() -> None:
    eof = KafkaError(KafkaError._PARTITION_EOF)
    consumer = FakeConsumer(
        [FakeMessage(0, 5), FakeMessage(1, 0), FakeMessage(0, 6, eof)],  # partition 0's end below the range's
        [FakeMessage(0, 6), FakeMessage(0, 7), FakeMessage(1, 1)],  # 0: offset 7 is past the range: done
        [FakeMessage(1, 3, eof)],  # 1: offset 2 holds no record (a control record), and its end reached 3: done
    )
    ranges = [KafkaRange("t", 0, 5, 7), KafkaRange("t", 1, 0, 3)]

    batches = list(read(cast(Consumer, consumer), ranges, include_headers=False))

    assert consumer.assigned == [(0, 5), (1, 0)]
    assert offsets(batches) == [(0, 5), (1, 0), (0, 6), (1, 1)]
    assert consumer.paused == [0, 1] and consumer.closed
    table = pa.Table.from_batches(batches)
    assert set(table.column("timestampType").to_pylist()) == {0}, "Java's CreateTime, as Spark's source says it"


def test_a_range_that_gets_nothing_for_the_stall_time_fails_naming_what_it_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(task_reader, "STALL_SECONDS", 0.0)
    consumer = FakeConsumer([FakeMessage(0, 0)])
    with pytest.raises(
        KafkaReadFailed,
        match=r"^no record and no partition end from Kafka for 0 s while reading t\[0\] offsets 0-9: check",
    ):
        list(read(cast(Consumer, consumer), [KafkaRange("t", 0, 0, 10)], include_headers=False))
    assert consumer.closed


def test_an_offset_kafka_no_longer_has_fails_the_range_saying_what_was_lost() -> None:
    reset = KafkaError(KafkaError._AUTO_OFFSET_RESET, "fetch failed: Broker: Offset out of range")
    consumer = FakeConsumer([FakeMessage(0, 0, reset)])
    with pytest.raises(KafkaReadFailed, match=r"^t\[0\] offsets 0-9: Kafka no longer has some of these offsets"):
        list(read(cast(Consumer, consumer), [KafkaRange("t", 0, 0, 10)], include_headers=False))
    assert consumer.closed


@pytest.mark.parametrize(
    ("code", "reason", "said"),
    [
        (
            KafkaError._AUTHENTICATION,
            "SASL authentication error: Authentication failed",
            "Kafka refused the archiver's credentials",
        ),
        (KafkaError._SSL, "SSL handshake failed: certificate verify failed", "the TLS handshake with Kafka failed"),
    ],
)
def test_a_refused_login_or_an_unverified_broker_fails_the_read_at_once_with_the_clients_reason(
    code: int, reason: str, said: str
) -> None:
    errors = ClientErrors()
    consumer = FakeConsumer(
        [FakeMessage(0, 0)], [FakeMessage(0, 1)], client_errors=(KafkaError(code, reason),), error_cb=errors
    )
    with pytest.raises(KafkaReadFailed) as failed:
        list(read(cast(Consumer, consumer), [KafkaRange("t", 0, 0, 10)], False, errors))
    assert str(failed.value).startswith(
        f"{said} while reading t[0] offsets 0-9 (the Kafka client's last error: {reason}): check the secret that "
        "kafka_secret_arn names"
    )
    assert consumer.closed and consumer.polls, "failed at the first consume, without waiting for the stall time"


def test_a_read_that_stalls_says_the_clients_last_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(task_reader, "STALL_SECONDS", 0.0)
    errors = ClientErrors()
    down = KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down")
    consumer = FakeConsumer([], client_errors=(down,), error_cb=errors)
    with pytest.raises(
        KafkaReadFailed,
        match=r"while reading t\[0\] offsets 0-9 \(the Kafka client's last error: 1/1 brokers are down\): check",
    ):
        list(read(cast(Consumer, consumer), [KafkaRange("t", 0, 0, 10)], False, errors))
