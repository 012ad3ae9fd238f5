"""Kafka calls that ride out a broker's start-up (leaders and group coordinators not yet known everywhere), and
the cluster's topics."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkalake.convention import is_internal

T = TypeVar("T")
SETTLE_SECONDS = 30.0
REFUSED: dict[int, str] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: "Kafka's ACLs refused the archiver's user",
    KafkaError.GROUP_AUTHORIZATION_FAILED: "Kafka's ACLs refused the archiver's user",
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: "Kafka's ACLs refused the archiver's user",
    KafkaError.SASL_AUTHENTICATION_FAILED: "Kafka refused the archiver's credentials",
    KafkaError._AUTHENTICATION: "Kafka refused the archiver's credentials",
    KafkaError._SSL: "the TLS handshake with Kafka failed",
}
"""Answers no wait changes (an ACL or a login refused, a broker certificate the client cannot verify), and what
each means: raised at once, never retried."""


def settled(call: Callable[[], T], wait_seconds: float = SETTLE_SECONDS) -> T:
    """``call()``, retried every half second for ``wait_seconds`` while it raises ``KafkaException``: a broker that
    just started answers NOT_LEADER_FOR_PARTITION and NOT_COORDINATOR (neither flagged retriable by librdkafka)
    until its metadata and its group coordinator settle. The last error is raised when the time is up; a refusal
    (``REFUSED``) at once."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return call()
        except KafkaException as exc:
            if time.monotonic() > deadline or refusal(exc) is not None:
                raise
            time.sleep(0.5)


def refusal(exc: KafkaException) -> KafkaError | None:
    """The Kafka error of ``exc`` when it is a refusal (``REFUSED``)."""
    error = exc.args[0] if exc.args else None
    return error if isinstance(error, KafkaError) and error.code() in REFUSED else None


def watermarks(consumer: Consumer, partition: TopicPartition, wait_seconds: float = SETTLE_SECONDS) -> tuple[int, int]:
    """(low, high) offsets of ``partition``."""
    low, high = settled(lambda: consumer.get_watermark_offsets(partition, timeout=10), wait_seconds)
    return int(low), int(high)


def list_topics(admin: AdminClient) -> list[str]:
    """The cluster's topics, sorted, without Kafka's and the tooling's own (``kafkalake.convention.is_internal``)."""
    return sorted(name for name in admin.list_topics(timeout=10).topics if not is_internal(name))
