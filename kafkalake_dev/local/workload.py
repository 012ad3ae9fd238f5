"""A realistic workload for a catalog's topics: records that follow each topic's own schemas, business times
spread over several hours (late and out of order), tombstones (each deleting the key of an earlier record) and a
few poison records."""

from __future__ import annotations

import functools
import json
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from kafkalake.kafka import watermarks
from kafkalake.layout import Partition
from kafkalake.registry import RegistryClient, value_subject
from kafkalake.topic_catalog import Topic
from kafkalake.topic_spec import TimeCandidate, TimeFormat, ValueFormat
from kafkalake.wire import encode
from kafkalake_dev.local.producers import ProducerSchemas
from kafkalake_dev.local.stack import state_dir

EPOCH_FACTOR = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


WORKLOAD_SHAPE = 2
"""Raised when what the same arguments produce changes (2: a tombstone carries an earlier record's key), so a demo
does not compare Kafka's records of an earlier shape with a plan of this one."""
POISON = b"\x07not a framed value"
"""A poison record's value: no decoder reads it, so it goes to quarantine."""
LATE_SHARE = 0.03
"""Records whose business time lies about a day behind the rest: they arrive after their hour has closed."""


def kafka_client_log() -> Path:
    """Where the workload's Kafka clients log (the stack's ``logs/kafka-clients.log``)."""
    return state_dir() / "logs" / "kafka-clients.log"


def client_logger() -> logging.Logger:
    """librdkafka's lines of the workload's clients (a producer retrying while the broker loads a coordinator, say)
    into ``kafka_client_log()``: librdkafka writes them to the terminal, between the demo's lines, otherwise."""
    logger, path = logging.getLogger("kafkalake.workload.librdkafka"), kafka_client_log()
    if [getattr(h, "baseFilename", None) for h in logger.handlers] != [str(path)]:  # first use, or another stack
        for old in list(logger.handlers):
            logger.removeHandler(old)
            old.close()
        path.parent.mkdir(parents=True, exist_ok=True)
        handler = logging.FileHandler(path)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        logger.addHandler(handler)
        logger.propagate = False
    return logger


def client_settings(bootstrap: str, more: dict[str, Any] | None = None) -> dict[str, Any]:
    """A workload client's settings: ``bootstrap`` and ``more``, its log lines to ``client_logger``."""
    return {"bootstrap.servers": bootstrap, "logger": client_logger(), **(more or {})}


def ensure_topic(admin: AdminClient, name: str, partitions: int, wait_seconds: float = 30) -> None:
    """Create the topic if needed and wait until every partition has a leader."""
    if name not in admin.list_topics(timeout=10).topics:
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(timeout=30)
    deadline = time.monotonic() + wait_seconds
    while time.monotonic() < deadline:
        topic = admin.list_topics(name, timeout=10).topics[name]
        if topic.error is None and topic.partitions and all(p.leader >= 0 for p in topic.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {name} has partitions without a leader after {wait_seconds}s")


@dataclass(frozen=True)
class Planned:
    """One record of the workload: what to produce and, for a good record, the partition it must land in."""

    index: int
    kind: str
    """``tombstone``, ``poison``, or ``good``."""
    version: int = 0
    """Index into the topic's schemas (good records only)."""
    record: dict[str, Any] = field(default_factory=dict)
    partition: Partition | None = None
    late: bool = False
    key_index: int | None = None
    """The record whose Kafka key this one carries: its own, or (a tombstone) the latest good record's before it."""

    def key(self, topic: Topic) -> bytes:
        return f"{topic.name}-{self.index if self.key_index is None else self.key_index}".encode()


@dataclass
class Produced:
    topic: str
    counts: Counter[str] = field(default_factory=Counter)
    expected: Counter[Partition] = field(default_factory=Counter)
    """Good records per (schema version, date, hour): what a reader must find in each partition."""
    skipped: bool = False
    good: dict[int, Partition] = field(default_factory=dict)
    """Each good record's partition, by its index in the workload."""
    tombstoned: set[int] = field(default_factory=set)
    """The good records whose key a later tombstone carries (what erasure by key removes)."""
    subjects: dict[int, str] = field(default_factory=dict)
    """Each good record's first subject field value, for topics that declare ``subject_fields``."""
    state: dict[str, dict[str, Any]] = field(default_factory=dict)
    """An upsert table's rows once every change is applied: its key as text → the columns a check compares
    (``change_stream.STATE_COLUMNS``); empty for an append table."""

    def without(self, erased: set[int]) -> Counter[Partition]:
        """What a reader must find in each partition once the records ``erased`` are gone."""
        return self.expected - Counter(self.good[i] for i in erased if i in self.good)


def sample_value(schema: Any, name: str, i: int) -> Any:
    """A value for an Avro (sub)schema; unions take their first non-null branch."""
    if isinstance(schema, list):
        return sample_value(next(s for s in schema if s != "null"), name, i)
    if isinstance(schema, dict):
        containers: dict[str, Callable[[], Any]] = {
            "record": lambda: {f["name"]: sample_value(f["type"], f["name"], i) for f in schema["fields"]},
            "array": lambda: [sample_value(schema["items"], name, i)],
            "map": lambda: {f"{name}-key": sample_value(schema["values"], name, i)},
        }
        if schema.get("type") in containers:
            return containers[schema["type"]]()
        if schema.get("logicalType", "").startswith("timestamp"):
            return datetime(2026, 1, 1, tzinfo=UTC)
        return sample_value(schema["type"], name, i)
    values: dict[str, Callable[[], Any]] = {
        "string": lambda: f"{name}-{i}",
        "long": lambda: i,
        "int": lambda: i % 1000,
        "double": lambda: i / 10,
        "float": lambda: i / 10,
        "boolean": lambda: i % 2 == 0,
        "bytes": lambda: bytes([i % 256]),
    }
    return values[schema]()


def set_path(record: dict[str, Any], path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        record = record[part]
    record[leaf] = value


def field_value(record: dict[str, Any], path: str) -> Any:
    for part in path.split("."):
        record = record[part]
    return record


def business_time(candidate: TimeCandidate, moment: datetime) -> Any:
    if candidate.format == TimeFormat.EPOCH:
        return int(moment.timestamp() * EPOCH_FACTOR[candidate.unit or "ms"])
    if candidate.format == TimeFormat.ISO8601:
        return moment.isoformat()
    return moment  # an Avro timestamp logical type


def _avro(schema_id: int, schema: str, record: dict[str, Any], _: int) -> bytes:
    return encode(schema_id, schema, record)


def topic_size(bootstrap: str, name: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(client_settings(bootstrap, {"group.id": "kafkalake-demo-probe"}))
    try:
        metadata = consumer.list_topics(name, timeout=10).topics[name]
        return sum(watermarks(consumer, TopicPartition(name, p))[1] for p in metadata.partitions)
    finally:
        consumer.close()


def plan_workload(topic: Topic, records: int, *, start: datetime, hours: int, seed: int = 7) -> list[Planned]:
    """The workload, decided without producing anything (the same arguments give the same records): about 1%
    tombstones, 1% poison, business times spread over ``hours`` in random order, 3% a day late, and later
    records on later schema versions."""
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    schemas = [json.loads(s) for s in topic.schemas]
    planned: list[Planned] = []
    latest_good = None
    for i in range(records):
        roll = rng.random()
        if roll < 0.01:
            planned.append(Planned(i, "tombstone", key_index=latest_good))
            continue
        if roll < 0.02:
            planned.append(Planned(i, "poison"))
            continue
        version = (i * len(schemas)) // records
        record = sample_value(schemas[version], "value", i)
        record["id"] = f"{topic.name}-{i}"
        late = rng.random() < LATE_SHARE
        moment = start + timedelta(seconds=rng.uniform(0, hours * 3600))
        if late:
            moment -= timedelta(days=1)
        if topic.spec.time_fields:
            set_path(record, topic.spec.time_fields[0].path, business_time(topic.spec.time_fields[0], moment))
        partition = Partition(version + 1, moment.date(), moment.hour)
        planned.append(Planned(i, "good", version, record, partition, late))
        latest_good = i
    return planned


def tally(topic: Topic, planned: list[Planned]) -> Produced:
    result = Produced(topic.kafka_topic)
    for item in planned:
        if item.partition is None:
            result.counts[f"{item.kind}s" if item.kind != "poison" else "poison"] += 1
            if item.key_index is not None:
                result.tombstoned.add(item.key_index)
            continue
        result.counts[f"schema_version_{item.version + 1}"] += 1
        result.counts["late"] += item.late
        result.expected[item.partition] += 1
        result.good[item.index] = item.partition
        if topic.spec.subject_fields:
            result.subjects[item.index] = str(field_value(item.record, topic.spec.subject_fields[0]))
    return result


def produce_topic(
    topic: Topic,
    bootstrap: str,
    registry: RegistryClient,
    records: int,
    *,
    start: datetime,
    hours: int,
    seed: int = 7,
    progress: Callable[[int], None] = lambda _: None,
) -> Produced:
    """Produce the planned workload unless the topic already holds it; either way, say what it holds (a Debezium
    topic's workload is ``change_stream.produce_changes``; ``topic_workload`` takes either)."""
    planned = plan_workload(topic, records, start=start, hours=hours, seed=seed)
    result = tally(topic, planned)
    if already_held(topic, bootstrap, records, result, progress):
        return result
    subject = value_subject(topic.kafka_topic)
    if topic.spec.value_format in (ValueFormat.PROTOBUF, ValueFormat.JSON_SCHEMA):
        encoders = ProducerSchemas(topic).register(registry, subject)
    else:
        ids = [registry.register(subject, s) for s in topic.schemas]
        encoders = [functools.partial(_avro, i, s) for i, s in zip(ids, topic.schemas, strict=True)]

    def value(item: Planned) -> bytes | None:
        if item.kind == "tombstone":
            return None
        if item.kind == "poison":
            return POISON
        if topic.spec.value_format == ValueFormat.JSON:
            return json.dumps(item.record, default=str).encode()
        return encoders[item.version](item.record, item.index)

    deliver(topic, bootstrap, ((item.index, item.key(topic), value(item)) for item in planned), records, progress)
    return result


def already_held(topic: Topic, bootstrap: str, records: int, result: Produced, progress: Callable[[int], None]) -> bool:
    """Create the topic if need be; True, with ``result`` marked skipped, when it already holds ``records``."""
    ensure_topic(AdminClient(client_settings(bootstrap)), topic.kafka_topic, 3)
    if topic_size(bootstrap, topic.kafka_topic) < records:
        return False
    result.skipped = True
    progress(records)
    return True


def deliver(
    topic: Topic,
    bootstrap: str,
    records: Iterable[tuple[int, bytes | None, bytes | None]],
    total: int,
    progress: Callable[[int], None],
) -> None:
    """Produce each (index, key, value) of ``records`` to the topic, idempotently, saying how far it got."""
    producer = Producer(client_settings(bootstrap, {"linger.ms": 20, "enable.idempotence": True}))
    for index, key, value in records:
        producer.produce(topic.kafka_topic, key=key, value=value)
        producer.poll(0)
        if index % 500 == 0:
            progress(index)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not deliver every record to {topic.kafka_topic} at {bootstrap}")
    progress(total)
