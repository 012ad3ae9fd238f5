"""A refusal from Kafka while the archiver reads or commits a topic's group offsets says what to grant on which
resource, at once (``spark_jobs.archiver.offsets.Offsets.refusals``)."""

from __future__ import annotations

import threading
from concurrent.futures import Future
from types import SimpleNamespace
from typing import Any, cast

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkalake.kafka_access import KafkaAccess
from spark_jobs.archiver.offsets import KafkaAccessDenied, OffsetClients, Offsets


class RefusingAdmin:
    """Answers every group-offsets request with ``code``, as the broker does for a denied ACL."""

    def __init__(self, code: int) -> None:
        self.code, self.calls = code, 0

    def list_consumer_group_offsets(self, request: list[Any]) -> dict[str, Future[Any]]:
        self.calls += 1
        refused: Future[Any] = Future()
        refused.set_exception(KafkaException(KafkaError(self.code)))
        return {request[0].group_id: refused}


@pytest.mark.parametrize(
    ("code", "grant"),
    [
        (KafkaError.GROUP_AUTHORIZATION_FAILED, "Grant the archiver's Kafka user Describe on the group, or on every"),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, "Grant the archiver's Kafka user Describe on the topic t "),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "Check the secret's credentials "),
    ],
)
def test_a_refused_offsets_read_names_the_resource_and_the_acl_at_once(code: int, grant: str) -> None:
    admin = RefusingAdmin(code)
    clients = SimpleNamespace(admin=admin, lock=threading.Lock(), access=KafkaAccess("b:9092", "http://r"))
    offsets = Offsets(cast(OffsetClients, clients), "t")

    with pytest.raises(KafkaAccessDenied) as refused:
        offsets.committed([0, 1])

    assert str(refused.value).startswith("topic t: Kafka refused to read the committed offsets of group ")
    assert grant in str(refused.value) and "the next run redoes it" in str(refused.value)
    assert admin.calls == 1, "a refusal is not retried"


@pytest.mark.parametrize(
    ("code", "grant"),
    [
        (
            KafkaError.GROUP_AUTHORIZATION_FAILED,
            "Grant the archiver's role kafka-cluster:DescribeGroup on arn:aws:kafka:<region>:<account>:group/"
            "<cluster name>/<cluster uuid>/kafkalake-archiver.t ",
        ),
        (
            KafkaError.TOPIC_AUTHORIZATION_FAILED,
            "Grant the archiver's role kafka-cluster:DescribeTopic and kafka-cluster:ReadData on "
            "arn:aws:kafka:<region>:<account>:topic/<cluster name>/<cluster uuid>/t ",
        ),
        (KafkaError.SASL_AUTHENTICATION_FAILED, "Check the role's kafka-cluster:Connect on msk_cluster_arn"),
    ],
)
def test_with_msk_iam_a_refusal_names_the_iam_action_and_the_arn(code: int, grant: str) -> None:
    access = KafkaAccess("b:9098", "http://r", iam_region="eu-west-1")
    clients = SimpleNamespace(admin=RefusingAdmin(code), lock=threading.Lock(), access=access)
    with pytest.raises(KafkaAccessDenied) as refused:
        Offsets(cast(OffsetClients, clients), "t").committed([0])
    assert grant in str(refused.value) and "ACL" not in str(refused.value)


class SilentAdmin:
    """Never answers (its future times out), as when the brokers stopped taking the client's login; its error
    callback has told why."""

    def __init__(self, errors: list[str]) -> None:
        self.errors = errors

    def list_consumer_group_offsets(self, request: list[Any]) -> dict[str, Future[Any]]:
        silent: Future[Any] = Future()
        silent.set_exception(TimeoutError())
        return {request[0].group_id: silent}

    def poll(self, _timeout: float) -> int:
        self.errors.append("SASL authentication error: token expired at 2026-11-29T05:00:03Z")
        return 0


def test_no_answer_says_what_was_asked_and_what_the_clients_reported() -> None:
    errors: list[str] = []
    access = KafkaAccess("b:9098", "http://r", iam_region="eu-west-1")
    clients = SimpleNamespace(admin=SilentAdmin(errors), lock=threading.Lock(), access=access, errors=errors)

    with pytest.raises(RuntimeError) as silent:
        Offsets(cast(OffsetClients, clients), "t").committed([0])

    message = str(silent.value)
    assert message.startswith("topic t: Kafka did not answer in 15 s when asked to read the committed offsets of ")
    assert "reported: SASL authentication error: token expired at 2026-11-29T05:00:03Z" in message
