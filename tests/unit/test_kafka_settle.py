"""Kafka calls ride out a broker that has just started, give up with its error when it never settles, and never wait
out a refusal."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kafkalake.kafka import settled


def test_a_call_refused_while_the_coordinator_loads_is_retried() -> None:
    answers: list[object] = [
        KafkaException(KafkaError(KafkaError.NOT_COORDINATOR)),
        KafkaException(KafkaError(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)),
        "committed offsets",
    ]

    def call() -> str:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return str(answer)

    assert settled(call, wait_seconds=10) == "committed offsets"
    assert answers == []


def test_a_broker_that_never_settles_raises_its_last_error() -> None:
    calls = []

    def call() -> str:
        calls.append(1)
        raise KafkaException(KafkaError(KafkaError.NOT_COORDINATOR))

    with pytest.raises(KafkaException) as exc:
        settled(call, wait_seconds=0.6)
    assert exc.value.args[0].code() == KafkaError.NOT_COORDINATOR
    assert len(calls) >= 2


@pytest.mark.parametrize("code", [KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED])
def test_a_refusal_is_raised_at_once(code: int) -> None:
    calls = []

    def call() -> str:
        calls.append(1)
        raise KafkaException(KafkaError(code))

    with pytest.raises(KafkaException):
        settled(call, wait_seconds=10)
    assert calls == [1]
