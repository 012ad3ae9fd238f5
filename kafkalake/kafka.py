"""Small Kafka helpers that ride out a broker's start-up (leaders not yet known everywhere)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]


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


def watermarks(consumer: Consumer, partition: TopicPartition, wait_seconds: float = 30) -> tuple[int, int]:
    """(low, high) offsets, retrying for a while: a broker that just started answers NOT_LEADER_FOR_PARTITION
    (not flagged retriable by librdkafka) until its metadata settles."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            low, high = consumer.get_watermark_offsets(partition, timeout=10)
            return int(low), int(high)
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
