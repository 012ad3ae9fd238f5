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
