"""The local broker's MSK IAM listener (``KAFKA_IAM_PORT``: SASL_SSL, OAUTHBEARER, ``MskIamValidator``) with
librdkafka signing as the jobs do (``aws-msk-iam-sasl-signer-python`` in ``oauth_cb``): the role of the access key
``principal-broker-test`` reads as ``User:broker-test``, whose ACLs decide per topic as IAM would (a role of no
pipeline principal: the permission check maps the archiver's requests only, and these are not the archiver's); a
token of another region, of a wrong secret key or expired fails authentication at once, saying why. The
authorizer's decisions on the role's requests are in the stack's authorizer log. On the twin listener whose tokens
count as expired 15 s after signing (``KAFKA_IAM_BRIEF_PORT``), the jobs' own token callback (``MskIamToken``) told
10 s keeps a consumer reading for three lifetimes; the same callback counting on MSK's 900 s is cut off."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from botocore.credentials import CredentialProvider, Credentials
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import (  # type: ignore[attr-defined] # public there, re-exported without __all__
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafkalake.endpoints import MSK_TOKEN_SECONDS, Endpoints
from kafkalake.kafka_access import MskIamToken
from kafkalake_dev.local.endpoints import (
    ACCESS_KEY,
    IAM_BRIEF_TOKEN_SECONDS,
    IAM_BRIEF_TOLD_SECONDS,
    KAFKA_IAM_BRIEF_PORT,
    KAFKA_IAM_PORT,
)
from kafkalake_dev.local.stack import authorizer_log, local_tls
from kafkalake_dev.local.workload import ensure_topic
from tests.integration.archive_helpers import kafka_acls

pytestmark = pytest.mark.stack
ROLE_KEY = "principal-broker-test"
ROLE = "User:broker-test"
REFUSAL_SECONDS = 5
"""A refused token must fail within this: authentication errors come at once, never as a timeout."""


class Fixed(CredentialProvider):  # type: ignore[misc] # botocore has no types
    def __init__(self, access_key: str, secret_key: str) -> None:
        super().__init__()
        self.credentials = Credentials(access_key, secret_key)

    def load(self) -> Credentials:
        return self.credentials


def signer(
    region: str, secret_key: str = ACCESS_KEY, signed: datetime | None = None
) -> Callable[[str | None], tuple[str, float]]:
    """librdkafka's ``oauth_cb``: a token of MSK's Python signer for ``ROLE_KEY``, signed at ``signed`` (now by
    default). A token signed in the past is handed over as if it were still valid: the broker must refuse it."""
    import botocore.auth
    from aws_msk_iam_sasl_signer import MSKAuthTokenProvider

    def token(_config: str | None = None) -> tuple[str, float]:
        with pytest.MonkeyPatch.context() as patch:
            if signed is not None:
                at = signed.astimezone(UTC).replace(tzinfo=None)
                patch.setattr(botocore.auth, "get_current_datetime", lambda *_a, **_k: at)
            value, expiry_ms = MSKAuthTokenProvider.generate_auth_token_from_credentials_provider(
                region, Fixed(ROLE_KEY, secret_key)
            )
        return str(value), max(expiry_ms / 1000, time.time() + 60)

    return token


def iam_consumer(
    oauth_cb: Callable[[str | None], tuple[str, float]], errors: list[KafkaError], port: int = KAFKA_IAM_PORT
) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "OAUTHBEARER",
            "oauth_cb": oauth_cb,
            "ssl.ca.pem": local_tls().ca_pem(),
            "group.id": f"test-iam-{uuid.uuid4().hex[:8]}",
            "auto.offset.reset": "earliest",
            "error_cb": errors.append,
            "log_level": 0,
        }
    )


def first_message(consumer: Consumer, topic: str, errors: list[KafkaError], seconds: float) -> Any:
    """The first message (or error message) of ``topic`` within ``seconds``; None on an error callback or timeout."""
    consumer.subscribe([topic])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not errors:
        message = consumer.poll(0.2)
        if message is not None:
            return message
    return None


@pytest.fixture
def topics(local_stack: Endpoints) -> Iterator[tuple[str, str]]:
    """Two fresh topics with a record each: one the role may read, one whose Read is denied to it."""
    admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
    readable, denied = (f"test.iam.{kind}.{uuid.uuid4().hex[:8]}" for kind in ("readable", "denied"))
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    for name in (readable, denied):
        ensure_topic(admin, name, 1)
        producer.produce(name, b"hello " + name.encode())
    assert producer.flush(30) == 0
    yield readable, denied
    for future in admin.delete_topics([readable, denied]).values():
        future.result(30)


def test_the_signing_role_reads_what_its_acls_allow_and_is_refused_what_they_deny(
    local_stack: Endpoints, topics: tuple[str, str]
) -> None:
    readable, denied = topics
    deny = AclBinding(
        ResourceType.TOPIC, denied, ResourcePatternType.LITERAL, ROLE, "*", AclOperation.READ, AclPermissionType.DENY
    )
    with kafka_acls(local_stack) as grant:
        grant([deny])
        errors: list[KafkaError] = []
        consumer = iam_consumer(signer(local_stack.region), errors)
        try:
            read = first_message(consumer, readable, errors, 30)
        finally:
            consumer.close()
        assert not errors, errors
        assert read is not None and read.error() is None, read and read.error()
        assert read.value() == b"hello " + readable.encode()

        consumer = iam_consumer(signer(local_stack.region), errors)
        try:
            refused = first_message(consumer, denied, errors, 30)
        finally:
            consumer.close()
        assert refused is not None and refused.error() is not None, errors
        assert refused.error().code() == KafkaError.TOPIC_AUTHORIZATION_FAILED

    decisions = authorizer_log().read_text().splitlines()
    allowed = f"Principal = {ROLE} is Allowed operation = READ from host = 127.0.0.1 on resource = Topic:LITERAL:"
    assert any(f"{allowed}{readable} for request = Fetch" in line for line in decisions)
    refusal = f"Principal = {ROLE} is Denied operation = "
    assert any(refusal in line and f"Topic:LITERAL:{denied} " in line for line in decisions)


REFUSED_TOKENS = {
    "another region": ({"region": "us-east-1"}, "token is for region us-east-1, this cluster is in eu-west-1"),
    "a wrong secret key": ({"secret_key": "not-the-secret"}, "signature does not match for access key " + ROLE_KEY),
    "expired": ({"signed": datetime.now(UTC) - timedelta(minutes=20)}, "token expired at"),
}


@pytest.mark.parametrize(("how", "reason"), REFUSED_TOKENS.values(), ids=REFUSED_TOKENS.keys())
def test_a_token_of_another_region_a_wrong_secret_or_expired_fails_authentication_at_once(
    local_stack: Endpoints, topics: tuple[str, str], how: dict[str, Any], reason: str
) -> None:
    readable, _ = topics
    errors: list[KafkaError] = []
    consumer = iam_consumer(signer(**{"region": local_stack.region, **how}), errors)
    started = time.monotonic()
    try:
        message = first_message(consumer, readable, errors, REFUSAL_SECONDS)
    finally:
        consumer.close()

    assert message is None or message.error() is not None, "read with a refused token"
    assert errors, f"no error within {REFUSAL_SECONDS} s"
    assert time.monotonic() - started < REFUSAL_SECONDS
    assert errors[0].code() == KafkaError._AUTHENTICATION, errors
    assert reason in errors[0].str(), errors[0].str()


@pytest.mark.parametrize(
    ("token_seconds", "goes_on"), [(IAM_BRIEF_TOLD_SECONDS, True), (MSK_TOKEN_SECONDS, False)], ids=["told", "900s"]
)
def test_a_read_outlives_its_tokens_when_the_client_signs_again_before_the_cluster_stops_honouring_them(
    local_stack: Endpoints,
    topics: tuple[str, str],
    monkeypatch: pytest.MonkeyPatch,
    token_seconds: int,
    goes_on: bool,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ROLE_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ACCESS_KEY)
    readable, _ = topics
    errors: list[KafkaError] = []
    consumer = iam_consumer(MskIamToken(local_stack.region, token_seconds), errors, KAFKA_IAM_BRIEF_PORT)
    producer = Producer({"bootstrap.servers": local_stack.kafka_bootstrap})
    consumer.subscribe([readable])
    sent, received = 1, 0  # the fixture's record, then one every 3 s for three token lifetimes
    reading_until = time.monotonic() + 3 * IAM_BRIEF_TOKEN_SECONDS
    next_send = time.monotonic() + 3
    try:
        while time.monotonic() < reading_until + 5:  # then 5 s more for the last record
            if time.monotonic() >= reading_until and received == sent:
                break
            message = consumer.poll(0.5)
            received += message is not None and message.error() is None
            if next_send <= time.monotonic() < reading_until:
                producer.produce(readable, b"later")
                producer.flush(10)
                sent, next_send = sent + 1, next_send + 3
    finally:
        consumer.close()

    if goes_on:
        assert errors == [] and received == sent >= 10, (errors, sent, received)
    else:
        assert errors and errors[0].code() == KafkaError._AUTHENTICATION, errors
        assert any("token expired at" in e.str() and "valid 15 s" in e.str() for e in errors), errors
        assert received < sent  # cut off: what was produced after its token expired never came
