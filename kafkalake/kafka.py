"""Kafka offsets that ride out a broker's start-up (leaders not yet known everywhere)."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, KafkaException, TopicPartition


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
