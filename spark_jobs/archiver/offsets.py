"""A topic's offsets in Kafka: partitions, watermarks, and the archiver's consumer group's committed positions."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafkalake.kafka import refusal, settled, watermarks
from kafkalake.kafka_access import KafkaAccess
from kafkalake.naming import SHARED_READ_GROUP, consumer_group


class KafkaAccessDenied(RuntimeError):
    """Kafka refused the archiver's user an operation on a topic's consumer group's offsets (an ACL of the group or
    of the topic, or its login)."""


ADMIN_SECONDS = 15
"""How long a group-offsets request may go unanswered."""
KafkaState = tuple[dict[int, int | None], dict[int, int], dict[int, int]]
"""Per partition: the group's committed offset (None when it has none), the low and the high watermark."""


class OffsetClients:
    """The Kafka clients a run reads and commits its topics' offsets with, shared by its topics: one consumer for
    metadata and watermarks, one admin client for each topic's group's committed offsets and commits (a group's
    commit as a consumer of it makes it, with no member: the OffsetCommit request, so the same ACLs).

    Shared because a client per topic held 8 file descriptors (librdkafka's broker sockets and wake-up pipes) for as
    long as its topic was in the run: in a run of 160 topics whose light ones wait for their pass together, about
    1,300, past the 1,024 ``select()`` takes (PySpark's accumulator server then fails), and a client's start per
    topic.

    The consumer is used by one thread at a time (``lock``): its calls serve its error callback in the calling
    thread, and one of two benchmark runs of the full fleet with the consumer shared by the run's four threads died
    of a segmentation fault in the driver's Python process (cause not found; confluent-kafka's threaded use has known
    crashes, e.g. confluent-kafka-python#1797). Its calls are a metadata request and two watermark requests per
    partition, milliseconds each. The admin client's
    calls are futures, made for concurrent use."""

    def __init__(self, access: KafkaAccess) -> None:
        self.lock = threading.Lock()
        self.access = access
        self.errors: list[str] = []
        config: dict[str, Any] = {**access.client_config(), "error_cb": lambda error: self.errors.append(error.str())}
        self.consumer = Consumer({**config, "group.id": SHARED_READ_GROUP, "enable.auto.commit": False})
        self.admin = AdminClient(config)

    def close(self) -> None:
        with self.lock:
            self.consumer.close()


class Offsets:
    """The topic's offsets in Kafka: watermarks, and the consumer group's committed positions."""

    def __init__(self, clients: OffsetClients, kafka_topic: str) -> None:
        self.topic, self.clients, self.access = kafka_topic, clients, clients.access
        self.group = consumer_group(kafka_topic)

    def partitions(self) -> list[int]:
        try:
            with self.clients.lock:
                metadata = self.clients.consumer.list_topics(self.topic, timeout=15).topics[self.topic]
        except KafkaException as exc:
            with self.clients.lock:
                self.clients.consumer.poll(0.5)  # serves the error callbacks that say why (authentication, DNS, ...)
            reported = "; ".join(dict.fromkeys(self.clients.errors)) or "nothing more"
            if self.access.iam_region is not None:
                how = f"with MSK IAM tokens the job's role signs for {self.access.iam_region}"
                check = (
                    "the role's kafka-cluster:Connect on msk_cluster_arn, that the cluster serves IAM on that port "
                    "(9098), and the region"
                )
            else:
                how = (
                    "with the credentials of the secret in kafka_secret_arn"
                    if self.access.credentials
                    else "without SASL"
                )
                check = "the secret's username and password"
            raise RuntimeError(
                f"topic {self.topic}: cannot reach Kafka at {self.access.bootstrap} {how} ({exc}); the client "
                f"reported: {reported}. Check kafka_bootstrap in environments.yaml and {check} (with TLS, the "
                "secret's ca_pem: the brokers' CA when a private CA signed their certificate)."
            ) from exc
        if metadata.error is not None and metadata.error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED:
            raise KafkaAccessDenied(
                f"topic {self.topic}: Kafka refused to describe it ({metadata.error.str()}). "
                f"{self._grant(metadata.error.code(), 'Describe')}; nothing of it was read"
            )
        if metadata.error is not None and metadata.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise RuntimeError(
                f"topic {self.topic}: Kafka at {self.access.bootstrap} has no such topic. Check the catalog file's "
                "kafka_topic (`kafkalake catalog drift --env <env>` lists catalog topics Kafka lacks), or create the "
                "topic; nothing of it was read"
            )
        if metadata.error is not None:
            raise RuntimeError(f"topic {self.topic}: {metadata.error}")
        return sorted(metadata.partitions)

    def state(self) -> KafkaState:
        """(committed offset or None, low watermark, high watermark) per partition."""
        partitions = self.partitions()
        committed = self.committed(partitions)
        with self.clients.lock:
            marks = {p: watermarks(self.clients.consumer, TopicPartition(self.topic, p)) for p in partitions}
        return committed, {p: m[0] for p, m in marks.items()}, {p: m[1] for p, m in marks.items()}

    def committed(self, partitions: Iterable[int]) -> dict[int, int | None]:
        """The group's committed offset per partition (None when it has none): one request."""
        request = [ConsumerGroupTopicPartitions(self.group, [TopicPartition(self.topic, p) for p in partitions])]
        with self.refusals("read the committed offsets of", "Describe"):
            found = _checked(
                settled(
                    lambda: self.clients.admin.list_consumer_group_offsets(request)[self.group].result(
                        timeout=ADMIN_SECONDS
                    )
                )
            )
        return {tp.partition: (tp.offset if tp.offset >= 0 else None) for tp in found}

    def commit(self, ranges: dict[int, tuple[int, int]]) -> None:
        """Commit the plan's ends, never moving a partition backwards: only the plan's partitions' commits are read
        first (not the topic's metadata and watermarks, which a commit does not need)."""
        committed = self.committed(ranges)
        forward = [
            TopicPartition(self.topic, p, end) for p, (_, end) in ranges.items() if (committed.get(p) or -1) < end
        ]
        if forward:
            request = [ConsumerGroupTopicPartitions(self.group, forward)]
            with self.refusals("commit the offsets of", "Read"):
                _checked(
                    settled(
                        lambda: self.clients.admin.alter_consumer_group_offsets(request)[self.group].result(
                            timeout=ADMIN_SECONDS
                        )
                    )
                )

    @contextmanager
    def refusals(self, what: str, operation: str) -> Iterator[None]:
        """A refusal from Kafka (``kafkalake.kafka.REFUSED``) as ``KafkaAccessDenied``, saying what to grant; no
        answer in time as an error with what the clients reported meanwhile (a login the brokers stopped taking,
        say an expired token, shows only there)."""
        try:
            yield
        except TimeoutError as exc:
            self.clients.admin.poll(0.5)  # serves the error callbacks that say why
            reported = "; ".join(dict.fromkeys(self.clients.errors[-5:])) or "nothing"
            raise RuntimeError(
                f"topic {self.topic}: Kafka did not answer in {ADMIN_SECONDS} s when asked to {what} group "
                f"{self.group}; the Kafka clients reported: {reported}. Nothing of the plan was committed, and the "
                "next run redoes it"
            ) from exc
        except KafkaException as exc:
            error = refusal(exc)
            if error is None:
                raise
            fix = self._grant(error.code(), operation)
            raise KafkaAccessDenied(
                f"topic {self.topic}: Kafka refused to {what} group {self.group} ({error.name()}: {error.str()}). "
                f"{fix}; nothing of the plan was committed, and the next run redoes it"
            ) from exc

    def _grant(self, code: int, operation: str) -> str:
        """What to grant for a refusal of ``operation`` (Kafka's ACL operation): the Kafka user's ACL, or with MSK
        IAM the role's action on the group's or topic's ARN (docs/deploying.md lists both)."""
        if self.access.iam_region is not None:
            actions = {
                KafkaError.GROUP_AUTHORIZATION_FAILED: (
                    f"kafka-cluster:{'AlterGroup' if operation == 'Read' else 'DescribeGroup'}",
                    f"group/<cluster name>/<cluster uuid>/{self.group}",
                ),
                KafkaError.TOPIC_AUTHORIZATION_FAILED: (
                    "kafka-cluster:DescribeTopic and kafka-cluster:ReadData",
                    f"topic/<cluster name>/<cluster uuid>/{self.topic}",
                ),
            }.get(code)
            if actions is None:
                return "Check the role's kafka-cluster:Connect on msk_cluster_arn (docs/deploying.md)"
            granted, arn = actions
            return f"Grant the archiver's role {granted} on arn:aws:kafka:<region>:<account>:{arn} (docs/deploying.md)"
        on = {
            KafkaError.GROUP_AUTHORIZATION_FAILED: "the group, or on every group prefixed kafkalake-archiver.",
            KafkaError.TOPIC_AUTHORIZATION_FAILED: f"the topic {self.topic}",
        }.get(code)
        grant = f"Grant the archiver's Kafka user {operation} on {on}" if on else "Check the secret's credentials"
        return f"{grant} (docs/deploying.md lists the ACLs)"


def _checked(found: ConsumerGroupTopicPartitions) -> list[TopicPartition]:
    """The partitions of an admin client's answer, raising the first partition's error (a request that failed for
    one partition is failed: nothing reads half an answer)."""
    partitions = list(found.topic_partitions or [])
    for tp in partitions:
        if tp.error is not None:
            raise KafkaException(tp.error)
    return partitions
