"""A light pass's Kafka records, read with one consumer per Spark task (``read_ranges``).

Spark's Kafka source makes a consumer for every Kafka partition of every plan it reads (its executors' pool is keyed
by group and Kafka partition): a pass of 156 light topics (468 Kafka partitions, 312,000 records) spent 8.5-13.3 s
reading with it, against 2.0-3.4 s with one confluent-kafka consumer per task assigned all of the task's partitions
(measured 28 Nov on 2 cores: the records counted after their hand-over to Python, alternated, three rounds). So the
light topics' passes (``spark_jobs.archiver.light``) read here, and a heavy plan alone keeps Spark's source
(``records.read_kafka``): its records go from the JVM's read to ``from_avro`` with no hop through Python.

The rows have the source's columns and types (``KAFKA_COLUMNS``, ``HEADERS``), and each Kafka partition is read by one
task in offset order, which is what the writer needs (``spark_jobs.archiver.writer``): a pass writes the same objects
whichever reader read it. The ranges are spread over the tasks by their records (``task_ranges``): a task per
``TASK_RECORDS`` records, one per core at most. As the source with ``failOnDataLoss``, a range whose records have left
Kafka fails its task, saying what was lost, and the pass then falls back to its plans one by one, each through Spark's
source. Offsets that hold no record (a transaction's control record, a compacted gap) are passed over: a range is done
at the first record at or past its end, or when its partition's end (the consumer's end-of-partition event) reaches it.
A partition Kafka refuses to serve (its ACL denies Read: ``Topic authorization failed``) fails at its first fetch, and
credentials the brokers refuse or a broker certificate the client cannot verify fail the read at once
(``ClientErrors``), not after ``STALL_SECONDS`` of silence: librdkafka reports those to its error callback only, never
as a message.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, Message, TopicPartition
from pyspark.sql import DataFrame, SparkSession

from kafkalake.kafka import REFUSED
from kafkalake.kafka_access import MskIamToken
from spark_jobs.archiver.plan import Plan

KAFKA_COLUMNS = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, timestampType int"
)
"""Spark's Kafka source's columns, as ``read_kafka`` gives them."""
HEADERS = "headers array<struct<key: string, value: binary>>"
"""The source's headers column (``includeHeaders``): null for a record without headers."""
_HEADERS_ARROW = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_ARROW = pa.schema(
    [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", pa.timestamp("us", tz="UTC")),
        ("timestampType", pa.int32()),
    ]
)
TASK_RECORDS = 50_000
"""A pass takes a task (a core) per this many records, up to one per core: a task's own cost (two Python workers, the
reader's and the writer's, and a consumer) is about a CPU-second, more than its share of a small pass saves (measured
on 28 Nov, one light topic of 2,000 records, three alternated pairs: 4.35-4.75 CPU-s in two tasks, 3.39-3.60 in one,
and 2.98-3.31 s against 2.95-3.03 s). The bound is a light plan's (``light.LIGHT_PLAN_RECORDS``), for the same
reason."""
BATCH_ROWS = 10_000
"""Records per Arrow batch handed to Spark (``spark.sql.execution.arrow.maxRecordsPerBatch``'s default)."""
POLL_SECONDS = 0.05
"""How long one ``consume`` waits: it returns when it has ``BATCH_ROWS`` records or after this long, and a light
plan's partitions hold far fewer (at 1 s, a pass of one light topic took 3.8-4.1 s against 2.9-3.1 s with Spark's
source: every task waited the whole second for its first batch)."""
STALL_SECONDS = 120.0
"""A task whose ranges get no record and no end for this long fails (Spark's Kafka source polls as long: its
``kafkaConsumer.pollTimeoutMs`` defaults to ``spark.network.timeout``, 120 s)."""
READER_SETTINGS: dict[str, Any] = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "auto.offset.reset": "error",
    "isolation.level": "read_uncommitted",
    "enable.partition.eof": True,
}
"""Assigned, never subscribed, committing nothing (the group's committed offsets stay the archiver's,
``spark_jobs.archiver.offsets``); an offset Kafka no longer has is an error, never a silent jump
(``auto.offset.reset``); every record up to the range's end, as the source reads them (``isolation.level``:
librdkafka's default is read_committed); the end-of-partition event ends a range whose last offsets hold no record."""


class KafkaReadFailed(RuntimeError):
    """A range of a light pass could not be read to its end."""


class ClientErrors:
    """What the consumer reports of its connections rather than of a partition (librdkafka's ``error_cb``, called
    within ``consume``): the last such error, which says why a read got nothing."""

    def __init__(self) -> None:
        self.last: KafkaError | None = None

    def __call__(self, error: KafkaError) -> None:
        self.last = error

    def unrecoverable(self) -> str | None:
        """What the last error means when no wait would make the read succeed (``kafkalake.kafka.REFUSED``)."""
        return REFUSED.get(self.last.code()) if self.last is not None else None

    def said(self) -> str:
        return f" (the Kafka client's last error: {self.last.str()})" if self.last is not None else ""


@dataclass(frozen=True)
class KafkaRange:
    """One Kafka partition's ``[start, end)`` offsets of a plan."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def records(self) -> int:
        return self.end - self.start

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] offsets {self.start}-{self.end - 1}"


def task_ranges(plans: Sequence[Plan], cores: int, task_records: int = TASK_RECORDS) -> list[list[KafkaRange]]:
    """The plans' non-empty ranges in a task per ``task_records`` records, at most one per core and at least one,
    the largest first, each to the task with the fewest records so far: the same plans give the same tasks."""
    ranges = [KafkaRange(p.kafka_topic, x, s, e) for p in plans for x, (s, e) in sorted(p.ranges.items()) if e > s]
    wanted = -(-sum(r.records for r in ranges) // task_records)
    found: list[list[KafkaRange]] = [[] for _ in range(max(1, min(cores, len(ranges), wanted)))]
    loads = [0] * len(found)
    for one in sorted(ranges, key=lambda r: -r.records):
        least = loads.index(min(loads))
        found[least].append(one)
        loads[least] += one.records
    return found


def read_ranges(spark: SparkSession, config: dict[str, Any], plans: Sequence[Plan], include_headers: bool) -> DataFrame:
    """Exactly the plans' ranges, as Spark's Kafka source reads them, in a task per ``TASK_RECORDS`` records and one
    per core at most (``task_ranges``): task ``i`` of ``spark.range`` holds the one id ``i`` and reads the ``i``-th
    task's ranges. ``config``: librdkafka's settings (``KafkaAccess.client_config`` with the group and fetch wait)."""
    tasks = task_ranges(plans, spark.sparkContext.defaultParallelism)
    schema = f"{KAFKA_COLUMNS}, {HEADERS}" if include_headers else KAFKA_COLUMNS
    reader = RangeReader({**config, **READER_SETTINGS}, tasks, include_headers)
    return spark.range(0, len(tasks), 1, len(tasks)).mapInArrow(reader, schema)


class RangeReader:
    """A task's ranges, by the ids its batches hold, read with one consumer (pickled to the executors: a class, so
    Spark's plan names it, never its settings)."""

    def __init__(self, config: dict[str, Any], tasks: list[list[KafkaRange]], include_headers: bool) -> None:
        self.config, self.tasks, self.include_headers = config, tasks, include_headers

    def __call__(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for task in batch.column("id").to_pylist():
                errors = ClientErrors()
                consumer = Consumer({**self.config, "error_cb": errors})
                fix = IAM_FIX if isinstance(self.config.get("oauth_cb"), MskIamToken) else LOGIN_FIX
                yield from read(consumer, self.tasks[task], self.include_headers, errors, fix)


LOGIN_FIX = (
    "check the secret that kafka_secret_arn names in environments.yaml (its username and password, and with a private "
    "CA its ca_pem) and the user's ACLs (docs/deploying.md)"
)
IAM_FIX = (
    "check the archiver role's kafka-cluster:Connect on msk_cluster_arn and kafka-cluster:DescribeTopic and "
    "kafka-cluster:ReadData on the topic's ARN (docs/deploying.md)"
)


def read(
    consumer: Consumer,
    ranges: Sequence[KafkaRange],
    include_headers: bool,
    errors: ClientErrors | None = None,
    fix: str = LOGIN_FIX,
) -> Iterator[pa.RecordBatch]:
    """The ranges' records through ``consumer`` (closed at the end), in batches of ``BATCH_ROWS`` at most; raise
    ``KafkaReadFailed`` when one cannot be read to its end, saying what to check (``fix``: the secret's login or,
    with MSK IAM, the role's grants). ``errors``: the consumer's error callback."""
    by_partition = {(r.topic, r.partition): r for r in ranges}
    left = set(by_partition)
    rows = _Rows(include_headers)
    errors = errors or ClientErrors()

    def waiting() -> str:
        return ", ".join(str(by_partition[w]) for w in sorted(left))

    try:
        if ranges:
            consumer.assign([TopicPartition(r.topic, r.partition, r.start) for r in ranges])
        progressed = time.monotonic()
        while left:
            messages = consumer.consume(BATCH_ROWS, POLL_SECONDS)
            if failed := errors.unrecoverable():
                raise KafkaReadFailed(f"{failed} while reading {waiting()}{errors.said()}: {fix}")
            for message in messages:
                where = (str(message.topic()), int(message.partition() or 0))
                if where not in left:
                    continue
                one = by_partition[where]
                reached = _reached(message, one)
                progressed = time.monotonic()
                if message.error() is None and reached <= one.end:
                    rows.add(message)
                if reached >= one.end:
                    left.discard(where)
                    consumer.pause([TopicPartition(one.topic, one.partition)])
            if time.monotonic() - progressed > STALL_SECONDS:
                raise KafkaReadFailed(
                    f"no record and no partition end from Kafka for {STALL_SECONDS:.0f} s while reading {waiting()}"
                    f"{errors.said()}: check that the brokers are up and that the partitions' leaders are available"
                )
            if len(rows) >= BATCH_ROWS or (not left and len(rows)):
                yield rows.batch()
                rows = _Rows(include_headers)
    finally:
        consumer.close()


def _reached(message: Message, one: KafkaRange) -> int:
    """The offset the range has been read to with ``message``: past its record, or its partition's end (which may
    still be below the range's end: a new leader's that has not caught up yet); raise what a failed read lost."""
    error, offset = message.error(), message.offset()
    if error is None and offset is not None:
        return offset + 1
    if error is not None and error.code() == KafkaError._PARTITION_EOF and offset is not None:
        return offset
    if error is not None and error.code() == KafkaError._AUTO_OFFSET_RESET:
        raise KafkaReadFailed(
            f"{one}: Kafka no longer has some of these offsets (retention deleted them before they were archived: "
            f"{error.str()}). Raise the topic's retention, or set archive.accept_data_loss: true in its catalog file; "
            "nothing of the plan was committed"
        )
    raise KafkaReadFailed(f"{one}: reading from Kafka failed: {error.str() if error else 'a message without offset'}")


class _Rows:
    """Records as the Kafka source's columns."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.columns: dict[str, list[Any]] = {name: [] for name in _ARROW.names}
        self.headers: list[list[dict[str, Any]] | None] = []

    def __len__(self) -> int:
        return len(self.columns["offset"])

    def add(self, message: Message) -> None:
        kind, millis = message.timestamp()
        found = self.columns
        found["key"].append(message.key())
        found["value"].append(message.value())
        found["topic"].append(message.topic())
        found["partition"].append(message.partition())
        found["offset"].append(message.offset())
        found["timestamp"].append(millis * 1000)
        found["timestampType"].append(kind - 1)  # librdkafka counts from "not available" (0), Java from -1
        if self.include_headers:
            pairs = message.headers()  # a consumed record's: a list of (key, bytes or None)
            self.headers.append(
                [{"key": k, "value": v} for k, v in pairs] if isinstance(pairs, list) and pairs else None
            )

    def batch(self) -> pa.RecordBatch:
        arrays = [pa.array(self.columns[f.name], f.type) for f in _ARROW]
        if not self.include_headers:
            return pa.RecordBatch.from_arrays(arrays, schema=_ARROW)
        schema = _ARROW.append(pa.field("headers", _HEADERS_ARROW))
        return pa.RecordBatch.from_arrays([*arrays, pa.array(self.headers, _HEADERS_ARROW)], schema=schema)
