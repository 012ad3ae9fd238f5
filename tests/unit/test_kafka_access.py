"""Kafka and registry access from a Secrets Manager secret: parsing, errors, and the client settings."""

from __future__ import annotations

import base64
import dataclasses
import json
import pickle
import time
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws
from pydantic import ValidationError

from infra.msk import NotAClusterArn, archiver_resources
from kafkalake.endpoints import Endpoints, EndpointsError
from kafkalake.environments import EnvironmentConfig
from kafkalake.kafka_access import Credentials, CredentialsInvalid, KafkaAccess, kafka_access

ARN_SOURCE = "arn:aws:secretsmanager:eu-west-1:111111111111:secret:kafkalake/staging/kafka"
PEM = "-----BEGIN CERTIFICATE-----\nMIIB...\n-----END CERTIFICATE-----\n"
CA = json.dumps(PEM)[1:-1]
"""``PEM`` as a JSON string in the secret holds it (its line breaks escaped)."""


def endpoints(bootstrap: str, secret_arn: str | None = None) -> Endpoints:
    return Endpoints(bootstrap, "http://registry:8081", "eu-west-1", "lake", kafka_secret_arn=secret_arn)


def test_no_secret_means_plain_access() -> None:
    access = kafka_access(endpoints("b:9092"))
    assert access.client_config() == {"bootstrap.servers": "b:9092"}
    assert access.spark_options() == {"kafka.bootstrap.servers": "b:9092"}


@mock_aws
def test_secret_gives_sasl_settings_to_both_kafka_clients_and_the_registry() -> None:
    secrets = boto3.client("secretsmanager", region_name="eu-west-1")
    value = {"username": "svc", "password": 'p"w\\x', "registry_username": "reg", "registry_password": "rpw"}
    arn = secrets.create_secret(Name="kafkalake/staging/kafka", SecretString=json.dumps(value))["ARN"]
    access = kafka_access(endpoints("b:9096", arn), secrets)
    assert access.client_config() == {
        "bootstrap.servers": "b:9096",
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "svc",
        "sasl.password": 'p"w\\x',
    }
    options = access.spark_options()
    assert options["kafka.security.protocol"] == "SASL_SSL" and options["kafka.sasl.mechanism"] == "SCRAM-SHA-512"
    assert options["kafka.sasl.jaas.config"] == (
        'org.apache.kafka.common.security.scram.ScramLoginModule required username="svc" password="p\\"w\\\\x";'
    )
    assert access.registry()._http.auth is not None


@pytest.mark.parametrize(
    ("secret", "message"),
    [
        ("not json", "is not JSON"),
        ('["a"]', "must be a JSON object"),
        ('{"username": "svc"}', "missing ['password']"),
        ('{"username": "u", "password": "p", "user": "x"}', "unknown ['user']"),
        ('{"username": "u", "password": "p", "mechanism": "GSSAPI"}', "mechanism 'GSSAPI' is not one of"),
        (
            '{"username": "u", "password": "p", "security_protocol": "PLAINTEXT"}',
            "security_protocol 'PLAINTEXT' is not one of SASL_SSL, SASL_PLAINTEXT, SSL",
        ),
        (
            '{"username": "u", "password": "p", "security_protocol": "SSL"}',
            "(TLS with a client certificate): missing ['certificate_pem', 'key_pem'], unknown ['password', 'username']",
        ),
        (
            '{"security_protocol": "SSL", "certificate_pem": "' + CA + '", "key_pem": "MIIE..."}',
            "key_pem its unencrypted PKCS#8 key",
        ),
        (
            '{"username": "u", "password": "p", "ca_pem": "MIIB..."}',
            "ca_pem must be the brokers' CA certificate in PEM",
        ),
        (
            '{"username": "u", "password": "p", "security_protocol": "SASL_PLAINTEXT", "ca_pem": "' + CA + '"}',
            "with security_protocol SASL_SSL",
        ),
    ],
)
def test_bad_secrets_say_what_is_wrong_and_where(secret: str, message: str) -> None:
    with pytest.raises(CredentialsInvalid) as raised:
        Credentials.from_secret(secret, ARN_SOURCE)
    assert message in str(raised.value) and ARN_SOURCE in str(raised.value)


def test_a_private_ca_goes_to_both_kafka_clients_and_nothing_else() -> None:
    credentials = Credentials.from_secret(json.dumps({"username": "u", "password": "p", "ca_pem": "\n" + PEM}), "x")
    access = KafkaAccess("b:9096", "https://registry", credentials)
    assert access.client_config()["ssl.ca.pem"] == "\n" + PEM
    options = access.spark_options()
    assert (options["kafka.ssl.truststore.type"], options["kafka.ssl.truststore.certificates"]) == ("PEM", "\n" + PEM)
    without = KafkaAccess("b:9096", "https://registry", Credentials("u", "p"))
    assert "ssl.ca.pem" not in without.client_config() and not any("truststore" in k for k in without.spark_options())


def test_a_client_certificate_goes_to_both_kafka_clients_without_sasl() -> None:
    key = "-----BEGIN PRIVATE KEY-----\nMIGH...\n-----END PRIVATE KEY-----\n"
    secret = {"security_protocol": "SSL", "certificate_pem": PEM, "key_pem": key, "ca_pem": PEM}
    access = KafkaAccess("b:9094", "https://registry", Credentials.from_secret(json.dumps(secret), "x"))
    assert access.client_config() == {
        "bootstrap.servers": "b:9094",
        "security.protocol": "SSL",
        "ssl.certificate.pem": PEM,
        "ssl.key.pem": key,
        "ssl.ca.pem": PEM,
    }
    assert access.spark_options() == {
        "kafka.bootstrap.servers": "b:9094",
        "kafka.security.protocol": "SSL",
        "kafka.ssl.keystore.type": "PEM",
        "kafka.ssl.keystore.certificate.chain": PEM,
        "kafka.ssl.keystore.key": key,
        "kafka.ssl.truststore.type": "PEM",
        "kafka.ssl.truststore.certificates": PEM,
    }


def iam_endpoints(secret_arn: str | None = None, auth: str | None = "msk_iam") -> Endpoints:
    return Endpoints(
        "b:9098", "http://registry:8081", "eu-west-2", "lake", kafka_secret_arn=secret_arn, kafka_auth=auth
    )


def test_msk_iam_without_a_secret_signs_with_the_role_for_the_region_in_both_kafka_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
    access = kafka_access(iam_endpoints())
    config = access.client_config()
    token_of = config.pop("oauth_cb")
    assert config == {"bootstrap.servers": "b:9098", "security.protocol": "SASL_SSL", "sasl.mechanisms": "OAUTHBEARER"}
    assert pickle.loads(pickle.dumps(token_of)) == token_of  # the task reader's executors get it by name
    token, expires = token_of("")
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    assert url.startswith("https://kafka.eu-west-2.amazonaws.com/?Action=kafka-cluster%3AConnect&")
    assert "X-Amz-Credential=AKIDEXAMPLE%2F" in url and "%2Feu-west-2%2Fkafka-cluster%2Faws4_request" in url
    assert "example-secret" not in url and 0 < expires - time.time() <= 900
    options = access.spark_options()
    assert options["kafka.sasl.mechanism"] == "OAUTHBEARER" and options["kafka.security.protocol"] == "SASL_SSL"
    assert options["kafka.sasl.login.callback.handler.class"].startswith("software.amazon.msk.auth.iam.")
    assert not any("password" in k or "username" in k for k in options)


def test_tokens_honoured_briefly_are_signed_again_at_80_percent_of_that_by_both_kafka_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIDEXAMPLE")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
    brief = dataclasses.replace(iam_endpoints(), kafka_token_seconds=15)
    access = kafka_access(brief)
    token, expires = access.client_config()["oauth_cb"]("")
    url = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
    signed = datetime.strptime(url.split("X-Amz-Date=")[1][:16], "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
    assert expires == signed.timestamp() + 15  # librdkafka signs again at 80% of 15 s, not of the signed 900 s
    options = access.spark_options()
    # Kafka's login refreshes at the signed expiry (900 s) minus the buffer: 12 s after signing, 80% of 15 s
    assert options["kafka.sasl.login.refresh.buffer.seconds"] == "888"
    assert options["kafka.sasl.login.refresh.min.period.seconds"] == "1"
    assert not any("refresh" in k for k in kafka_access(iam_endpoints()).spark_options())  # MSK's 900 s: defaults
    assert Endpoints.from_env(brief.to_env()) == brief
    for wrong in ("4", "901", "15s"):
        with pytest.raises(EndpointsError, match=f"KAFKALAKE_KAFKA_TOKEN_SECONDS='{wrong}' is not a number"):
            Endpoints.from_env(
                dataclasses.replace(brief, kafka_token_seconds=None).to_env() | {"KAFKALAKE_KAFKA_TOKEN_SECONDS": wrong}
            )


@mock_aws
def test_msk_iam_reads_only_the_registry_credentials_and_ca_from_a_secret() -> None:
    secrets = boto3.client("secretsmanager", region_name="eu-west-1")
    value = {"registry_username": "reg", "registry_password": "rpw", "ca_pem": PEM}
    arn = secrets.create_secret(Name="kafkalake/staging/registry", SecretString=json.dumps(value))["ARN"]
    access = kafka_access(iam_endpoints(arn), secrets)
    assert access.client_config()["ssl.ca.pem"] == PEM
    assert access.credentials is not None and access.credentials.registry_username == "reg"
    assert access.spark_options()["kafka.ssl.truststore.certificates"] == PEM
    kafka_secret = secrets.create_secret(
        Name="kafkalake/staging/kafka", SecretString=json.dumps({"username": "u", "password": "p"})
    )["ARN"]
    with pytest.raises(CredentialsInvalid, match=r"the job.s role authenticates to Kafka.*remove password, username"):
        kafka_access(iam_endpoints(kafka_secret), secrets)


def test_an_unknown_kafka_auth_is_refused_with_the_choices() -> None:
    with pytest.raises(CredentialsInvalid, match="kafka_auth 'iam' is not one of msk_iam"):
        kafka_access(iam_endpoints(auth="iam"))


def test_msk_iam_and_its_cluster_arn_go_together_in_an_environment() -> None:
    base = {"name": "x", "bucket": "b", "queue_name": "q", "dead_letter_queue_name": "d", "event_bus_name": "e"}
    cluster = "arn:aws:kafka:eu-west-1:111111111111:cluster/lake/5e1c0a9f-3b1d-4c0e-9d5a-0c7e2f4b8a61-2"
    assert EnvironmentConfig(**base, kafka_auth="msk_iam", msk_cluster_arn=cluster).endpoints().kafka_auth == "msk_iam"
    with pytest.raises(ValidationError, match="kafka_auth: msk_iam and msk_cluster_arn go together"):
        EnvironmentConfig(**base, kafka_auth="msk_iam")
    with pytest.raises(ValidationError, match="msk_cluster_arn"):
        EnvironmentConfig(**base, kafka_auth="msk_iam", msk_cluster_arn="arn:aws:kafka:eu-west-1:1:topic/a/b/c")
    with pytest.raises(NotAClusterArn, match="is not an MSK cluster ARN"):
        archiver_resources("arn:aws:kafka:eu-west-1:111111111111:topic/lake/x/t", ["t"])
    found = archiver_resources(cluster, ["b.t", "a.t", "a.t"])
    assert found.topics == (
        cluster.replace(":cluster/", ":topic/") + "/a.t",
        cluster.replace(":cluster/", ":topic/") + "/b.t",
    )
    assert found.groups[0].endswith("/kafkalake-archiver.a.t") and ":group/lake/" in found.groups[0]
