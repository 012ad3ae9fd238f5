"""A topic's offsets in Kafka: partitions, watermarks, and the archiver's consumer group's committed positions."""

from __future__ import annotations

from collections.abc import Iterable

from confluent_kafka import Consumer, KafkaException, TopicPartition

from kafkalake.kafka import settled, watermarks
from kafkalake.kafka_access import KafkaAccess


def consumer_group(kafka_topic: str) -> str:
    return f"kafkalake-archiver.{kafka_topic}"


KafkaState = tuple[dict[int, int | None], dict[int, int], dict[int, int]]
"""Per partition: the group's committed offset (None when it has none), the low and the high watermark."""


class Offsets:
    """The topic's offsets in Kafka: watermarks, and the consumer group's committed positions."""

    def __init__(self, access: KafkaAccess, kafka_topic: str) -> None:
        self.topic, self.access = kafka_topic, access
        self.client_errors: list[str] = []
        self.consumer = Consumer(
            {
                **access.client_config(),
                "group.id": consumer_group(kafka_topic),
                "enable.auto.commit": False,
                "error_cb": lambda error: self.client_errors.append(error.str()),
            }
        )

    def partitions(self) -> list[int]:
        try:
            metadata = self.consumer.list_topics(self.topic, timeout=15).topics[self.topic]
        except KafkaException as exc:
            self.consumer.poll(0.5)  # serves the error callbacks that say why (authentication, DNS, ...)
            reported = "; ".join(dict.fromkeys(self.client_errors)) or "nothing more"
            how = (
                "with the credentials of the secret in kafka_secret_arn" if self.access.credentials else "without SASL"
            )
            raise RuntimeError(
                f"topic {self.topic}: cannot reach Kafka at {self.access.bootstrap} {how} ({exc}); the client "
                f"reported: {reported}. Check kafka_bootstrap in environments.yaml and the secret's username/password."
            ) from exc
        if metadata.error is not None:
            raise RuntimeError(f"topic {self.topic}: {metadata.error}")
        return sorted(metadata.partitions)

    def state(self) -> KafkaState:
        """(committed offset or None, low watermark, high watermark) per partition."""
        partitions = self.partitions()
        committed = self.committed(partitions)
        marks = {p: watermarks(self.consumer, TopicPartition(self.topic, p)) for p in partitions}
        return committed, {p: m[0] for p, m in marks.items()}, {p: m[1] for p, m in marks.items()}

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        """The group's committed offset per partition (None when it has none): one request."""
        wanted = [TopicPartition(self.topic, p) for p in partitions]
        return {
            tp.partition: (tp.offset if tp.offset >= 0 else None)
            for tp in settled(lambda: self.consumer.committed(wanted, timeout=15))
        }

    def commit(self, ranges: dict[int, tuple[int, int]]) -> None:
        """Commit the plan's ends, never moving a partition backwards: only the plan's partitions' commits are read
        first (not the topic's metadata and watermarks, which a commit does not need)."""
        committed = self.committed(ranges)
        forward = [
            TopicPartition(self.topic, p, end) for p, (_, end) in ranges.items() if (committed.get(p) or -1) < end
        ]
        if forward:
            settled(lambda: self.consumer.commit(offsets=forward, asynchronous=False))

    def close(self) -> None:
        self.consumer.close()
