"""A realistic workload for a catalog's topics: records that follow each topic's own schemas, business times
spread over several hours (late and out of order), tombstones and a few poison records."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafkalake.catalog import TimeCandidate, TimeFormat, Topic, ValueFormat
from kafkalake.kafka import ensure_topic, watermarks
from kafkalake.registry import RegistryClient, encode, value_subject

EPOCH_FACTOR = {"s": 1, "ms": 1_000, "us": 1_000_000}


@dataclass
class Produced:
    topic: str
    counts: Counter[str] = field(default_factory=Counter)
    skipped: bool = False


def sample_value(schema: Any, name: str, i: int) -> Any:
    """A value for an Avro (sub)schema; unions take their first non-null branch."""
    if isinstance(schema, list):
        return sample_value(next(s for s in schema if s != "null"), name, i)
    if isinstance(schema, dict):
        if schema.get("type") == "record":
            return {f["name"]: sample_value(f["type"], f["name"], i) for f in schema["fields"]}
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


def business_time(candidate: TimeCandidate, moment: datetime) -> Any:
    if candidate.format == TimeFormat.EPOCH:
        return int(moment.timestamp() * EPOCH_FACTOR[candidate.unit or "ms"])
    if candidate.format == TimeFormat.ISO8601:
        return moment.isoformat()
    return moment  # an Avro timestamp logical type


def topic_size(bootstrap: str, name: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kafkalake-demo-probe"})
    try:
        metadata = consumer.list_topics(name, timeout=10).topics[name]
        return sum(watermarks(consumer, TopicPartition(name, p))[1] for p in metadata.partitions)
    finally:
        consumer.close()


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
    """Produce ``records`` values (about 1% tombstones and 1% poison) unless the topic already holds them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    ensure_topic(admin, topic.kafka_topic, 3)
    result = Produced(topic.kafka_topic)
    if topic_size(bootstrap, topic.kafka_topic) >= records:
        result.skipped = True
        progress(records)
        return result
    rng = random.Random(seed)  # noqa: S311 - test data, not security
    schemas = [json.loads(s) for s in topic.schemas]
    ids = [registry.register(value_subject(topic.kafka_topic), s) for s in topic.schemas]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "enable.idempotence": True})
    for i in range(records):
        key = f"{topic.name}-{i}".encode()
        roll = rng.random()
        if roll < 0.01:
            producer.produce(topic.kafka_topic, key=key, value=None)
            result.counts["tombstones"] += 1
        elif roll < 0.02:
            producer.produce(topic.kafka_topic, key=key, value=b"\x07not a framed value")
            result.counts["poison"] += 1
        else:
            version = (i * len(schemas)) // records  # later records use later schema versions
            record = sample_value(schemas[version], "value", i)
            record["id"] = f"{topic.name}-{i}"
            moment = start + timedelta(seconds=rng.uniform(0, hours * 3600))
            if topic.spec.time_fields:
                set_path(record, topic.spec.time_fields[0].path, business_time(topic.spec.time_fields[0], moment))
            if topic.spec.value_format == ValueFormat.AVRO:
                value = encode(ids[version], topic.schemas[version], record)
            else:
                value = json.dumps(record, default=str).encode()
            producer.produce(topic.kafka_topic, key=key, value=value)
            result.counts[f"schema_version_{version + 1}"] += 1
        producer.poll(0)
        if i % 500 == 0:
            progress(i)
    if producer.flush(60) != 0:
        raise RuntimeError(f"could not deliver every record to {topic.kafka_topic} at {bootstrap}")
    progress(records)
    return result
