"""Kafka offsets that ride out a broker's start-up (leaders not yet known everywhere), and the cluster's topics."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkalake.convention import is_internal


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


def list_topics(admin: AdminClient) -> list[str]:
    """The cluster's topics, sorted, without Kafka's and the tooling's own (``kafkalake.convention.is_internal``)."""
    return sorted(name for name in admin.list_topics(timeout=10).topics if not is_internal(name))
